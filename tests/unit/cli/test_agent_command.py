"""Every command that takes another command takes everything after the first `--`, verbatim."""

import pytest

from faultproxy.cli.dispatch import split_command
from faultproxy.cli.main import build_parser

NESTED = ["python", "agent.py", "--", "server", "--port", "1"]


@pytest.mark.parametrize(("head", "dest"), [
    (["run", "--scenario", "rate_limit", "--k", "2"], "agent"),
    (["replay", "STORE", "--parallel", "2"], "agent"),
    (["minimize", "ENTRY", "--dry-run"], "agent"),
    (["mcp"], "server"),
])
def test_the_command_after_the_first_double_dash_is_kept_whole(head: list[str], dest: str) -> None:
    options, command = split_command([*head, "--", *NESTED])
    args = build_parser().parse_args(options)
    assert command == NESTED and "server" not in getattr(args, dest)


def test_without_a_double_dash_nothing_is_cut() -> None:
    assert split_command(["report", "runs/x"]) == (["report", "runs/x"], None)
