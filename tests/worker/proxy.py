"""A fault-injecting TCP proxy for the worker tests: pass, blackhole, resume, cut.

    with FaultProxy(("127.0.0.1", 5432)) as proxy:
        url = f"postgresql://postgres@127.0.0.1:{proxy.port}/db"
        proxy.blackhole()   # bytes stop flowing both ways; new connections hang
        proxy.resume()      # everything held back flows again, in order
        proxy.cut()         # every open connection is closed (a reset)

A blackhole holds data back rather than dropping it: dropping bytes in the middle
of a TCP stream would corrupt the protocol, not partition the network. Held-back
statements reach the server when the link returns, which is exactly what a late,
partitioned worker looks like to the database.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self._server = socket.create_server((host, 0))
        self.host = host
        self.port: int = self._server.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.connections = 0
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    # -- faults ----------------------------------------------------------------------
    def blackhole(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def cut(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
            self._sockets.clear()
        for sock in sockets:
            _close(sock)

    @property
    def blackholed(self) -> bool:
        return not self._open.is_set()

    # -- plumbing --------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connect, args=(client,), name="proxy-conn", daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._open.wait()  # a blackholed link: the connection attempt hangs
        try:
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._sockets.update((client, server))
        for source, target in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(source, target), name="proxy-pump", daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._open.wait()  # held back while blackholed, then delivered in order
                if self._closed.is_set():
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(target)

    def close(self) -> None:
        self._closed.set()
        self._open.set()
        _close(self._server)
        self.cut()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
