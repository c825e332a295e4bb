"""Per-request work of mitmproxy's that the embedded proxy does without, its behaviour unchanged.

Profiled under wrk (py-spy, both modes), two pieces of mitmproxy's own per-request work stood
out that plain mitmdump pays and a proxy need not:

- every HTTP message mitmproxy builds (two per exchange) checks the type of each of its fields
  against the dataclass annotations, through typing introspection: ~5 % of a request's CPU.
  mitmproxy does this only in debug mode (`if __debug__:` in mitmproxy/http.py), that is, when
  Python runs without -O; the messages its parsers and `Response.make` build are well typed;
- TlsConfig's `request` hook, which serves the CA's CRL, asks for the CRL's path on every request,
  reading the CA certificate's serial number through `cryptography` each time: ~1.5 %.
"""

from __future__ import annotations

from mitmproxy import http
from mitmproxy.addons import tlsconfig


def skip_message_type_checks() -> None:
    """Build HTTP messages as mitmproxy does under `python -O`: without the debug-mode check of
    every field's type (process-wide; the proxy's addons and faults build well-typed messages)."""
    http.MessageData.__post_init__ = _unchecked  # type: ignore[method-assign]


def _unchecked(self: http.MessageData) -> None:
    """The dataclass __init__ of every message calls __post_init__: here it checks nothing."""


class CrlOnceTlsConfig(tlsconfig.TlsConfig):
    """mitmproxy's TlsConfig with the CRL's path made once per CA (store) instead of per request."""

    name = "tlsconfig"  # the addon's name stays mitmproxy's
    _crl: tuple[object, str] | None = None

    def crl_path(self) -> str:
        store = self.certstore  # replaced when the confdir option changes: then the CA may differ
        if self._crl is None or self._crl[0] is not store:
            self._crl = (store, super().crl_path())
        return self._crl[1]
