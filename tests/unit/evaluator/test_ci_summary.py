"""`--markdown`: the summaries a CI page shows (report, gate), on run directories judged from real
traces (tests.support.run_records.make_run) and written through the project's own writer
(bench.gate_calibration.write_run). Replay's summary is shown by tests/e2e/replay/test_action.py on a real store."""

from __future__ import annotations

from bench.gate_calibration import write_run
from faultproxy.cli.entry import main as cli
from faultproxy.evaluator.rendering import write_markdown
from faultproxy.evaluator.rendering.markdown import LIMIT
from tests.support.run_records import LOOKUP, REFUND, lookup_ok, make_run, refund_ok, refund_twice, worker_lost


def test_report_markdown_has_headline_incomplete_causes_and_advice(tmp_path, capsys):
    run = make_run(tmp_path / "run", [LOOKUP, REFUND], 3, {
        ("", "lookup_a"): [lookup_ok(), lookup_ok(), worker_lost()],
        ("", "refund_b"): [refund_ok(), refund_twice(), refund_twice()],
    })
    summary = tmp_path / "summary.md"
    assert cli(["report", str(run), "--markdown", str(summary), "--quiet"]) == 0
    assert str(summary) in capsys.readouterr().out  # named among the files written
    text = summary.read_text()
    assert text.startswith("## faultproxy report: mixed")
    assert "| mean pass rate | 95% interval | pass^3 | pass@3 | incomplete by cause | not run |" in text
    assert "| 50.0% |" in text  # 3 of 6 passed
    assert "worker\\_lost 1" in text  # the incomplete one, by its cause
    assert "| refund\\_b | writes\\_state | 1/3 |" in text
    assert "### Top failure causes" in text and " → " in text  # a cause with its advice
    assert "<" not in text.replace("\\<", "")  # no HTML

    # Alone, --markdown prints the summary and nothing else on stdout.
    assert cli(["report", str(run), "--markdown", "--no-html", "--no-junit"]) == 0
    captured = capsys.readouterr()
    assert captured.out == text
    assert "wrote" in captured.err


def test_gate_markdown_has_verdict_reason_and_exit(tmp_path, capsys):
    base = write_run(tmp_path / "base", {"": [(f"t{i:02d}", 3, 3) for i in range(12)]}, 3)
    run = write_run(tmp_path / "run", {"": [(f"t{i:02d}", 0 if i < 4 else 3, 3) for i in range(12)]}, 3)
    summary = tmp_path / "gate.md"
    assert cli(["gate", str(run), "--baseline", str(base), "--markdown", str(summary)]) == 1
    assert capsys.readouterr().out.strip().endswith("gate: BLOCK (regression), exit 1")
    text = summary.read_text()
    assert text.startswith("## faultproxy gate: **BLOCK** (regression), exit 1")
    assert "| BLOCK (regression) | run |" in text and "pass rate fell across tasks" in text

    flaky = write_run(tmp_path / "flaky", {"": [("t00", 2, 3), ("t01", 1, 3)]}, 3)  # too little data either way
    assert cli(["gate", str(flaky), "--baseline", str(flaky), "--markdown"]) == 3
    captured = capsys.readouterr()
    assert captured.out.startswith("## faultproxy gate: **INCONCLUSIVE**, exit 3")
    assert "gate: INCONCLUSIVE" in captured.err


def test_summary_is_redacted_and_cut_under_64_kib_with_a_line_saying_so(tmp_path):
    token = "sk-proj-" + "A1b2C3d4" * 6
    rows = "".join(f"| row {i} | {token if i == 7 else 'x' * 40} |\n" for i in range(4000))
    target = tmp_path / "big.md"
    write_markdown(target, "## big\n\n" + rows)
    text = target.read_text()
    assert len(text.encode()) <= LIMIT
    assert token not in text and "| row 7 |" in text
    assert text.rstrip().endswith("_… summary truncated at 64 KiB: the full report is in report.json / the command's "
                                  "output._")
    assert text.rstrip().splitlines()[-3].startswith("| row ")  # cut at a line's end, not inside a row
