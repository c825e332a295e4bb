"""A full disk is an answer, not a traceback (issue 22): `faultproxy run --out` on a real, tiny
tmpfs mounted in a private mount namespace of the test's own (`unshare -m`: the mount exists only
for the test's shell and goes away with it; nothing is mounted on the machine).

The run fills the disk part-way: one line naming the file and "no space left on device", exit 1,
and the log holds whole lines only. After the filesystem grows, the same command resumes and
completes every episode once."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from faultproxy.formats.rundir import read_run
from tests.support.agent_commands import PROBE_AGENT
from tests.support.fixtures import scenario

K = 12
NO_FAULT = scenario("""
    - name: refund-503
      match: {method: POST, path: "*/refund"}
      fault: {type: server_error, status: 503}
      when: {probability: lambda}
""", params="{lambda: 0}")


def test_a_full_disk_is_one_line_and_exit_1_and_the_log_stays_whole(tmp_path, upstream):
    _, server = upstream
    (tmp_path / "scenario.yaml").write_text(NO_FAULT)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "prompt": "ok"}) + "\n")
    mount, saved = tmp_path / "small", tmp_path / "saved"
    mount.mkdir()
    saved.mkdir()
    run = shlex.join([sys.executable, "-m", "faultproxy", "run", "--scenario", str(tmp_path / "scenario.yaml"),
                      "--tasks", str(tasks), "--k", str(K), "--parallel", "2", "--out", str(mount / "run"),
                      "--", *PROBE_AGENT])
    script = f"""
        set -u
        mount -t tmpfs -o size=96k faultproxy-test {mount}
        {run} > {saved}/out1 2> {saved}/err1; echo $? > {saved}/rc1
        cp -a {mount}/run {saved}/full
        mount -o remount,size=16m {mount}
        {run} > {saved}/out2 2> {saved}/err2; echo $? > {saved}/rc2
        cp -a {mount}/run {saved}/resumed
    """
    shell = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PROBE_UPSTREAM": server.url})
    assert shell.returncode == 0, shell.stderr

    err = (saved / "err1").read_text()
    assert (saved / "rc1").read_text().strip() == "1", err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"faultproxy: {mount / 'run'}") and last.endswith(": no space left on device"), err
    log = (saved / "full" / "episodes.jsonl").read_bytes()
    assert log.endswith(b"\n")  # whole lines only: nothing torn
    logged = [json.loads(line) for line in log.splitlines()[1:]]
    assert len(logged) < K  # the disk filled part-way through
    assert not list((saved / "full").rglob("*.tmp"))  # no half-written whole file left behind

    assert (saved / "rc2").read_text().strip() == "0", (saved / "out2").read_text() + (saved / "err2").read_text()
    keys = [episode["key"] for episode in read_run(saved / "resumed").episodes]
    assert len(keys) == len(set(keys)) == K
    assert f"{K}/{K} episodes logged" in (saved / "out2").read_text()
