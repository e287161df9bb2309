"""Restarting the stack's jobs, producers and lag exporter when they exit, as spark-operator restarts a
SparkApplication (`RestartPolicy`): with a growing wait, counted, and marked failed after too many failures in
a row.

`Supervisor.tick()` never blocks: it polls the children, starts those whose wait is over and returns what
happened. Whoever owns the supervisor calls it in its loop, so Ctrl-C is never held up by a restart. A child's
new pid and start time reach `on_start` (the state file) before anything waits on the new process.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from streamstack.local.process import ManagedProcess, process_group_alive
from streamstack.local.restart_policy import RestartPolicy

ChildState = Literal["running", "restarting", "failed", "completed"]

LEFTOVER_GRACE_SECONDS = 10.0
"""How long a dead child's process group (a driver's JVM) gets to exit after SIGTERM before SIGKILL."""

_ERROR_LINE = re.compile(r"error|exception|fatal|traceback", re.IGNORECASE)
_OWN_ERROR_LINE = re.compile(r"^[\w.-]+: error: ")


def last_error_line(log: bytes) -> str | None:
    """The program's own last `<prog>: error: ...` line (a job's named cause, argparse's usage error), else
    the last line of a run's output that reports an error (a traceback ends in one), else its last line."""
    lines = [line.strip() for line in log.decode(errors="replace").splitlines() if line.strip()]
    own = [line for line in lines if _OWN_ERROR_LINE.match(line)]
    if own:
        return own[-1]
    for line in reversed(lines):
        if _ERROR_LINE.search(line) and not line.startswith("Traceback"):
            return line
    return lines[-1] if lines else None


@dataclass
class SupervisedChild:
    process: ManagedProcess
    kind: str
    state: ChildState = "running"
    restarts: int = 0
    failures_in_a_row: int = 0
    last_exit_code: int | None = None
    last_error: str | None = None
    run_started_at: float = 0.0
    exited_at: float = 0.0
    restart_at: float = 0.0
    log_offset: int = 0
    """Size of the log (appended to by every run) when the current run started."""

    @property
    def name(self) -> str:
        return self.process.name

    def as_record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "state": self.state,
            "restarts": self.restarts,
            "failures_in_a_row": self.failures_in_a_row,
            "last_exit_code": self.last_exit_code,
            "last_error": self.last_error,
            "log": str(self.process.log_path),
        }

    def _run_output(self) -> bytes:
        try:
            with self.process.log_path.open("rb") as log:
                log.seek(self.log_offset)
                return log.read()
        except FileNotFoundError:
            return b""


class Supervisor:
    def __init__(
        self,
        policy: RestartPolicy,
        on_start: Callable[[ManagedProcess, str], object],
        on_change: Callable[[], object],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`on_start(process, kind)` records a (re)started process; `on_change()` follows any change of a
        child's supervision state."""
        self.policy = policy
        self._on_start = on_start
        self._on_change = on_change
        self._clock = clock
        self.children: list[SupervisedChild] = []

    def start(self, process: ManagedProcess, kind: str) -> ManagedProcess:
        child = SupervisedChild(process, kind)
        self.children.append(child)
        self._run(child)
        self._on_change()
        return process

    def records(self) -> dict[str, dict[str, Any]]:
        return {child.name: child.as_record() for child in self.children}

    def tick(self) -> list[str]:
        """Notice exits and start the children whose wait is over; one line per event."""
        events: list[str] = []
        now = self._clock()
        for child in self.children:
            if child.state == "running":
                exit_code = child.process.exit_code()
                if exit_code is not None:
                    events.append(self._exited(child, exit_code, now))
            elif child.state == "restarting" and now >= child.restart_at:
                if self._leftovers_remain(child, now):
                    continue
                self._run(child)
                child.restarts += 1
                events.append(f"{child.name} restarted (restart {child.restarts}, pid {child.process.pid})")
        if events:
            self._on_change()
        return events

    def _run(self, child: SupervisedChild) -> None:
        try:
            child.log_offset = child.process.log_path.stat().st_size
        except FileNotFoundError:
            child.log_offset = 0
        child.state = "running"
        child.run_started_at = self._clock()
        child.process.start(on_start=lambda started: self._on_start(started, child.kind))

    def _exited(self, child: SupervisedChild, exit_code: int, now: float) -> str:
        child.last_exit_code = exit_code
        child.exited_at = now
        child.last_error = last_error_line(child._run_output())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signal.SIGTERM)  # what is left of its group, say a driver's JVM
        exited = f"{child.name} exited with code {exit_code}"
        if not self.policy.restarts_after(exit_code):
            child.state = "completed" if exit_code == 0 else "failed"
            return (
                f"{exited}; not restarted (restart policy {self.policy.type}); log {child.process.log_path}"
            )
        ran_for = now - child.run_started_at
        child.failures_in_a_row = 1 if ran_for >= self.policy.stable_after else child.failures_in_a_row + 1
        if self.policy.gives_up_after(child.failures_in_a_row):
            child.state = "failed"
            return (
                f"{exited}; failed {child.failures_in_a_row} times in a row, not restarted again: "
                f"{child.last_error} (log {child.process.log_path})"
            )
        delay = self.policy.retry_delay(child.failures_in_a_row)
        child.state = "restarting"
        child.restart_at = now + delay
        return f"{exited}; restarting in {delay:.0f} s (log {child.process.log_path})"

    def _leftovers_remain(self, child: SupervisedChild, now: float) -> bool:
        """The last run's process group still has members: SIGKILL them once the grace is over, and restart
        only when none is left (a second driver must not share the checkpoint with the first one's JVM)."""
        if not process_group_alive(child.process.pid):
            return False
        if now - child.exited_at >= LEFTOVER_GRACE_SECONDS:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.process.pid, signal.SIGKILL)
        return True
