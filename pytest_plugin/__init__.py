"""faultproxy in pytest: two plugins that pytest loads through the `pytest11` entry points
(pyproject.toml), so installing faultproxy is all a test suite needs.

    proxy_fixtures      @pytest.mark.faultproxy(SCENARIO): a test behind a proxy (`faultproxy`,
                        `faultproxy_episode`, `faultproxy_client`)
    replay_collection   pytest --faultproxy-replay STORE: one test per replay store entry

Like the CLI it is a front end over the runner and the layers below, and sits beside it: nothing
of faultproxy imports it. This file imports neither plugin, so loading one loads nothing of the other.
"""
