"""The suite's fixtures live in tests/support/, shared by unit/ and e2e/ alike: fixtures.py (upstreams,
proxies), payments.py (a payments API) and probe_entry.py (a frozen probe-agent episode)."""

pytest_plugins = ["tests.support.fixtures", "tests.support.payments", "tests.support.probe_entry"]
