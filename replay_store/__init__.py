"""The replay store: failing episodes frozen as regression tests that run with no network.

    faultproxy freeze runs/response_lost --failing --to replay_store/
    faultproxy replay replay_store/ -- python agent.py
    faultproxy minimize replay_store/ENTRY -- python agent.py
    pytest --faultproxy-replay replay_store/ --faultproxy-agent "python agent.py"

Modules: har (the entry format, episode.json + flows.har: the only module that reads or writes
it), freeze (run directory -> entries), matching (which recording answers a request), replay
(the replay-mode injector and the Replayer), minimize (ddmin over the injected faults); the
CLI's commands and the pytest plugin (faultproxy.pytest_plugin) sit above it. This package keeps imports light: mitmproxy loads only
when something replays.
"""
