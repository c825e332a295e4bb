"""pytest plugin: one test per replay store entry, replayed hermetically.

    pytest --faultproxy-replay replay_store/ --faultproxy-agent "python agent.py"

Each entry becomes a test named after its task and scenario (`refund_order_1001[response_lost]`)
that replays the frozen episode with the agent command (default: the entry's own) and passes
when the replay shows what the entry expects: for `expect: fail`, the same failed checks; for
`expect: pass`, a pass. A divergence (a request with no recording) or an upstream connection
attempt fails the test. All tests share one replay-mode proxy, which never opens an upstream
connection.

Options: `--faultproxy-replay-env NAME=VALUE` (repeatable) sets variables for the agent;
`--faultproxy-replay-out DIR` keeps the replay traces. When --faultproxy-replay is given, the
store is collected in place of the configured testpaths; name other test paths to run them too.
pytest picks its rootdir before plugins load, from every argument that is a path: for a store
outside the project, write `--faultproxy-replay=PATH` so that the project stays the rootdir.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from faultproxy.replay_store.har import EPISODE_FILE, read_entry
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner import Replayer, parse_pairs

_STATE = pytest.StashKey["_ReplayState"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faultproxy-replay", "faultproxy hermetic replay")
    group.addoption("--faultproxy-replay", metavar="STORE", default=None,
                    help="Collect one test per entry of this replay store (or one entry folder).")
    group.addoption("--faultproxy-agent", metavar="CMD", default=None,
                    help="The agent command, as one shell string (default: each entry's own command).")
    group.addoption("--faultproxy-replay-env", action="append", default=[], metavar="NAME=VALUE",
                    help="A variable for the agent during replay (repeatable).")
    group.addoption("--faultproxy-replay-out", metavar="DIR", default=None,
                    help="Keep replay traces and agent files here.")


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    store = getattr(early_config.known_args_namespace, "faultproxy_replay", None)
    if store and store not in args:
        args.append(store)  # collect the store; without other paths given, instead of testpaths


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faultproxy_replay: a test that replays a faultproxy replay store entry")
    store = config.getoption("faultproxy_replay", None)
    if store:
        config.stash[_STATE] = _ReplayState(config, Path(store).resolve())


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    state = parent.config.stash.get(_STATE, None)
    if state is None or file_path.name != EPISODE_FILE or not state.covers(file_path):
        return None
    return ReplayEntryFile.from_parent(parent, path=file_path)


class _ReplayState:
    def __init__(self, config: pytest.Config, store: Path) -> None:
        self.config = config
        self.store = store
        self.replayer = None
        self.entries: list[Any] = []
        self.names: dict[str, int] = {}

    def covers(self, path: Path) -> bool:
        path = path.resolve()
        return path.parent == self.store or path.parent.parent == self.store

    def command(self) -> list[str] | None:
        agent = self.config.getoption("faultproxy_agent")
        return shlex.split(agent) if agent else None

    def get_replayer(self):
        if self.replayer is None:

            out = self.config.getoption("faultproxy_replay_out")
            options = ReplayOptions(command=self.command(), out=Path(out) if out else None,
                                    env=parse_pairs(self.config.getoption("faultproxy_replay_env"),
                                                    "--faultproxy-replay-env"))
            self.replayer = Replayer(options, self.entries).__enter__()
        return self.replayer

    def close(self) -> None:
        if self.replayer is not None:
            self.replayer.close()
            self.replayer = None


class ReplayEntryFile(pytest.File):
    def collect(self):

        state: _ReplayState = self.config.stash[_STATE]
        entry = read_entry(self.path.parent)
        state.entries.append(entry)
        name = f"{entry.episode['task']['id']}[{entry.scenario['name']}]"
        state.names[name] = state.names.get(name, 0) + 1
        if state.names[name] > 1:
            name = f"{entry.episode['task']['id']}[{entry.scenario['name']}-{entry.name}]"
        yield ReplayItem.from_parent(self, name=name, entry=entry)


class ReplayMismatch(Exception):
    def __init__(self, result: Any) -> None:
        super().__init__(result.explain())
        self.result = result


class ReplayItem(pytest.Item):
    def __init__(self, *, entry: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entry = entry
        self.add_marker(pytest.mark.faultproxy_replay)

    def runtest(self) -> None:
        state: _ReplayState = self.config.stash[_STATE]
        result = state.get_replayer().replay(self.entry, state.command())
        self.user_properties.append(("faultproxy_replay", {"status": result.status, "failed": result.failed,
                                                           "diverged": len(result.diverged),
                                                           "trace": str(result.trace)}))
        if not result.meets_expectation:
            raise ReplayMismatch(result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ReplayMismatch):
            result = excinfo.value.result
            lines = [f"{self.entry.title}: {result.explain()}",
                     f"  entry: {self.entry.path}",
                     f"  expected: {self.entry.expect}"
                     + (f" ({', '.join(self.entry.expect_failed)})" if self.entry.expect_failed else ""),
                     f"  replay:   {result.status}" + (f" ({', '.join(result.failed)})" if result.failed else "")]
            for d in result.diverged[:10]:
                lines.append(f"  not recorded: #{d['seq']} {d['method']} {d['url']}: {d['why']}")
            for check in result.verdict["failed"]:
                lines.append(f"  failed {check['name']} [{check['severity']}]: {check['detail']}")
            if result.record.get("log_tail"):
                lines.append("  agent output (tail):")
                lines += ["    " + line for line in result.record["log_tail"].strip().splitlines()[-15:]]
            return "\n".join(lines)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"faultproxy replay {self.entry.name}"
