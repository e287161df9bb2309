"""Child processes that are always stopped: own process group, log to a file, terminate then kill, and killed
by the kernel when the process that started them dies (however it dies)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.local.identity import stat_fields

_PROC = Path("/proc")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
"""What makes a supervisor stop its children cleanly."""


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[frozenset[int]]:
    """Hold STOP_SIGNALS back (in this thread) until the block ends, so that a child is started and recorded
    before a stop can begin; yields the signal mask to restore in a child."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield frozenset(previous)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _die_with_parent(mask: frozenset[int]) -> Callable[[], None]:
    """A preexec_fn: the child gets SIGKILL when the thread that forked it exits (PR_SET_PDEATHSIG).

    The kernel ties this to the *thread*, so children must be started from one that lives as long as the
    supervisor (its main thread). Only direct children are covered; their own children are reached through
    the process group, or (a PySpark driver's JVM) exit when their parent's pipe closes."""
    if not sys.platform.startswith("linux"):
        return lambda: signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os._exit(127)

    return preexec


def _live_members_from_proc(pgid: int) -> bool:
    """Any process of the group that is not a zombie (a zombie has exited; only its parent can reap it)."""
    for process_dir in _PROC.glob("[0-9]*"):
        fields = stat_fields(int(process_dir.name))
        if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, group, ...
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


def stop_process_groups(
    groups: Sequence[tuple[int, Callable[[], object] | None]], timeout: float = 15.0
) -> None:
    """SIGTERM every group (a PySpark driver's JVM included), then SIGKILL what is left after `timeout`.

    All groups are signalled before any is waited for, so their graceful stops (a Spark driver's takes
    seconds) overlap rather than add up. A group's `reap` collects our own child's exit status while we wait,
    so it does not linger as a zombie.
    """
    remaining = list(groups)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        signalled = []
        for pgid, reap in remaining:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
                signalled.append((pgid, reap))
        remaining = signalled
        deadline = time.monotonic() + wait
        while remaining and time.monotonic() < deadline:
            for _pgid, reap in remaining:
                if reap is not None:
                    reap()
            remaining = [(pgid, reap) for pgid, reap in remaining if process_group_alive(pgid)]
            if remaining:
                time.sleep(0.1)
        if not remaining:
            return


class ManagedProcess:
    """One child process in a new session, so Ctrl-C reaches the supervisor, which stops it in order; the
    kernel kills it if the supervisor dies first (start it from the main thread)."""

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

    def start(self, on_start: Callable[[ManagedProcess], object] | None = None) -> ManagedProcess:
        """Start the process; `on_start` (say, writing its pid to a state file) runs before a stop signal
        can interrupt the supervisor, so nothing it starts goes unrecorded."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log, stop_signals_deferred() as mask:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent(mask),  # noqa: PLW1509 (the only way to set PDEATHSIG)
            )
            if on_start is not None:
                on_start(self)
        return self

    def wait_group(self, timeout: float) -> int:
        """The process's exit code once it and every process of its group (a PySpark driver's JVM, which
        exits after its Python) have exited; subprocess.TimeoutExpired if that takes longer."""
        if self._popen is None:
            raise RuntimeError(f"{self.name} has not been started")
        deadline = time.monotonic() + timeout
        exit_code = self._popen.wait(timeout)
        while process_group_alive(self.pid):
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.argv, timeout)
            time.sleep(0.1)
        return exit_code

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
        stop_all([self], timeout)

    def _reap(self) -> None:
        if self._popen is None:
            return
        try:
            self._popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()


def stop_all(processes: Sequence[ManagedProcess], timeout: float = 15.0) -> None:
    """Stop several processes at once (see stop_process_groups)."""
    # The group id is the pid (new session); children such as a PySpark JVM live in the same group.
    started = [process for process in processes if process._popen is not None]
    stop_process_groups([(process.pid, process.exit_code) for process in started], timeout)
    for process in started:
        process._reap()
