"""The CA and its bundle when several processes share one confdir and start at once."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.synchronize import Barrier
from pathlib import Path

import certifi
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from mitmproxy.certs import CertStore

from faultproxy.proxy import ca as proxy_ca
from faultproxy.proxy.ca import BUNDLE_NAME, CA_NAME, ca_bundle

WORKERS = 8
_start: Barrier | None = None  # set in each worker process: a barrier cannot travel in a task


def _hold(start: Barrier) -> None:
    global _start
    _start = start


def bundle_then_store(confdir: Path) -> tuple[str, str]:
    """What each process would do: hand the agent a bundle, then load the CA it signs with."""
    assert _start is not None
    _start.wait(timeout=60)  # every worker blocks here, so each of them takes exactly one task
    bundle = ca_bundle(confdir).read_text()
    signing_ca = CertStore.from_store(confdir, CA_NAME, 2048).default_ca.to_pem().decode()
    return bundle, signing_ca


def test_processes_starting_together_share_one_ca_and_a_complete_bundle(tmp_path):
    # spawn, not fork: each process imports mitmproxy afresh, as separate `faultproxy run`s would
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(WORKERS, context, initializer=_hold, initargs=(context.Barrier(WORKERS),)) as pool:
        seen = list(pool.map(bundle_then_store, [tmp_path] * WORKERS))

    ca_cert = (tmp_path / f"{CA_NAME}-ca-cert.pem").read_text()
    complete_bundle = Path(certifi.where()).read_text() + "\n" + ca_cert
    assert {signing_ca for _, signing_ca in seen} == {ca_cert}  # every proxy signs with the CA on disk
    assert {bundle for bundle, _ in seen} == {complete_bundle}  # which every agent was told to trust
    assert (tmp_path / BUNDLE_NAME).read_text() == complete_bundle
    assert_key_matches(tmp_path / f"{CA_NAME}-ca.pem", ca_cert)


def assert_key_matches(ca_file: Path, ca_cert: str) -> None:
    """The key mitmproxy signs with belongs to the certificate handed out."""
    raw = ca_file.read_bytes()
    cert = x509.load_pem_x509_certificate(ca_cert.encode())
    assert x509.load_pem_x509_certificates(raw)[0] == cert
    assert load_pem_private_key(raw, password=None).public_key() == cert.public_key()


def test_a_ca_creation_cut_short_leaves_no_half_ca_behind(tmp_path, monkeypatch):
    """mitmproxy takes the key file for a whole CA: it must arrive last, or a process killed while
    creating the CA would leave every later start without a certificate to hand out."""
    moves = []

    def crash_after_two(source, target):
        if len(moves) == 2:
            raise KeyboardInterrupt("killed while moving the CA in")
        moves.append(Path(target).name)
        return real_replace(source, target)

    real_replace = proxy_ca.os.replace
    monkeypatch.setattr(proxy_ca.os, "replace", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        ca_bundle(tmp_path)
    assert len(moves) == 2 and f"{CA_NAME}-ca.pem" not in moves
    assert not (tmp_path / f"{CA_NAME}-ca.pem").exists()

    monkeypatch.setattr(proxy_ca.os, "replace", real_replace)
    bundle = ca_bundle(tmp_path).read_text()
    ca_cert = (tmp_path / f"{CA_NAME}-ca-cert.pem").read_text()
    assert bundle.endswith(ca_cert)
    assert_key_matches(tmp_path / f"{CA_NAME}-ca.pem", ca_cert)  # the next start made a whole, consistent CA
