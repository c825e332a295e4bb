"""Store entries, run directories and scenarios are untrusted input (they arrive in pull requests):
a name in them becomes a path only when it is one plain name, and nothing is written outside
--out (or the store) — not by a crafted name, not through a planted symbolic link. Each refusal is
one line naming the file and the field, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from faultproxy.cli.main import main
from faultproxy.formats.paths import UnsafePath, name_problem, relative_file
from faultproxy.replay_store import entry_writer, har
from tests.support.agent_commands import PROBE_AGENT
from tests.support.refusals import one_line_error
from tests.support.run_records import LOOKUP, lookup_ok, lookup_wrong, make_run

@pytest.fixture
def faultproxy(capsys, monkeypatch):
    """Run the command in this process: (exit status, stderr)."""
    def call(*args: str, cwd: Path | None = None) -> tuple[int, str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's own refusals
            code = exit.code
        return code, capsys.readouterr().err
    return call


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


@pytest.mark.parametrize(("value", "problem"), [
    ("../../../escape_ep", "without '/'"), ("/var/x/ABS_ep", "without '/'"), ("a\\b", "without '/'"),
    ("..", "not '..'"), (".", "not '.'"), ("", "non-empty"), ("x\x00y", "NUL"), ("x\ny", "control"),
    ("x\x1by", "control"), (7, "non-empty string"),
])
def test_a_name_that_is_not_one_plain_path_component_is_refused(value, problem):
    assert problem in name_problem(value)


def test_plain_names_pass():
    for value in ("refund_order_1001.t0", "cause-x--rate_limit", "a.b-c_d", "...t0"):
        assert name_problem(value) is None


def test_a_relative_file_may_not_lead_out_through_a_link(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "flows").symlink_to(tmp_path)
    with pytest.raises(UnsafePath, match="leads out of"):
        relative_file(tmp_path / "run", "flows/x.jsonl", "episodes.jsonl", "trace")
    assert relative_file(tmp_path / "run", "a/b.jsonl", "f", "trace") == tmp_path / "run" / "a" / "b.jsonl"


# --- replay store entries ------------------------------------------------------------------------


def tampered_store(entry_dir: Path, root: Path, change) -> Path:  # noqa: F811
    store = root / "deep" / "store"
    shutil.copytree(entry_dir, store / entry_dir.name)
    document = json.loads((store / entry_dir.name / har.EPISODE_FILE).read_text())
    change(document)
    (store / entry_dir.name / har.EPISODE_FILE).write_text(json.dumps(document))
    return store


@pytest.mark.parametrize("key", ["../../../escape_ep", "ABSOLUTE", "a/b", "x\x00y", "x\ty", ".."])
def test_an_entry_whose_episode_key_would_leave_out_is_refused(faultproxy, entry_dir, tmp_path, key):  # noqa: F811
    key = str(tmp_path / "ABS_ep") if key == "ABSOLUTE" else key
    store = tampered_store(entry_dir, tmp_path, lambda d: d.__setitem__("episode", key))
    before = files_under(tmp_path)
    done = faultproxy("replay", str(store), "--out", str(tmp_path / "deep" / "out"), "--", *PROBE_AGENT)
    line = one_line_error(*done)
    assert line.startswith(f"faultproxy: {store / entry_dir.name / har.EPISODE_FILE}: episode: ")
    assert files_under(tmp_path) - before <= {Path("deep/out")}  # at most the empty --out itself
    assert not list(tmp_path.rglob("*escape_ep*")) and not list(tmp_path.rglob("ABS_ep*"))


def test_an_entry_whose_task_id_is_a_path_is_refused(faultproxy, entry_dir, tmp_path):  # noqa: F811
    store = tampered_store(entry_dir, tmp_path, lambda d: d["task"].__setitem__("id", "../../t"))
    line = one_line_error(*faultproxy("replay", str(store), "--", *PROBE_AGENT))
    assert line.endswith(": task.id: must be a plain name, without '/' or '\\' (it becomes a file or folder name), "
                         "got '../../t'")


def test_replay_accept_never_writes_through_an_entry_folder_linked_out(faultproxy, entry_dir, tmp_path):  # noqa: F811
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(entry_dir, elsewhere / entry_dir.name)
    document = json.loads((elsewhere / entry_dir.name / har.EPISODE_FILE).read_text())
    document["expect"] = "fail"  # replay shows pass: --accept would rewrite this file
    (elsewhere / entry_dir.name / har.EPISODE_FILE).write_text(json.dumps(document))
    original = (elsewhere / entry_dir.name / har.EPISODE_FILE).read_bytes()
    store = tmp_path / "store"
    store.mkdir()
    (store / entry_dir.name).symlink_to(elsewhere / entry_dir.name)
    line = one_line_error(*faultproxy("replay", str(store), "--accept", "--", *PROBE_AGENT))
    assert line == (f"faultproxy: {store / entry_dir.name}: is a symbolic link leading out of the replay store "
                    f"(to {elsewhere / entry_dir.name}); faultproxy never writes through one: remove it")
    assert (elsewhere / entry_dir.name / har.EPISODE_FILE).read_bytes() == original


def test_a_store_folder_without_episode_json_is_named_not_skipped(faultproxy, entry_dir, tmp_path):  # noqa: F811
    store = tmp_path / "store"
    shutil.copytree(entry_dir, store / entry_dir.name)
    (store / "half-copied").mkdir()
    (store / "half-copied" / har.HAR_FILE).write_text("{}")
    line = one_line_error(*faultproxy("replay", str(store), "--", *PROBE_AGENT))
    assert line == (f"faultproxy: {store / 'half-copied'}: not a store entry: it has no episode.json; "
                    "restore it or move it out of the store")


# --- run directories -----------------------------------------------------------------------------


def test_a_trace_field_leading_out_of_the_run_directory_is_refused(faultproxy, tmp_path):
    run = make_run(tmp_path / "run", [LOOKUP], 2, {("", "lookup_a"): [lookup_ok(), lookup_wrong()]})
    log = run / "episodes.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for line in lines:
        if line.get("trace"):
            line["trace"] = "../outside.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    line = one_line_error(*faultproxy("report", str(run)))
    assert line == (f"faultproxy: {log}: trace: must be a relative path inside {run}: each part must be a name, "
                    "not '..', got '../outside.jsonl'")


def test_a_resumed_run_never_appends_through_a_log_linked_out_of_the_run_directory(faultproxy, tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").symlink_to(outside)
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t", "prompt": "ok"}) + "\n")
    line = one_line_error(*faultproxy("run", "--scenario", "rate_limit", "--tasks", str(tmp_path / "tasks.jsonl"),
                               "--out", str(run), "--", *PROBE_AGENT))
    assert line == (f"faultproxy: {run / 'episodes.jsonl'}: is a symbolic link leading out of the run directory "
                    f"(to {outside}); faultproxy never writes through one: remove it")
    assert outside.read_text() == "precious\n"
    assert not (run / "plan.json").exists()


@pytest.mark.parametrize("command", [("proxy", "--scenario", "rate_limit", "--port", "0"), ("mcp", "--", "true")])
def test_a_trace_folder_with_a_link_out_is_refused_before_anything_is_appended(faultproxy, tmp_path, command):
    outside = tmp_path / "outside.jsonl"
    outside.write_text("precious\n")
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "ep.jsonl").symlink_to(outside)
    name, *rest = command
    line = one_line_error(*faultproxy(name, "--trace-dir", str(flows), *rest))
    assert line == (f"faultproxy: {flows / 'ep.jsonl'}: is a symbolic link leading out of the trace folder "
                    f"(to {outside}); faultproxy never writes through one: remove it")
    assert outside.read_text() == "precious\n"

# --- scenarios and --out -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "problem"), [
    ('"../../x"', "must be a plain name, without '/' or '\\' (it becomes a file or folder name), got '../../x'"),
    ('"ABSOLUTE"', "must be a plain name, without '/'"),
    ('"a\\0b"', "must not hold a NUL character, got 'a\\x00b'"),
    ('".."', "must be a name, not '..'"),
])
def test_a_scenario_name_that_would_name_a_folder_outside_runs_is_refused(faultproxy, tmp_path, name, problem):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    name = f'"{tmp_path}/ABS"' if name == '"ABSOLUTE"' else name
    (work / "s.yaml").write_text(f"name: {name}\ndescription: d\nrules: []\n")
    (work / "tasks.jsonl").write_text(json.dumps({"id": "t", "prompt": "ok"}) + "\n")
    before = files_under(tmp_path)
    line = one_line_error(*faultproxy("run", "--scenario", "s.yaml", "--tasks", "tasks.jsonl", "--", *PROBE_AGENT,
                               cwd=work))
    assert line.startswith("faultproxy: s.yaml:1: name: ") and problem in line
    assert files_under(tmp_path) == before
    assert problem in one_line_error(*faultproxy("check", "s.yaml", cwd=work))


def test_a_rule_name_with_a_nul_is_refused_by_check(faultproxy, tmp_path):
    (tmp_path / "s.yaml").write_text('name: ok\ndescription: d\nrules:\n  - name: "r\\0"\n'
                                     "    fault: {type: delay, ms: 1}\n")
    assert one_line_error(*faultproxy("check", "s.yaml", cwd=tmp_path)) == (
        "faultproxy: s.yaml:4: rules[0].name: must not hold a NUL character, got 'r\\x00'")


def test_check_of_a_directory_says_it_is_a_directory(faultproxy, tmp_path):
    assert one_line_error(*faultproxy("check", str(tmp_path))) == (
        f"faultproxy: {tmp_path}: is a directory: give scenario files (.yaml) or bundled scenario names")


@pytest.mark.parametrize("command", [["run", "--scenario", "rate_limit"], ["replay", "store"],
                                     ["freeze", "run", "--to"]])
def test_an_empty_output_folder_is_refused_rather_than_meaning_here(faultproxy, tmp_path, command):
    option = [] if command[-1] == "--to" else ["--out"]
    code, err = faultproxy(*command, *option, "", "--", *PROBE_AGENT, cwd=tmp_path)
    assert code == 2 and "must name a folder, got ''" in err.splitlines()[-1]
    assert files_under(tmp_path) == set()


def test_an_entry_update_never_writes_through_a_planted_link(entry_dir, tmp_path):  # noqa: F811
    """minimize and --accept rewrite episode.json: not through a link planted as its scratch file,
    nor through episode.json itself being a link (the link is replaced, its target left alone)."""
    folder = tmp_path / "entry"
    shutil.copytree(entry_dir, folder)
    scratch_target, entry_target = tmp_path / "scratch-target", tmp_path / "entry-target"
    scratch_target.write_text("precious")
    (folder / "episode.json.tmp").symlink_to(scratch_target)
    entry_writer.update_episode(folder, {"expect": "fail"})
    assert scratch_target.read_text() == "precious"
    assert json.loads((folder / har.EPISODE_FILE).read_text())["expect"] == "fail"
    (folder / har.EPISODE_FILE).rename(entry_target)
    (folder / har.EPISODE_FILE).symlink_to(entry_target)
    entry_writer.update_episode(folder, {"expect": "pass"})
    assert json.loads(entry_target.read_text())["expect"] == "fail"
    assert not (folder / har.EPISODE_FILE).is_symlink()
    assert json.loads((folder / har.EPISODE_FILE).read_text())["expect"] == "pass"
