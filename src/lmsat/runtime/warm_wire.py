"""The warm interpreter's wire (lmsat.runtime.warm): a length-prefixed JSON message over a Unix
socket, the first one carrying descriptors (a job's standard streams, a forked job's pidfd).

Only the standard library: a job's script imports it before anything.
"""

from __future__ import annotations

import json
import os
import socket
import struct

HEADER = struct.Struct("!I")


def send(sock: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode()
    header = HEADER.pack(len(data))
    if fds:
        socket.send_fds(sock, [header], list(fds))
    else:
        sock.sendall(header)
    sock.sendall(data)


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """(message, descriptors); (None, []) at end of stream."""
    if max_fds:
        header, fds, _flags, _address = socket.recv_fds(sock, HEADER.size, max_fds)
        if len(header) < HEADER.size:
            rest = _receive_exactly(sock, HEADER.size - len(header)) if header else None
            if rest is None:
                for fd in fds:
                    os.close(fd)
                return None, []
            header += rest
    else:
        header, fds = _receive_exactly(sock, HEADER.size), []
        if header is None:
            return None, []
    data = _receive_exactly(sock, HEADER.unpack(header)[0])
    if data is None:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds
