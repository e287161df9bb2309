"""Child processes that are always stopped: own process group, log to a file, terminate then kill."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from streamstack.errors import StreamstackError

_PROC = Path("/proc")


def _live_members_from_proc(pgid: int) -> bool:
    """Any process of the group that is not a zombie (a zombie has exited; only its parent can reap it)."""
    for stat_file in _PROC.glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue
        # The command name in parentheses may contain spaces; the fields after it are fixed.
        state, _ppid, group = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state != "Z":
            return True
    return False


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _live_members_from_proc(pgid) if _PROC.is_dir() else True


def stop_process_group(pgid: int, timeout: float = 15.0, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM the whole group (a PySpark driver's JVM included), then SIGKILL what is left.

    `reap` collects our own child's exit status while we wait, so it does not linger as a zombie.
    """
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            if not process_group_alive(pgid):
                return
            time.sleep(0.1)


class ManagedProcess:
    """One child process in a new session, so Ctrl-C reaches the supervisor, which stops it in order."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self._popen.pid

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    def exit_code(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_until_http_ready(self, name: str, url: str, timeout: float, poll: float = 0.2) -> None:
        """Wait until `url` answers 200; StreamstackError naming `name` if the process exits first or the
        time runs out (the process is then stopped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                raise StreamstackError(
                    f"{name} exited while starting: {self.log_tail(5)} (see {self.log_path})"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(poll)
        self.stop()
        raise StreamstackError(f"{name} did not become ready on {url} within {timeout:.0f} s")

    def stop(self, timeout: float = 15.0) -> None:
        if self._popen is None:
            return
        # The group id is the pid (new session); children such as a PySpark JVM live in the same group.
        stop_process_group(self._popen.pid, timeout, reap=self._popen.poll)
        try:
            self._popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
