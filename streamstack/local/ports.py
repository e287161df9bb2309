"""Loopback ports: pick a free one, or check that a chosen one is free before a service needs it.

A port handed out by `free_port` stays reserved for the process that asked for it, for as long as that
process lives, so no other streamstack process (another test worker, another stack) is handed it while the
service that owns it is stopped for a restart. Ports are picked below the kernel's ephemeral range: the
ports of outgoing connections (clients reconnecting to a stopped broker make many) come from that range and
would otherwise hold a port a restarting service needs.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamstack.errors import StreamstackError

LOOPBACK = "127.0.0.1"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED_PORT = 10_000
MIN_PICKABLE_PORTS = 2_000
PICK_ATTEMPTS = 200


def reservations_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"streamstack-ports-{os.getuid()}"


def pickable_ports() -> range:
    """The ports `free_port` picks from: those below the ephemeral range, or that range itself if too few."""
    try:
        low, high = (int(bound) for bound in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        low, high = 32_768, 60_999
    if low - LOWEST_PICKED_PORT >= MIN_PICKABLE_PORTS:
        return range(LOWEST_PICKED_PORT, low)
    return range(low, high + 1)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reserved_by_another_live_process(reservation: Path) -> bool:
    try:
        owner = int(reservation.read_text())
    except (OSError, ValueError):
        return False
    return owner != os.getpid() and _process_alive(owner)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


@contextmanager
def _reservations_locked() -> Iterator[Path]:
    directory = reservations_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield directory
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_handed_out: set[int] = set()


def free_port() -> int:
    """A port nobody listens on, reserved for this process until it exits: never handed out twice."""
    candidates = pickable_ports()
    with _reservations_locked() as directory:
        for _ in range(PICK_ATTEMPTS):
            port = random.choice(candidates)
            reservation = directory / str(port)
            if port in _handed_out or _reserved_by_another_live_process(reservation) or not _bindable(port):
                continue
            reservation.write_text(str(os.getpid()))
            _handed_out.add(port)
            return port
    raise StreamstackError(
        f"no free port on {LOOPBACK} in {candidates.start}-{candidates.stop - 1} after {PICK_ATTEMPTS} "
        f"tries; stale reservations in {directory} can be removed"
    )


def claim_port(port: int, what: str, flag: str) -> int:
    """Return `port`, or a free port when it is 0; fail naming the flag when it is taken."""
    if port == 0:
        return free_port()
    # As the services themselves do: connections of a stack just stopped (TIME_WAIT) don't count.
    if not _bindable(port):
        raise StreamstackError(
            f"port {port} on {LOOPBACK} is in use ({what}); choose another with {flag} PORT, or 0 for any"
        )
    return port


def require_free(ports: dict[str, int], owner: str) -> None:
    """Fail naming the port when one of a stopped service's ports was taken before it could start again."""
    taken = [f"{what} {port}" for what, port in ports.items() if not _bindable(port)]
    if taken:
        raise StreamstackError(
            f"{owner} cannot start again on its ports: {', '.join(taken)} on {LOOPBACK} taken by another "
            "process while it was stopped"
        )


def wait_for_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex((LOOPBACK, port)) == 0:
                return True
        time.sleep(0.2)
    return False
