"""`python -m monitoring.lag_exporter` as a child process on a free port, stopped and reaped at the end."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import repo_root


@dataclass(frozen=True)
class ExporterProcess:
    process: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:<port>/metrics
    log_path: Path  # its stdout and stderr

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def thread_count(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/task"))

    def cmdline(self) -> str:
        return Path(f"/proc/{self.process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _listening_url(log: Path, process: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"serving (http://127\.0\.0\.1:\d+/metrics)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            raise AssertionError(f"the exporter exited with {process.returncode}: {log.read_text()}")
        time.sleep(0.1)
    raise TimeoutError(f"the exporter did not start listening: {log.read_text()}")


@contextmanager
def running_exporter(
    flags: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, timeout: float = 60
) -> Iterator[ExporterProcess]:
    """The exporter with `flags` (plus `--listen 127.0.0.1:0`); `env` replaces the environment when given.
    Stopped with SIGTERM (killed if it does not stop within 30 s) and reaped whatever happens."""
    command = [sys.executable, "-m", "monitoring.lag_exporter", "--listen", "127.0.0.1:0", *flags]
    with log_path.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=repo_root(),
            stdout=output,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
        )
    try:
        yield ExporterProcess(process, _listening_url(log_path, process, timeout), log_path)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
