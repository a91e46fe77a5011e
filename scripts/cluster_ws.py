#!/usr/bin/env python3
"""A WebSocket device for scripts/cluster_smoke.sh, on the standard library only.

Usage: cluster_ws.py URL TOKEN OUT [CONV_ID CLIENT_MSG_ID BODY]

Opens `URL/v1/ws` with the device token, writes `open` to OUT once the upgrade is answered,
then every text frame the server sends, one per line, as it arrives. With a conversation, a
request key and a body it sends that message as a `send` frame right after the upgrade. Exits
after writing `closed` when the server closes the socket or the connection drops; SIGTERM ends
it at once.
"""

import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.parse

# The server closes a socket that sends nothing for its idle timeout (60 s by default): a ping
# frame this often keeps a quiet socket open.
PING_INTERVAL_S = 20
# A read waits at most this long, so pings go out on time.
READ_TIMEOUT_S = 1
# The upgrade must be answered within this time.
CONNECT_TIMEOUT_S = 10
# Largest frame accepted from the server; the smoke's frames are far smaller.
FRAME_LEN_MAX = 1 << 20

OP_TEXT = 0x1
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA


class Closed(Exception):
    """The server closed the socket or the connection dropped."""


def frame(opcode, payload):
    """A masked client frame, as RFC 6455 requires of every client frame."""
    head = bytes([0x80 | opcode])
    length = len(payload)
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", length)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", length)
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


class Reader:
    """Reads whole frames from the socket; a timeout leaves what was read buffered."""

    def __init__(self, sock, buffered):
        self.sock = sock
        self.buf = buffered

    def _fill(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed()
            self.buf += chunk

    def next_frame(self):
        self._fill(2)
        opcode = self.buf[0] & 0x0F
        length = self.buf[1] & 0x7F
        at = 2
        if length == 126:
            self._fill(4)
            length = struct.unpack("!H", self.buf[2:4])[0]
            at = 4
        elif length == 127:
            self._fill(10)
            length = struct.unpack("!Q", self.buf[2:10])[0]
            at = 10
        if length > FRAME_LEN_MAX:
            raise Closed()
        self._fill(at + length)
        payload = self.buf[at : at + length]
        self.buf = self.buf[at + length :]
        return opcode, payload


def upgrade(url, token):
    """Connects and completes the upgrade; returns the socket and bytes read past the head."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /v1/ws HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    )
    sock.sendall(request.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise Closed()
        head += chunk
    head, rest = head.split(b"\r\n\r\n", 1)
    status = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status + b" ":
        raise SystemExit(f"upgrade refused: {status.decode(errors='replace')}")
    return sock, rest


def main():
    if len(sys.argv) not in (4, 7):
        raise SystemExit(__doc__)
    url, token, out_path = sys.argv[1:4]
    with open(out_path, "a", buffering=1, encoding="utf-8") as out:
        sock, rest = upgrade(url, token)
        out.write("open\n")
        if len(sys.argv) == 7:
            conv_id, client_msg_id, body = sys.argv[4:7]
            send = {"type": "send", "req_id": "s-1", "conv_id": conv_id,
                    "client_msg_id": client_msg_id, "body": body}
            sock.sendall(frame(OP_TEXT, json.dumps(send).encode()))
        sock.settimeout(READ_TIMEOUT_S)
        reader = Reader(sock, rest)
        pinged_at = time.monotonic()
        pings = 0
        try:
            while True:
                if time.monotonic() - pinged_at >= PING_INTERVAL_S:
                    pings += 1
                    ping = {"type": "ping", "req_id": f"p-{pings}"}
                    sock.sendall(frame(OP_TEXT, json.dumps(ping).encode()))
                    pinged_at = time.monotonic()
                try:
                    opcode, payload = reader.next_frame()
                except socket.timeout:
                    continue
                if opcode == OP_TEXT:
                    out.write(payload.decode("utf-8", errors="replace") + "\n")
                elif opcode == OP_PING:
                    sock.sendall(frame(OP_PONG, payload))
                elif opcode == OP_CLOSE:
                    sock.sendall(frame(OP_CLOSE, payload[:2]))
                    raise Closed()
        except (Closed, OSError):
            out.write("closed\n")


if __name__ == "__main__":
    main()
