"""A network that holds packets and loses the cancel request: the pool is not blocked."""
import socket
import struct
import threading
import time
import uuid

from conftest import dsn, wait_for
from ratelimit_client import Limiter, Source, _cancel

CANCEL_CODE = 80877102


class HoldingProxy:
    """A TCP proxy to the outage cluster that can hold every packet and swallows cancel requests."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.hold = threading.Event()
        self.cancels = 0
        self.sockets = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(client)
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client):
        first = client.recv(65536)
        if len(first) == 16 and struct.unpack("!II", first[:8]) == (16, CANCEL_CODE):
            self.cancels += 1
            return      # swallowed: never forwarded, never answered, never closed
        upstream = socket.create_connection(self.target)
        self.sockets.append(upstream)
        upstream.sendall(first)
        threading.Thread(target=self.pump, args=(upstream, client), daemon=True).start()
        self.pump(client, upstream)

    def pump(self, src, dst):
        while True:
            while self.hold.is_set():
                time.sleep(0.01)
            try:
                src.settimeout(0.05)
                data = src.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                dst.close()
                return
            # a held network delivers nothing until it is released
            while self.hold.is_set():
                time.sleep(0.01)
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self):
        self.listener.close()
        for s in self.sockets:
            s.close()


def test_lost_cancel_does_not_block_the_pool():
    port = int(dsn("outage").split("port=")[1].split()[0])
    proxy = HoldingProxy(port)
    lim = Limiter(dsn("outage").replace(f"port={port}", f"port={proxy.port}"), pool_size=1, backoff=0.3)
    try:
        # a connection in the pool (a loaded machine may take longer than the deadline to make it)
        assert wait_for(lambda: lim.take("lost_cancel", uuid.uuid4().hex, 0.001, 50).source == Source.DATABASE, 10)
        key = uuid.uuid4().hex
        proxy.hold.set()
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            start = time.monotonic()
            d = lim.take("lost_cancel", key, 0.001, 50)
            assert time.monotonic() - start < 0.5 and d.source == Source.FALLBACK
            time.sleep(0.05)
        assert proxy.cancels >= 1 and _cancel.running() >= 1
        stuck = _cancel.running()
        proxy.hold.clear()
        # back to the database while the cancels stay lost: they hold no pool slot
        assert wait_for(lambda: lim.take("lost_cancel", key, 0.001, 50).source == Source.DATABASE, 10), \
            lim._core.failure
        assert _cancel.running() >= stuck
        # a close that waited for the lost cancels would never return
        closer = threading.Thread(target=lim.close, daemon=True)
        closer.start()
        closer.join(5)
        assert not closer.is_alive()
    finally:
        proxy.close()
