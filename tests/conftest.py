"""The suite's fixtures live in tests/support/fixtures.py, shared by unit/ and e2e/ alike."""

pytest_plugins = ["tests.support.fixtures"]
