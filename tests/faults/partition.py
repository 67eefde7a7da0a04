"""A TCP relay between one client and the apiserver that can be cut: a network partition.

The client's kubeconfig points at the relay (`127.0.0.1:<port>`, which the apiserver's
serving certificate names too), and TLS passes through it untouched. `cut()` closes every
relayed connection and turns new ones away at once (as a partition that resets them), until
`heal()`. The apiserver itself, and every other client, never notice.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from kits.net import free_port


class Partition:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = free_port()
        self.cut_now = threading.Event()
        self.refused = 0  # connections turned away while cut
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="partition", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self.cut_now.set()
        with self._lock:
            doomed, self._open = set(self._open), set()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def heal(self) -> None:
        self.cut_now.clear()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _addr = self._listener.accept()
            except OSError:
                return
            if self.cut_now.is_set():
                self.refused += 1
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open -= {source, sink}

    def __enter__(self) -> Partition:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._listener.close()
        self.cut()


@contextlib.contextmanager
def partitioned(upstream_port: int) -> Iterator[Partition]:
    with Partition(upstream_port) as relay:
        yield relay
