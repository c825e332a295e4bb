"""A broken flows.har is refused in one line that names the file, the entry's index and the field;
a request URL that is no URL is never accepted (it would replay with recordings left unserved)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from faultproxy.replay_store import har
from faultproxy.replay_store.har import StoreError
from tests.support.agent_commands import PROBE_AGENT


@pytest.fixture
def broken(entry_dir, tmp_path):
    """A copy of the entry whose HAR `change(entries)` edits; returns the copy's folder."""
    def make(change) -> Path:
        folder = tmp_path / "store" / entry_dir.name
        folder.mkdir(parents=True)
        (folder / har.EPISODE_FILE).write_bytes((entry_dir / har.EPISODE_FILE).read_bytes())
        document = json.loads((entry_dir / har.HAR_FILE).read_text())
        change(document["log"]["entries"])
        (folder / har.HAR_FILE).write_text(json.dumps(document))
        return folder
    return make


def setter(index: int, *keys: str, value):
    def change(entries: list) -> None:
        target = entries
        for key in (index, *keys[:-1]):
            target = target[key]
        target[keys[-1]] = copy.deepcopy(value)
    return change


CASES = [
    ("url_not_a_url", setter(1, "request", "url", value="not a url"),
     "log.entries[1].request.url", "expected an absolute http(s) URL, got 'not a url'"),
    ("url_ftp", setter(0, "request", "url", value="ftp://x/y"), "log.entries[0].request.url", "got 'ftp://x/y'"),
    ("url_bad_port", setter(2, "request", "url", value="http://h:99999/"), "log.entries[2].request.url", "got"),
    ("entry_not_object", lambda entries: entries.__setitem__(1, 5), "log.entries[1]", "expected an object, got integer 5"),
    ("request_missing", lambda entries: entries[0].pop("request"), "log.entries[0].request", "expected an object, got null"),
    ("method_number", setter(0, "request", "method", value=7), "log.entries[0].request.method", "got 7"),
    ("status_text", setter(2, "response", "status", value="ok"), "log.entries[2].response.status", "got 'ok'"),
    ("headers_not_list", setter(0, "request", "headers", value="x"), "log.entries[0].request.headers", "expected a list"),
    ("header_not_pair", setter(0, "request", "headers", value=[["a", "b"]]), "log.entries[0].request.headers[0]",
     'expected {"name": string, "value": string}'),
    ("body_bad_base64", setter(2, "request", "postData", value={"text": "%%%", "_encoding": "base64"}),
     "log.entries[2].request.postData.text", "is not valid base64"),
    ("body_unknown_encoding", setter(1, "response", "content", value={"text": "x", "encoding": "rot13"}),
     "log.entries[1].response.content.encoding", "expected \"base64\" or none, got 'rot13'"),
    ("sse_wrong_shape", setter(1, "_faultproxy", "sse", value=[["soon", "data: x"]]), "log.entries[1]._faultproxy.sse[0]",
     "expected [seconds, event text]"),
    ("seq_text", setter(0, "_faultproxy", "seq", value="one"), "log.entries[0]._faultproxy.seq", "got string 'one'"),
    ("ws_messages_not_list", setter(0, "_faultproxy", "websocket", value={"messages": "hi"}),
     "log.entries[0]._faultproxy.websocket.messages", "expected a list"),
    ("ws_message_from_nobody", setter(0, "_faultproxy", "websocket", value={"messages": [{"from": "x", "type": "text"}]}),
     "log.entries[0]._faultproxy.websocket.messages[0].from", "expected client or server, got 'x'"),
    ("ws_binary_without_hash", setter(0, "_faultproxy", "websocket",
                                      value={"messages": [{"from": "server", "type": "binary"}]}),
     "log.entries[0]._faultproxy.websocket.messages[0].sha256", "expected the binary message's sha256"),
    ("ws_close_code", setter(0, "_faultproxy", "websocket", value={"messages": [], "close": {"code": 7}}),
     "log.entries[0]._faultproxy.websocket.close.code", "expected a close code, got 7"),
]


@pytest.mark.parametrize(("name", "change", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_broken_har_entry_is_named_by_index_and_field(broken, name, change, field, message):
    folder = broken(change)
    with pytest.raises(StoreError) as caught:
        har.read_entry(folder)
    assert caught.value.path == str(folder / har.HAR_FILE) and caught.value.field == field
    assert message in caught.value.message


def test_replay_of_a_har_with_a_url_that_is_no_url_exits_2_in_one_line(broken):
    folder = broken(setter(1, "request", "url", value="not a url"))
    result = subprocess.run([sys.executable, "-m", "faultproxy", "replay", str(folder.parent), "--", *PROBE_AGENT],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"faultproxy: {folder / har.HAR_FILE}: log.entries[1].request.url: "
                                          "expected an absolute http(s) URL, got 'not a url'"]
