"""Free ports across processes: the broker-restart test once failed because, during its 18 s outage, another
test worker was handed the stopped broker's metrics port and bound it first. A port handed out stays reserved
for the asking process while it lives, and a restart on a taken port fails naming the port."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK, free_port, pickable_ports
from streamstack.local.service import LocalService
from streamstack.runtimes import Runtimes

PORTS_PER_PROCESS = 600

ASK_FOR_PORTS = textwrap.dedent(
    f"""
    import sys
    from streamstack.local.ports import free_port
    print(" ".join(str(free_port()) for _ in range({PORTS_PER_PROCESS})), flush=True)
    sys.stdin.read()  # hold the reservations until the test has every answer
    """
)


def _ports_answered(asker: subprocess.Popen[str]) -> list[int]:
    assert asker.stdout is not None
    return [int(port) for port in asker.stdout.readline().split()]


def test_processes_asking_at_once_never_get_the_same_port_and_none_from_the_ephemeral_range() -> None:
    askers = [
        subprocess.Popen(
            [sys.executable, "-c", ASK_FOR_PORTS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        answers = [_ports_answered(asker) for asker in askers]
        mine = [free_port() for _ in range(PORTS_PER_PROCESS)]
    finally:
        for asker in askers:
            asker.communicate(timeout=30)
    everyone = [port for answer in [*answers, mine] for port in answer]

    assert [len(answer) for answer in answers] == [PORTS_PER_PROCESS, PORTS_PER_PROCESS]
    assert len(set(everyone)) == len(everyone), "a port was handed to two processes"
    picked_from = pickable_ports()
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(port in picked_from and port < ephemeral_low for port in everyone)


class _HttpServer(LocalService):
    """The smallest real server a LocalService can run: Python's http.server on the claimed port."""

    name: ClassVar[str] = "http-server"
    title: ClassVar[str] = "the test's HTTP server"
    port_flag: ClassVar[str] = "--port"

    def start(self) -> None:
        self._launch([sys.executable, "-m", "http.server", "--bind", LOOPBACK, str(self.port)])
        self._process.wait_until_http_ready(self.title, f"http://{LOOPBACK}:{self.port}/", timeout=30)  # type: ignore[union-attr]

    def restart(self) -> None:
        self._relaunch()


def test_a_stopped_server_restarts_on_its_port_and_fails_naming_it_when_taken(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    server = _HttpServer(runtimes, tmp_path, port=0)
    try:
        server.start()
        server.stop()
        server.restart()  # its port is free again: it comes back on it
        assert server.exit_code() is None
        server.stop()

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its connections left TIME_WAIT
            squatter.bind((LOOPBACK, server.port))
            squatter.listen()
            with pytest.raises(StreamstackError, match=f"port {server.port} on {LOOPBACK} taken by another"):
                server.restart()
    finally:
        server.stop()
