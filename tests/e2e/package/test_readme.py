"""The README is the user's first screen: its test command is the one CI runs, its links (and those
of the pages in docs/ it points to) lead somewhere, and its quickstart runs top to bottom."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.layout import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def sh_block_after(text: str, heading: str) -> str:
    """The first ```sh block of the section that starts at `heading`."""
    section = text[text.index(f"\n{heading}\n"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # no headings in code
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def world_stops(url: str, within_s: float = 30) -> bool:
    """Whether the server at `url` stops answering (connection refused) within `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/_state", timeout=5, trust_env=False)
        except httpx.ConnectError:
            return True
        time.sleep(0.2)
    return False


def test_the_readme_test_command_is_what_ci_runs():
    assert "make test" in sh_block_after(README.read_text(encoding="utf-8"), "## Two commands")
    ci = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == ["make test"]
    assert re.search(r"^test: ", (ROOT / "Makefile").read_text(), re.M)


def test_every_relative_link_and_anchor_resolves():
    checked = 0
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # an absolute URL
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            assert resolved.exists(), f"{page.relative_to(ROOT)}: {target}: no such file"
            if anchor:
                assert anchor in anchors(resolved), f"{page.relative_to(ROOT)}: {target}: no such heading"
            checked += 1
    assert checked >= 20  # the pages really were read


def test_every_docs_page_is_linked_from_the_readme():
    readme = README.read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert f"(docs/{page.name}" in readme, f"docs/{page.name} is not linked from the README"


def test_the_quickstart_runs_top_to_bottom(tmp_path):
    """The block as written, in an empty folder beside the checkout's examples/: only its first line
    (install and activate the checkout's .venv) is stood in for by the test's own interpreter."""
    block = sh_block_after(README.read_text(encoding="utf-8"), "## Quickstart: run, report, freeze, replay")
    first, rest = block.split("\n", 1)
    assert first == "make install && . .venv/bin/activate"
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    log = tmp_path / "block.log"  # a file, not a pipe: a world left running would hold a pipe open
    with log.open("w") as sink:
        proc = subprocess.Popen(["bash", "-c", rest], cwd=tmp_path, env=env, start_new_session=True,
                                stdout=sink, stderr=subprocess.STDOUT)
    try:
        proc.wait(timeout=240)
        out = log.read_text()
        shop = re.search(r"SHOP_ROOT=(http://\S+)", (tmp_path / "runs/world.log").read_text()).group(1)
        assert world_stops(shop), "`kill %1` left the demo world running"
    finally:  # whatever the block left behind (a stuck step, a world it did not stop) ends with the test
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "4/4 episodes logged (0 pass, 4 fail, 0 incomplete)" in out, out[-3000:]
    assert "the agent retried without idempotency key" in out, out[-3000:]
    assert "1 episode(s) frozen into runs/replay_store/" in out, out[-3000:]
    assert "1/1 replay(s) as expected; upstream connections attempted: 0" in out, out[-3000:]  # the naive agent
    assert "0/1 replay(s) as expected" in out and "MISMATCH" in out, out[-3000:]  # the careful agent passes
    assert proc.returncode == 1  # the last line's exit status, as its comment says
