"""`faultproxy monitor`: a proxy in front of live agents that judges their traffic as it goes.

It injects nothing unless given canary faults (--scenario), puts each request into an episode
(proxy.monitor_sessions: a session header, the W3C trace id, proxy credentials or the client
connection), ends an episode after `idle_s` of silence in it, judges it by the checks that need
no expected end state (evaluator.judging.online, under the policy: tasks.tasks_file.load_policy) and
appends it to the run directory's log. The directory is a run directory (formats.rundir: an
open-ended plan), so `report`, `freeze --representatives` and `replay` work on it unchanged.

Nothing seen is lost: SIGTERM or SIGINT judges every open episode before the monitor exits; a
monitor killed outright leaves its open episodes' traces, which the next start in the same
directory judges (marked `recovered`) before it listens again. The log is at most
`max_episodes` long: beyond, the oldest go first (with their traces).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats import __version__
from faultproxy.formats.redact import Redactor
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.formats.rundir import FLOWS_DIR, MONITOR_KEY, EpisodeLog, write_plan
from faultproxy.formats.trace import REJECTED_NAME, read_trace, trace_path
from faultproxy.monitor.terminal_view import MonitorView
from faultproxy.otel import OtelExport
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.proxy.server import ProxyServer
from faultproxy.proxy.monitor_sessions import EpisodeRule, LiveSessions, Session
from faultproxy.scenarios import Scenario
from faultproxy.tasks.task_model import Task, TaskSet
from faultproxy.tasks.request_class import Declared
from faultproxy.tasks.secret_values import task_secrets

log = structlog.get_logger("faultproxy.monitor")

POLL_S = 0.1  # how often idle episodes are looked for
NO_END_STATE = "live traffic: no end state is fetched"
ENDED_IDLE, ENDED_STOPPED, ENDED_RECOVERED = "idle", "stopped", "recovered"


@dataclass(frozen=True)
class MonitorOptions:
    out: Path
    policy: TaskSet  # one online task: load_policy's
    scenario: Scenario  # "observe" (injects nothing) or canary faults
    episode_by: tuple[EpisodeRule, ...] = ()
    idle_s: float = 30.0
    sample: float = 1.0
    max_episodes: int = 10_000
    host: str = "127.0.0.1"
    port: int = 8080
    reverse_port: int = 0
    upstreams: Mapping[str, str] = field(default_factory=dict)
    upstream_ca: Path | None = None
    insecure_upstream: bool = False
    secret_env: Sequence[str] = ()
    side_channels: Sequence[str] = ()  # --side-channel patterns (evaluator.judging.side_channels)
    token: str | None = None
    show_live: bool = True


def monitor_plan(options: MonitorOptions) -> tuple[dict[str, Any], dict[str, Any]]:
    """plan.json's content and the log header, both naming the monitor's policy and settings."""
    task, scenario, policy = options.policy.tasks[0], options.scenario, options.policy
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    grid = [{"label": "", "params": {}, "model": None}]
    settings = {"policy": policy.path, "policy_digest": policy.digest,
                "episode_by": [str(rule) for rule in options.episode_by] or ["client"],
                "idle_s": options.idle_s, "sample": options.sample, "max_episodes": options.max_episodes}
    command: list[str] = []  # live agents ran on their own: replay takes the agent command after --
    plan = {
        "faultproxy_version": __version__,
        "scenario": {"name": scenario.name, "digest": scenario.digest, "path": scenario.path,
                     "params": dict(scenario.params)},
        "tasks": {"path": policy.path, "digest": policy.digest, "severity": dict(policy.severity),
                  "prices": {m: dict(p) for m, p in policy.prices.items()}, "items": [task.to_json()]},
        "k": options.max_episodes, "grid": grid, "command": command, "created": created,
        "upstreams": dict(options.upstreams), "rewrites": {},
        "faults_possible": {"": any(scenario.probability(rule) > 0 for rule in scenario.rules)},
        "base_urls": {}, MONITOR_KEY: settings,
    }
    header = {"faultproxy_version": __version__, "scenario_digest": scenario.digest, "tasks_digest": policy.digest,
              "k": options.max_episodes, "grid": grid, "command": command, "created": created, MONITOR_KEY: settings}
    return plan, header


class Monitor:
    """One monitor over one run directory: `run()` serves until SIGTERM or SIGINT."""

    def __init__(self, options: MonitorOptions, export: OtelExport | None = None) -> None:
        """`export`, when given, gets each judged episode as OpenTelemetry spans (the caller closes it)."""
        self.options = options
        self.export = export
        self.task = options.policy.tasks[0]
        self.flows = options.out / FLOWS_DIR
        self.redactor = task_secrets(self.task, {}, Redactor.from_env([*options.secret_env, *self.task.secrets]))
        self.sessions = LiveSessions(options.episode_by, options.sample)
        self.counts: Counter[str] = Counter()  # pass / fail / incomplete, this process
        self.severities: Counter[str] = Counter()  # failed checks by severity, this process
        self.newest: deque[str] = deque(maxlen=5)  # the newest failures' causes, for the live view
        self.proxy: ProxyServer | None = None
        self._log: EpisodeLog | None = None
        self._trial = -1
        self._busy: dict[str, float] = {}  # episode -> when it was last seen with an exchange in flight
        self._stop: asyncio.Event | None = None
        self.open_episodes = 0

    def run(self, ready: Callable[[ProxyServer], None] | None = None) -> int:
        """Recover what an earlier monitor left open, serve until told to stop, judge every open
        episode, and return the number of episodes logged by this process. `ready` is called once
        the proxy listens."""
        plan, header = monitor_plan(self.options)
        self._log = EpisodeLog(self.options.out, header, slim=True)  # refuses a log of another policy
        try:
            if not (self.options.out / "plan.json").exists():
                write_plan(self.options.out, plan)
            trials = [record.get("trial") for record in self._log.done.values()]
            self._trial = trials[-1] if trials and isinstance(trials[-1], int) else -1
            self._recover()
            self.proxy = self._proxy().start()
            try:
                asyncio.run(self._watch(ready))
            finally:
                self.proxy.stop()
        finally:
            self._log.close()
        return sum(self.counts.values())

    def _proxy(self) -> ProxyServer:
        o = self.options
        limits = EpisodeLimits(idle_s=max(3_600.0, 10 * o.idle_s))  # the monitor ends episodes, never the proxy
        server = ProxyServer(o.scenario, trace_dir=self.flows, host=o.host, port=o.port, reverse_port=o.reverse_port,
                             upstreams=o.upstreams, secret_env=[*o.secret_env, *self.task.secrets],
                             ssl_insecure=o.insecure_upstream, upstream_ca=o.upstream_ca, token=o.token,
                             addons=[self.sessions], limits=limits)
        server.injector.redactor = self.redactor
        server.injector.declared = Declared.of(self.task)  # a rule's `kind: irreversible` reads the policy's
        return server

    async def _watch(self, ready: Callable[[ProxyServer], None] | None) -> None:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        if ready:  # only now: a signal sent as soon as the monitor says it listens is handled
            ready(self.proxy)
        view = MonitorView(self, self.options.show_live)
        try:
            with view:
                while not self._stop.is_set():
                    for key in self._idle():
                        await asyncio.to_thread(self._close, key, ENDED_IDLE)
                    view.refresh()
                    try:
                        await asyncio.wait_for(self._stop.wait(), POLL_S)
                    except TimeoutError:
                        pass
                for _ in range(3):  # requests may open episodes while the last ones close
                    live = await asyncio.to_thread(self.proxy.live_episodes)
                    if not live:
                        break
                    for episode in live:
                        await asyncio.to_thread(self._close, episode.key, ENDED_STOPPED)
                view.refresh()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _idle(self) -> list[str]:
        """Open episodes silent for idle_s: none of their exchanges in flight for that long."""
        now, idle = time.monotonic(), []
        self.open_episodes = 0
        for episode in self.proxy.live_episodes():
            self.open_episodes += 1
            if episode.in_flight:
                self._busy[episode.key] = now
            quiet = min(episode.idle_s, now - self._busy.get(episode.key, now - episode.idle_s))
            if quiet >= self.options.idle_s:
                idle.append(episode.key)
        return idle

    def _close(self, key: str, ended: str) -> None:
        """End one episode in the proxy (its trace written whole), judge it and log it."""
        session = self.proxy.call(self.sessions.close, key)
        stats = self.proxy.end_episode(key)
        self._busy.pop(key, None)
        if stats is None or not stats.exchanges:
            return
        self._judge_and_log(key, session, ended)

    def _recover(self) -> None:
        """Judge the traces an earlier monitor left open (killed before it could)."""
        if not self.flows.is_dir():
            return
        for path in sorted(self.flows.glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
            if path.stem == REJECTED_NAME:
                continue
            first = next(iter(read_trace(path)), None)
            key = first.get("episode") if isinstance(first, dict) else None
            if key and key not in self._log.done and trace_path(self.flows, key) == path:
                log.info("monitor_recovered", episode=key)
                self._judge_and_log(key, None, ENDED_RECOVERED)

    def _judge_and_log(self, key: str, session: Session | None, ended: str) -> None:
        trace = list(read_trace(trace_path(self.flows, key)))
        if not trace:
            return
        self._make_room()
        self._trial = (self._trial + 1) % self.options.max_episodes
        record = episode_record(self.task, key, self._trial, trace, session, ended)
        if self.options.side_channels:
            record["side_channels"] = list(self.options.side_channels)
        record["verdict"] = verdict = judge_episode(self.task, record, trace, self.options.policy.severity)
        logged = self.redactor.document(record)
        self._log.append(logged)
        if self.export is not None:  # on the judging thread, beside the proxy's
            self.export.export_logged(self.options.out, logged)
        self.counts[verdict["status"]] += 1
        for failed in verdict["failed"]:
            self.severities[failed["severity"]] += 1
        if verdict["failed"]:
            self.newest.appendleft(f"{key}: " + ", ".join(f"{c['name']} ({c['severity']})" for c in verdict["failed"]))
        log.info("monitor_episode", episode=key, status=verdict["status"], ended=ended,
                 failed=[c["name"] for c in verdict["failed"]])

    def _make_room(self) -> None:
        """The oldest tenth of the log goes (with its traces) once the log holds max_episodes."""
        cap = self.options.max_episodes
        if len(self._log.done) < cap:
            return
        count = max(1, cap // 10)
        for key in list(self._log.done)[:count]:  # traces first: a kill in between never re-judges a dropped one
            trace_path(self.flows, key).unlink(missing_ok=True)
        self._log.drop_oldest(count)


def episode_record(task: Task, key: str, trial: int, trace: list[dict[str, Any]], session: Session | None,
                   ended: str) -> EpisodeRecord:
    """A monitored episode's log line (formats.rundir's fields; no agent, no end state), unjudged."""
    started = min(float(line.get("started") or 0.0) for line in trace)
    finished = max(float(line.get("started") or 0.0) + float(line.get("duration_s") or 0.0) for line in trace)
    return {
        "key": key, "task_id": task.id, "trial": trial, "variant": 0, "seed": 0, "prompt": task.prompt,
        "state": None, "shape": task.shape, "grid_label": "", "params": {}, "model": None,
        "completed": True, "cause": None, "exit_code": None, "started": round(started, 3),
        "duration_s": round(finished - started, 3), "output": None, "output_error": None,
        "end_state": None, "state_error": NO_END_STATE,
        "stats": {"exchanges": len(trace), "tokens": sum(int(line.get("tokens") or 0) for line in trace),
                  "faults": sum(1 for line in trace if (line.get("fault") or {}).get("delivered"))},
        "trace": f"{FLOWS_DIR}/{trace_path(Path(), key).name}", "log_tail": "", "rewrites": {},
        MONITOR_KEY: {"id": session.id if session else None, "rule": session.rule if session else None,
                      "ended": ended},
    }
