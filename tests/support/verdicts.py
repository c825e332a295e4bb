"""Reading a judged episode's verdict in assertions: one check by name, its detail, the failed ones."""

from __future__ import annotations


def check(verdict: dict, name: str) -> dict:
    """The check called `name` in the verdict (StopIteration when the verdict has none)."""
    return next(c for c in verdict["checks"] if c["name"] == name)


def detail(verdict: dict, name: str) -> str:
    return check(verdict, name)["detail"]


def failed_checks(verdict: dict) -> dict[str, str]:
    """Each failed check's severity, by name."""
    return {c["name"]: c["severity"] for c in verdict["failed"]}
