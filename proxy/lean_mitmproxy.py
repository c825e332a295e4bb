"""Per-request work of mitmproxy's that the embedded proxy does without, its behaviour unchanged.

Profiled under wrk (py-spy, both modes), pieces of mitmproxy's own per-request work stood out
that plain mitmdump pays and a proxy need not:

- two debug-mode checks, which mitmproxy makes only when Python runs without -O (`if __debug__`):
  every HTTP message it builds (two per exchange) checks the type of each of its fields against
  the dataclass annotations through typing introspection (~5 % of a request's CPU), and every
  task it starts (one per hook of each flow) looks up PYTEST_CURRENT_TEST in the environment, to
  name the task after the test running (~1.5 %). The messages its parsers and `Response.make`
  build are well typed, and the task names serve only mitmproxy's own test suite;
- TlsConfig's `request` hook, which serves the CA's CRL, asks for the CRL's path on every request,
  reading the CA certificate's serial number through `cryptography` each time (~1.5 %).
"""

from __future__ import annotations

import asyncio
import time

from mitmproxy import http
from mitmproxy.addons import tlsconfig
from mitmproxy.utils import asyncio_utils


def skip_debug_checks() -> None:
    """Run mitmproxy's message building and task starting as under `python -O` (process-wide)."""
    http.MessageData.__post_init__ = _unchecked  # type: ignore[method-assign]
    asyncio_utils.set_task_debug_info = _task_debug_info


def _unchecked(self: http.MessageData) -> None:
    """The dataclass __init__ of every message calls __post_init__: here it checks nothing."""


def _task_debug_info(task: asyncio.Task, *, name: str, client: tuple | None = None) -> None:
    """mitmproxy.utils.asyncio_utils.set_task_debug_info without its debug-mode test name."""
    task.created = time.time()  # type: ignore[attr-defined]
    task.set_name(name)
    if client:
        task.client = client  # type: ignore[attr-defined]


class CrlOnceTlsConfig(tlsconfig.TlsConfig):
    """mitmproxy's TlsConfig with the CRL's path made once per CA (store) instead of per request."""

    name = "tlsconfig"  # the addon's name stays mitmproxy's
    _crl: tuple[object, str] | None = None

    def crl_path(self) -> str:
        store = self.certstore  # replaced when the confdir option changes: then the CA may differ
        if self._crl is None or self._crl[0] is not store:
            self._crl = (store, super().crl_path())
        return self._crl[1]
