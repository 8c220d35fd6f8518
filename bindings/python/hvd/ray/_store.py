"""The job's rendezvous store, hosted by the driver of a Ray job.

It speaks the wire format of hvd's own store (src/rendezvous/frame.h: frames
``u32 length | payload | HMAC-SHA256(secret, seq || payload)``, sequence numbers
per connection and direction, the server's direction with the top bit set), so
libhvd's client in every worker joins it as it joins hvdrun's. The driver also
reads and writes keys directly (the elastic driver's bookkeeping).

One thread accepts; one thread per connection serves it (a job has a few
connections per worker). Every wait is bounded: a connection that does not
authenticate within ``auth_timeout_s`` is dropped, a Get waits at most what the
client asked, and a malformed or forged frame drops its connection.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import threading
import time

PROTOCOL_VERSION = 1
MAX_FRAME = 64 << 20
_SERVER_TO_CLIENT = 1 << 63
_PING, _SET, _GET, _ADD, _CHECK = 1, 2, 3, 4, 5
_OK, _TIMED_OUT, _FAILED = 0, 1, 2


def new_secret():
    """A fresh job secret: 64 hex digits (32 random bytes), as hvdrun makes."""
    return secrets.token_hex(32)


class _Malformed(Exception):
    pass


class _Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise _Malformed("short payload")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def blob(self):
        return self.take(self.u32())

    def str(self):
        return self.blob().decode("utf-8", "replace")

    def end(self):
        if self.pos != len(self.data):
            raise _Malformed("trailing bytes")


def _blob(b):
    return struct.pack(">I", len(b)) + b


class StoreServer:
    """Serves the store on ``host:port`` (port 0: any free port) until close()."""

    def __init__(self, secret, host="0.0.0.0", port=0, auth_timeout_s=5.0):
        self._key = bytes.fromhex(secret)
        if not self._key:
            raise ValueError("the rendezvous secret must be a non-empty hex string")
        self._auth_timeout_s = auth_timeout_s
        self._data = {}
        self._cond = threading.Condition()
        self._closed = False
        self._conns = set()
        self._sock = socket.create_server((host, port), reuse_port=False, backlog=256)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="hvd-ray-store", daemon=True)
        self._thread.start()

    # -- direct access for the driver --------------------------------------
    def set(self, key, value):
        if isinstance(value, str):
            value = value.encode()
        with self._cond:
            self._data[key] = bytes(value)
            self._cond.notify_all()

    def get(self, key, default=None):
        with self._cond:
            return self._data.get(key, default)

    def keys(self, prefix=""):
        with self._cond:
            return [k for k in self._data if k.startswith(prefix)]

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            conns = list(self._conns)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        except OSError:
            pass
        self._sock.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)

    # -- serving ------------------------------------------------------------
    def _accept(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._cond:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="hvd-ray-store-conn").start()

    def _recv(self, conn, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = conn.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def _read_frame(self, conn, seq):
        (length,) = struct.unpack(">I", self._recv(conn, 4))
        if length > MAX_FRAME:
            raise _Malformed("frame too long")
        payload = self._recv(conn, length)
        mac = self._recv(conn, 32)
        want = hmac.new(self._key, struct.pack(">Q", seq) + payload, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, want):
            raise _Malformed("bad MAC")
        return payload

    def _send_frame(self, conn, seq, payload):
        mac = hmac.new(self._key, struct.pack(">Q", seq) + payload, hashlib.sha256).digest()
        conn.sendall(struct.pack(">I", len(payload)) + payload + mac)

    def _serve(self, conn):
        seq = 0
        try:
            conn.settimeout(self._auth_timeout_s)
            while True:
                payload = self._read_frame(conn, seq)
                conn.settimeout(None)
                reply = self._handle(_Reader(payload))
                self._send_frame(conn, _SERVER_TO_CLIENT | seq, reply)
                seq += 1
        except (OSError, ConnectionError, _Malformed, socket.timeout):
            pass
        finally:
            with self._cond:
                self._conns.discard(conn)
            conn.close()

    def _handle(self, r):
        cmd = r.u8()
        if cmd == _PING:
            r.u32()
            r.end()
            return bytes([_OK]) + struct.pack(">I", PROTOCOL_VERSION)
        if cmd == _SET:
            key, value = r.str(), r.blob()
            r.end()
            self.set(key, value)
            return bytes([_OK])
        if cmd == _GET:
            key, wait_ms = r.str(), r.u64()
            r.end()
            return self._wait_get(key, wait_ms)
        if cmd == _ADD:
            key, delta = r.str(), r.u64()
            r.end()
            with self._cond:
                old = self._data.get(key, bytes(8))
                if len(old) != 8:
                    msg = f"key {key!r} holds {len(old)} bytes, not a counter".encode()
                    return bytes([_FAILED]) + struct.pack(">i", -1) + _blob(msg)
                new = (struct.unpack(">Q", old)[0] + delta) & ((1 << 64) - 1)
                self._data[key] = struct.pack(">Q", new)
                self._cond.notify_all()
            return bytes([_OK]) + struct.pack(">Q", new)
        if cmd == _CHECK:
            keys = [r.str() for _ in range(r.u32())]
            r.end()
            with self._cond:
                present = bytes(1 if k in self._data else 0 for k in keys)
            return bytes([_OK]) + struct.pack(">I", len(keys)) + present
        raise _Malformed(f"unknown command {cmd}")

    def _wait_get(self, key, wait_ms):
        deadline = time.monotonic() + wait_ms / 1000.0
        with self._cond:
            while key not in self._data and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return bytes([_TIMED_OUT])
                self._cond.wait(min(left, 1.0))
            if self._closed:
                raise ConnectionError("closing")
            return bytes([_OK]) + _blob(self._data[key])
