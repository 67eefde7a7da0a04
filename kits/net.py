"""Loopback ports for the processes the kits, tests and benchmarks start."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now (a kubelet binds 0.0.0.0, so ask for that one there). Another
    process may take it before the caller binds it: good enough for loopback test servers."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
