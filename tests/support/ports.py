"""Local ports for tests that need the network to be absent: a port nobody listens on, and a watch that
counts every connection to ports a stopped server used."""

from __future__ import annotations

import socket
import threading


class PortWatch:
    """Listen on ports a stopped server used and count every connection that arrives."""

    def __init__(self, ports: list[int]) -> None:
        self.accepted = 0
        self.sockets = []
        for port in ports:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sock.listen()
            sock.settimeout(0.1)
            self.sockets.append(sock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            for sock in self.sockets:
                try:
                    conn, _ = sock.accept()
                except (TimeoutError, OSError):
                    continue
                self.accepted += 1
                conn.close()

    def __enter__(self) -> PortWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        for sock in self.sockets:
            sock.close()


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
