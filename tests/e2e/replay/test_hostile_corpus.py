"""The rest of the hostile-input corpus (issue 22, item 7): each input that was once a traceback
or silently accepted is now one line naming the file and field (or the option), exit 2, with
nothing run; and the two unclear answers say what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from faultproxy.evaluator.aggregate import build_report
from faultproxy.replay_store import har
from faultproxy.replay_store.har import StoreError
from faultproxy.tasks.tasks_file import TaskError, load_tasks
from tests.support.agent_commands import PROBE_AGENT
from tests.support.refusals import UNSET, one_task_file, refusal
from tests.support.run_records import LOOKUP, lookup_ok, lookup_wrong, make_run


@pytest.fixture
def refused(capsys, monkeypatch):
    """Run the command in this process; assert exit 2 and one line on stderr, and return it."""
    def call(*args: str) -> str:
        monkeypatch.delenv(UNSET, raising=False)
        return refusal(capsys, list(args))
    return call


# --- tracebacks ----------------------------------------------------------------------------------


def test_freeze_to_an_existing_file(refused, entry_dir, tmp_path):  # noqa: F811
    (tmp_path / "store").write_text("not a folder")
    line = refused("freeze", str(entry_dir.parents[1] / "run"), "--to", str(tmp_path / "store"))
    assert line == f"faultproxy: {tmp_path / 'store'}: is a file, not a store folder"


def test_replay_json_into_an_existing_folder(refused, entry_dir, tmp_path):  # noqa: F811
    line = refused("replay", str(entry_dir), "--json", str(tmp_path), "--", *PROBE_AGENT)
    assert line == f"faultproxy: --json {tmp_path}: is a folder; give the name of a file to write"


# --- tasks files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["not a url", "ftp://x/reset", "file:///etc/passwd"])
@pytest.mark.parametrize("field", ["reset_url", "state_url"])
def test_a_reset_or_state_url_that_is_not_http(tmp_path, field, url):
    with pytest.raises(TaskError) as caught:
        load_tasks(one_task_file(tmp_path, **{field: url}))
    assert str(caught.value) == f"{tmp_path / 'tasks.jsonl'}:1: {field}: must be an http(s) URL, got {url!r}"


def test_a_url_template_that_expands_to_no_http_url_is_refused_before_the_run(refused, tmp_path, monkeypatch):
    monkeypatch.setenv("SHOP_ROOT", "file:///etc")
    tasks = one_task_file(tmp_path, state_url="${SHOP_ROOT}/passwd")
    line = refused("run", "--scenario", "rate_limit", "--tasks", str(tasks), "--out", str(tmp_path / "run"),
                   "--", *PROBE_AGENT)
    assert line.endswith("task t: state_url '${SHOP_ROOT}/passwd' does not expand to an http(s) URL")
    assert not (tmp_path / "run" / "plan.json").exists()


def test_a_jsonl_tasks_file_over_16_mib(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "t", "prompt": "x" * (20 << 20)}) + "\n")
    with pytest.raises(TaskError, match=r"tasks.jsonl: the file is larger than 16,777,216 characters$"):
        load_tasks(path)


def test_a_wall_budget_beyond_a_day(tmp_path):
    with pytest.raises(TaskError) as caught:
        load_tasks(one_task_file(tmp_path, budgets={"wall_s": 1e308}))
    assert str(caught.value).endswith(":1: budgets.wall_s: must be at most 86,400 seconds (a day), got 1e+308")
    assert load_tasks(one_task_file(tmp_path, budgets={"wall_s": 86_400})).tasks[0].budgets.wall_s == 86_400


def test_a_task_secret_naming_an_unset_variable(refused, tmp_path):
    tasks = one_task_file(tmp_path, secrets=[UNSET])
    line = refused("run", "--scenario", "rate_limit", "--tasks", str(tasks), "--out", str(tmp_path / "run"),
                   "--", *PROBE_AGENT)
    assert line == (f"faultproxy: {tasks}:1: task t: secrets: {UNSET} is not set here, so there is nothing to "
                    "redact; set it before the run")
    assert not (tmp_path / "run" / "plan.json").exists()


# --- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    (["--only", ""], "--only '' names no task: give task ids separated by commas, or leave it out"),
    (["--only", " , "], "--only ' , ' names no task"),
    (["--upstream", "a=http://h1", "--upstream", "a=http://h2"], "--upstream a is given twice"),
    (["--insecure-upstream", "--upstream-ca", "CA"], "and --insecure-upstream contradict each other"),
])
def test_run_options_that_were_silently_accepted(refused, tmp_path, options, message):
    options = [str(tmp_path / "ca.pem") if option == "CA" else option for option in options]
    tasks = one_task_file(tmp_path)
    line = refused("run", "--scenario", "rate_limit", "--tasks", str(tasks), "--out", str(tmp_path / "run"),
                   *options, "--", *PROBE_AGENT)
    assert message in line
    assert not (tmp_path / "run").exists()


def test_the_proxy_refuses_a_ca_with_insecure_upstream_too(refused, tmp_path):
    line = refused("proxy", "--scenario", "rate_limit", "--insecure-upstream", "--upstream-ca", str(tmp_path / "c"))
    assert "contradict each other" in line


def test_replay_with_a_negative_budget(refused, entry_dir):  # noqa: F811
    line = refused("replay", str(entry_dir), "--budget-s", "-5", "--", *PROBE_AGENT)
    assert line == "faultproxy: --budget-s must be more than 0 to 86,400, got -5"


# --- store entries -------------------------------------------------------------------------------


def broken_har(entry_dir: Path, folder: Path, change) -> Path:  # noqa: F811
    shutil.copytree(entry_dir, folder)
    document = json.loads((folder / har.HAR_FILE).read_text())
    text = change(document)
    (folder / har.HAR_FILE).write_text(text if isinstance(text, str) else json.dumps(document))
    return folder


@pytest.mark.parametrize(("change", "field", "message"), [
    (lambda d: d["log"].__setitem__("version", "0.9"), "log.version", "expected HAR 1.2 or 1.1, got '0.9'"),
    (lambda d: d["log"].__delitem__("version"), "log.version", "expected HAR 1.2 or 1.1, got None"),
    (lambda d: json.dumps(d).replace('"time": ', '"time": NaN, "x": ', 1), None, "NaN is not a JSON number"),
    (lambda d: d["log"].__setitem__("_faultproxy", "garbage"), "log._faultproxy", "expected an object"),
    (lambda d: d["log"]["entries"][0].__setitem__("_faultproxy", 7), "log.entries[0]._faultproxy",
     "expected an object"),
    (lambda d: d["log"]["entries"][0]["_faultproxy"].__setitem__("forwarded", "maybe"),
     "log.entries[0]._faultproxy.forwarded", "expected true or false"),
], ids=["version_0_9", "no_version", "time_nan", "log_faultproxy_garbage", "entry_faultproxy_garbage",
        "forwarded_garbage"])
def test_a_har_that_was_silently_accepted(entry_dir, tmp_path, change, field, message):  # noqa: F811
    folder = broken_har(entry_dir, tmp_path / "e", change)
    with pytest.raises(StoreError) as caught:
        har.read_entry(folder)
    assert caught.value.path == str(folder / har.HAR_FILE) and caught.value.field == field
    assert message in caught.value.message


def test_freeze_representatives_into_a_store_with_a_corrupt_entry(refused, entry_dir, tmp_path):  # noqa: F811
    store = tmp_path / "store"
    shutil.copytree(entry_dir, store / "corrupt")
    (store / "corrupt" / har.EPISODE_FILE).write_text("{ not json")
    line = refused("freeze", str(entry_dir.parents[1] / "run"), "--representatives", "--to", str(store))
    assert line.startswith(f"faultproxy: {store / 'corrupt' / har.EPISODE_FILE}:1: not JSON: ")


# --- unclear answers -----------------------------------------------------------------------------


def test_an_episode_line_without_a_task_id_is_ignored_with_a_warning(tmp_path):
    run = make_run(tmp_path / "run", [LOOKUP], 2, {("", "lookup_a"): [lookup_ok(), lookup_wrong()]})
    with (run / "episodes.jsonl").open("a") as log:
        log.write(json.dumps({"type": "episode", "key": "stray.t0", "trial": 0, "completed": True}) + "\n")
    report = build_report(run)
    assert report["log"]["warnings"] == ["1 log line(s) ignored: each names a task or grid point the plan does not have"]
    assert report["run"]["headline"]["mean_pass_rate"] == 0.5
