"""A TCP proxy on loopback that can cut every connection at once: the engine becoming unreachable mid-answer,
as a browser sees it (a pod killed, a network partition ending in a reset), without stopping the engine."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator

from tests.support.server import bound_socket


class CuttableProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = bound_socket()
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed by cut()
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Reset every open connection (RST, not a clean end) and refuse new ones from now on."""
        with self._lock:
            self._cut = True
            self.listener.close()
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv
                    sock.close()
            self._open.clear()


@contextlib.contextmanager
def cuttable(base: str) -> Iterator[tuple[str, CuttableProxy]]:
    proxy = CuttableProxy(int(base.rsplit(":", 1)[1]))
    try:
        yield f"http://127.0.0.1:{proxy.port}", proxy
    finally:
        proxy.cut()
