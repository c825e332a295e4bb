"""schema_drift's `first:` ops and prompt_injection's default place act on answers whose field
names nobody told them: the first value of a type in the answer's text order, nested or in a
list; in an MCP tool result, the tool's own answer in its JSON text items, never the protocol's
envelope or content blocks, nor structuredContent, which clients check against the outputSchema."""

from __future__ import annotations

from faultproxy.proxy.faults.prompt_injection import plant_instruction
from faultproxy.proxy.faults.schema_drift import apply_drift
from faultproxy.scenarios.faults.schema_drift import DriftOp

RENAME = DriftOp("rename", (), to="{field}_v2", first="string")
RETYPE = DriftOp("retype", (), to="string", first="number")


def test_first_ops_edit_the_first_value_of_their_type_wherever_it_sits() -> None:
    nested = {"count": 2, "vehicle": {"odometer_km": 1200, "vin": "V1", "state": "parked"}, "note": "x"}
    drifted, changed = apply_drift(nested, (RENAME, RETYPE))
    assert changed and drifted == {"count": "2", "vehicle": {"odometer_km": 1200, "vin_v2": "V1", "state": "parked"},
                                   "note": "x"}
    listed = [{"vin": "V1", "km": 1.5}, {"vin": "V2", "km": 3}]
    drifted, _ = apply_drift(listed, (RENAME, RETYPE))
    assert drifted == [{"vin_v2": "V1", "km": "1.5"}, {"vin": "V2", "km": 3}]
    # At or below a path; booleans are no numbers; nothing of the type: nothing changes.
    below = DriftOp("remove", ("b",), first="integer")
    assert apply_drift({"a": 1, "b": {"flag": True, "n": 4, "m": 5}}, (below,))[0] == {"a": 1, "b": {"flag": True,
                                                                                                   "m": 5}}
    assert apply_drift({"flag": True, "items": []}, (RETYPE,)) == ({"flag": True, "items": []}, False)


def test_first_ops_drift_an_mcp_tools_own_answer_not_the_protocols() -> None:
    answer = {"jsonrpc": "2.0", "id": 3, "result": {
        "content": [{"type": "text", "text": "no JSON here"}, {"type": "text", "text": '{"vin": "V1", "km": 4}'}],
        "structuredContent": {"vin": "V1", "km": 4}, "isError": False}}
    drifted, changed = apply_drift(answer, (RENAME, RETYPE))
    assert changed and drifted == {"jsonrpc": "2.0", "id": 3, "result": {
        "content": [{"type": "text", "text": "no JSON here"}, {"type": "text", "text": '{"vin_v2":"V1","km":"4"}'}],
        "structuredContent": {"vin": "V1", "km": 4}, "isError": False}}
    notification = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
    assert apply_drift(notification, (RENAME,)) == (notification, False)


def test_an_injection_goes_where_any_world_has_a_string() -> None:
    top = {"vin": "V1", "state": "parked", "km": 3}
    planted, where = plant_instruction(top, "DO X", None)
    assert where == ["vin", "state"] and planted["state"] == "parked\n\nDO X"
    planted, where = plant_instruction({"vehicle": {"km": 3, "vin": "V1"}}, "DO X", None)
    assert where == ["vin"] and planted == {"vehicle": {"km": 3, "vin": "V1\n\nDO X"}}
    planted, where = plant_instruction([{"vin": "V1"}, {"vin": "V2"}], "DO X", None)
    assert where == ["vin"] and planted == [{"vin": "V1\n\nDO X"}, {"vin": "V2"}]
    assert plant_instruction({"km": 3, "tags": []}, "DO X", None)[1] == []
