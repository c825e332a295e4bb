"""mitmproxy's CA, and a bundle of it plus the system roots for agents to trust.

Clients given SSL_CERT_FILE replace their whole trust store with it, so the bundle carries
the usual public roots too, not mitmproxy's CA alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import certifi
from mitmproxy.certs import CertStore

CA_NAME = "mitmproxy"
BUNDLE_NAME = "faultproxy-ca-bundle.pem"


def default_confdir() -> Path:
    return Path(os.environ.get("FAULTPROXY_HOME", Path.home() / ".faultproxy"))


def ensure_ca(confdir: Path) -> Path:
    """Create the CA on first use (mitmproxy does the same on start) and return its certificate."""
    confdir.mkdir(parents=True, exist_ok=True)
    CertStore.from_store(confdir, CA_NAME, 2048)
    return confdir / f"{CA_NAME}-ca-cert.pem"


def ca_bundle(confdir: Path | None = None) -> Path:
    confdir = confdir or default_confdir()
    ca_cert = ensure_ca(confdir)
    bundle = confdir / BUNDLE_NAME
    content = Path(certifi.where()).read_text() + "\n" + ca_cert.read_text()
    if not bundle.exists() or bundle.read_text() != content:
        bundle.write_text(content)
    return bundle
