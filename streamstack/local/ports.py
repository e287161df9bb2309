"""Loopback ports: pick a free one, or check that a chosen one is free before a service needs it."""

from __future__ import annotations

import socket
import time

from streamstack.errors import StreamstackError

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def claim_port(port: int, what: str, flag: str) -> int:
    """Return `port`, or a free port when it is 0; fail naming the flag when it is taken."""
    if port == 0:
        return free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the services themselves do: connections of a stack just stopped (TIME_WAIT) don't count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            raise StreamstackError(
                f"port {port} on {LOOPBACK} is in use ({what}); choose another with {flag} PORT, or 0 for any"
            ) from None
    return port


def wait_for_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((LOOPBACK, port)) == 0:
                return True
        time.sleep(0.2)
    return False
