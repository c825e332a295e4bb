"""mitmproxy's CA, and a bundle of it plus the system roots for agents to trust.

Clients given SSL_CERT_FILE replace their whole trust store with it, so the bundle carries
the usual public roots too, not mitmproxy's CA alone.

Several processes may share one confdir and start at once (parallel runs, Dask workers on a
host): the CA is created under a lock, so they all end up with the same one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import certifi
from mitmproxy.certs import CertStore

CA_NAME = "mitmproxy"
BUNDLE_NAME = "faultproxy-ca-bundle.pem"
LOCK_NAME = "faultproxy-ca.lock"


def default_confdir() -> Path:
    return Path(os.environ.get("FAULTPROXY_HOME", Path.home() / ".faultproxy")).expanduser()  # as mitmproxy does


def ensure_ca(confdir: Path) -> Path:
    """Create the CA on first use and return its certificate.

    Call it before mitmproxy starts on `confdir`: mitmproxy creates a missing CA itself, without
    a lock, and a second process doing the same at once would make (and write over) another CA.
    """
    with _locked(confdir):
        if not (confdir / f"{CA_NAME}-ca.pem").exists():
            _create_ca(confdir)
        CertStore.from_store(confdir, CA_NAME, 2048)  # also writes the DH parameters mitmproxy wants
    return confdir / f"{CA_NAME}-ca-cert.pem"


def _create_ca(confdir: Path) -> None:
    """mitmproxy's CA files, made aside and moved in with the key file last: mitmproxy takes the
    key file's presence for a whole CA, so a process killed midway must not leave it alone."""
    with tempfile.TemporaryDirectory(dir=confdir, prefix=".ca-") as staging:
        CertStore.create_store(Path(staging), CA_NAME, 2048)
        key_file = Path(staging) / f"{CA_NAME}-ca.pem"
        for made in sorted(Path(staging).iterdir(), key=lambda path: path == key_file):
            os.replace(made, confdir / made.name)


def ca_bundle(confdir: Path | None = None) -> Path:
    confdir = confdir or default_confdir()
    ca_cert = ensure_ca(confdir)
    bundle = confdir / BUNDLE_NAME
    content = Path(certifi.where()).read_text() + "\n" + ca_cert.read_text()
    if not bundle.exists() or bundle.read_text() != content:
        _write_atomically(bundle, content)
    return bundle


def upstream_trust(extra_ca: Path, confdir: Path | None = None) -> Path:
    """A bundle of the system roots plus `extra_ca` (a private CA, a self-signed upstream), for
    verifying upstreams: mitmproxy's trusted-CA option replaces the roots rather than adding."""
    confdir = confdir or default_confdir()
    confdir.mkdir(parents=True, exist_ok=True)
    content = Path(certifi.where()).read_text() + "\n" + Path(extra_ca).read_text()
    digest = hashlib.sha256(content.encode()).hexdigest()[:16]
    bundle = confdir / f"faultproxy-upstream-trust-{digest}.pem"
    if not bundle.exists():
        _write_atomically(bundle, content)
    return bundle


@contextmanager
def _locked(confdir: Path) -> Iterator[None]:
    """Hold an exclusive lock on `confdir` against other processes.

    flock is released when the file is closed, also when a process dies holding it. Not
    re-entrant: a second open file in the same process would wait for the first.
    """
    confdir.mkdir(parents=True, exist_ok=True)
    with open(confdir / LOCK_NAME, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write_atomically(path: Path, content: str) -> None:
    """Readers (agents given the bundle by another process) see the old file or the new, never half."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as file:
            os.fchmod(file.fileno(), 0o644)  # mkstemp makes it private; it holds only public certificates
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
