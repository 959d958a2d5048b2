"""A TCP proxy to a Redis server that drops a connection the moment it sees a marker.

Everything else is forwarded both ways as it comes, so a client's connection handshake
(CLIENT SETNAME, HELLO) goes through; the first ``drops`` writes that contain ``marker``
are never forwarded: the proxy closes that client's connection instead, as a server that
died mid-request would look to the client.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class DroppingProxy:
    """Listens on a free loopback port; ``url`` reaches the server behind it."""

    def __init__(self, port: int, marker: bytes, drops: int = 1) -> None:
        self.target = ("127.0.0.1", port)
        self.marker = marker
        self.drops = drops
        self.dropped = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._open += [client, server]
            threading.Thread(target=self._upstream, args=(client, server), daemon=True).start()
            threading.Thread(target=_pump, args=(server, client), daemon=True).start()

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                data = b""
            if data and self.marker in data:
                with self._lock:
                    drop = self.dropped < self.drops
                    self.dropped += drop
                if drop:
                    data = b""
            if not data:
                _close(client, server)
                return
            try:
                server.sendall(data)
            except OSError:
                _close(client, server)
                return

    def close(self) -> None:
        self._listener.close()
        _close(*self._open)

    def __enter__(self) -> DroppingProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    while True:
        try:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
        except OSError:
            break
    _close(source, sink)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
