"""junit.xml: one testcase per episode (task × trial × grid label), for CI dashboards.

A failed episode is a <failure> whose message names the failed checks and whose text gives
each check's severity and detail; an incomplete one is an <error> with its cause; a planned
episode that never ran is <skipped> ("NotRun"). Written as a report sink while the log
streams by: testcases go to a scratch file, and the totals (which JUnit wants in the opening
tag) are written around them at the end, so memory stays flat for a million episodes.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from faultproxy.evaluator.aggregate import EpisodeSink, SinkVerdict
from faultproxy.tasks.task_model import SEVERITY_RANK

# Characters XML 1.0 cannot carry at all, even escaped.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: Any) -> str:
    return escape(_INVALID_XML.sub("\ufffd", str(value)))


def _attr(value: Any) -> str:
    return quoteattr(_INVALID_XML.sub("\ufffd", str(value)))


def _classname(task_id: str, label: str) -> str:
    return f"{task_id}[{label}]" if label else task_id


class JUnitWriter(EpisodeSink):
    """Writes junit.xml from build_report's stream (see the module docstring); shards write parts."""

    def __init__(self, path: Path, suite: str = "faultproxy", scratch: Path | None = None) -> None:
        self.path = Path(path)
        self.suite = suite
        self.scratch = scratch or self.path.with_name(self.path.name + ".part")
        self._file: Any = None
        self.tests = self.failures = self.errors = self.skipped = 0
        self.seconds = 0.0

    @property
    def _out(self) -> Any:
        if self._file is None:
            self._file = self.scratch.open("w", encoding="utf-8")
        return self._file

    @property
    def is_shard(self) -> bool:
        """A writer of one chunk's part, not of junit.xml itself."""
        return self.scratch.name != self.path.name + ".part"

    def shard(self, index: int) -> JUnitWriter:
        """A writer for one chunk of the log, run in another process; see absorb."""
        return JUnitWriter(self.path, self.suite, self.path.with_name(f"{self.path.name}.part{index}"))

    def absorb(self, shard: EpisodeSink) -> None:
        """Add a chunk's counts and append its testcases, in chunk order."""
        assert isinstance(shard, JUnitWriter)
        self.tests += shard.tests
        self.failures += shard.failures
        self.errors += shard.errors
        self.skipped += shard.skipped
        self.seconds += shard.seconds
        if shard.scratch.exists():
            with shard.scratch.open(encoding="utf-8") as part:
                shutil.copyfileobj(part, self._out, 1 << 20)
            shard.scratch.unlink()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if state.get("_file") is not None and not state["_file"].closed:
            raise TypeError("an open JUnitWriter cannot travel between processes")
        state["_file"] = None
        return state

    def episode(self, verdict: SinkVerdict) -> None:
        """One testcase: passed, <failure> (failed checks) or <error> (incomplete, with its cause)."""
        episode = verdict["episode"]
        task_id, label = str(episode.get("task_id")), episode.get("grid_label") or ""
        trial = episode.get("trial")
        name = str(episode.get("key") or f"{task_id}.t{trial}")
        seconds = float(episode.get("duration_s") or 0.0)
        self.tests += 1
        self.seconds += seconds
        opening = (f'  <testcase classname={_attr(_classname(task_id, label))} name={_attr(name)} '
                   f'time="{seconds:.3f}"')
        status = verdict["status"]
        if status == "pass":
            self._out.write(opening + "/>\n")
            return
        failed = verdict["failed"]
        lines = "\n".join(f"{c.get('name')} [{c.get('severity')}]: {c.get('detail')}" for c in failed)
        if status == "fail":
            self.failures += 1
            names = ", ".join(str(c.get("name")) for c in failed) or "unknown"
            worst = _worst(failed)
            self._out.write(f"{opening}>\n    <failure message={_attr('failed checks: ' + names)} "
                             f"type={_attr(worst)}>{_text(lines)}</failure>\n  </testcase>\n")
        else:
            self.errors += 1
            cause = verdict.get("cause") or "unknown"
            body = f"incomplete: {cause}" + (f"\nviolations before it ended:\n{lines}" if lines else "")
            self._out.write(f"{opening}>\n    <error message={_attr('incomplete: ' + str(cause))} "
                             f"type={_attr(cause)}>{_text(body)}</error>\n  </testcase>\n")

    def not_run(self, label: str, task_id: str, trial: int) -> None:
        """A <skipped> testcase for a planned trial that is not in the log."""
        self.tests += 1
        self.skipped += 1
        self._out.write(f'  <testcase classname={_attr(_classname(task_id, label))} '
                         f'name={_attr(f"{task_id}.t{trial}")} time="0">\n'
                         '    <skipped message="NotRun: planned but not in the log; resume the run"/>\n'
                         "  </testcase>\n")

    def close(self) -> None:
        """Close the scratch file; the writer of the whole log (not a shard) then writes junit.xml."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.is_shard:
            return  # its part is absorbed by the writer of the whole log
        counts = (f'tests="{self.tests}" failures="{self.failures}" errors="{self.errors}" '
                  f'skipped="{self.skipped}" time="{self.seconds:.3f}"')
        scratch = self.path.with_name(self.path.name + ".tmp")
        try:
            with scratch.open("w", encoding="utf-8") as out:
                out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
                out.write(f"<testsuites name={_attr(self.suite)} {counts}>\n")
                out.write(f"<testsuite name={_attr(self.suite)} {counts}>\n")
                if self.scratch.exists():
                    with self.scratch.open(encoding="utf-8") as part:
                        shutil.copyfileobj(part, out, 1 << 20)
                out.write("</testsuite>\n</testsuites>\n")
            scratch.replace(self.path)
        except OSError:
            scratch.unlink(missing_ok=True)  # junit.xml whole or not at all (a full disk, say)
            raise
        self.scratch.unlink(missing_ok=True)

    def abort(self) -> None:
        """Drop the scratch file (the report failed before close)."""
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._file = None
        self.scratch.unlink(missing_ok=True)


def _worst(failed: list[Mapping[str, Any]]) -> str:
    worst = max((c.get("severity") for c in failed), key=lambda s: SEVERITY_RANK.get(s, -1), default=None)
    return worst or "unknown"
