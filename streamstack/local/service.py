"""What the local servers (Kafka, Prometheus, Alertmanager) have in common: a claimed port on 127.0.0.1, a
work directory with the log, one ManagedProcess, and stopping it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

import yaml

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK, claim_port, require_free
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes


class LocalService:
    """A subclass names the server: `name` for its process and log file, `title` for messages, `port_flag`
    for the command-line option that chooses its port."""

    name: ClassVar[str]
    title: ClassVar[str]
    port_flag: ClassVar[str]
    stop_timeout: ClassVar[float] = 15.0

    def __init__(self, runtimes: Runtimes, workdir: Path, port: int) -> None:
        self.runtimes = runtimes
        self.workdir = workdir
        self.port = claim_port(port, self.title, self.port_flag)
        self.log_path = workdir / f"{self.name}.log"
        self._process: ManagedProcess | None = None
        self._on_launch: Callable[[ManagedProcess], object] | None = None

    def on_launch(self, record: Callable[[ManagedProcess], object]) -> Self:
        """Call `record` with the process as soon as it is started, before waiting for it to be ready."""
        self._on_launch = record
        return self

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError(f"{self.title} has not been started")
        return self._process.pid

    def _launch(self, argv: Sequence[str]) -> ManagedProcess:
        self._process = ManagedProcess(self.name, argv, self.log_path)
        return self._process.start(on_start=self._on_launch)

    def listening_ports(self) -> dict[str, int]:
        """Every port the server listens on, by what it serves."""
        return {"port": self.port}

    def _relaunch(self) -> ManagedProcess:
        """Start the stopped server again with the command line it ran last; its log is appended to."""
        if self._process is None:
            raise StreamstackError(f"{self.title} has not been started")
        if self._process.is_running():
            raise StreamstackError(f"{self.title} is running (pid {self._process.pid}); stop it first")
        require_free(self.listening_ports(), self.title)
        return self._launch(self._process.argv)

    def exit_code(self) -> int | None:
        """None while the server runs (or before it was started); its exit code once it has exited."""
        return None if self._process is None else self._process.exit_code()

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop(timeout=self.stop_timeout)


class ConfiguredHttpService(LocalService):
    """A server that reads one YAML config file from its work directory and answers `GET /-/ready` with 200
    once it serves (Prometheus, Alertmanager)."""

    def __init__(self, runtimes: Runtimes, workdir: Path, port: int, config: Mapping[str, Any]) -> None:
        super().__init__(runtimes, workdir, port)
        self.config_path = workdir / f"{self.name}.yml"
        self._config = dict(config)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def _write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self._config, sort_keys=False))

    def _launch_until_ready(self, argv: Sequence[str], timeout: float, poll: float) -> None:
        self._launch(argv).wait_until_http_ready(self.title, f"{self.url}/-/ready", timeout, poll=poll)
