"""The restart policy through the real supervision code: real child processes that exit, a fake clock for the
waits between restarts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from streamstack.errors import StreamstackError
from streamstack.local.process import ManagedProcess
from streamstack.local.restart_policy import RestartPolicy
from streamstack.local.supervision import Supervisor, last_error_line
from streamstack.paths import REPO_ROOT

FAILING = (
    "import sys; print('starting'); "
    "print('error: unrecognized arguments: --bogus', file=sys.stderr); sys.exit(2)"
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def child(tmp_path: Path, code: str, name: str = "producer") -> ManagedProcess:
    return ManagedProcess(name, [sys.executable, "-c", code], tmp_path / f"{name}.log")


def tick_until_exit_seen(supervisor: Supervisor) -> list[str]:
    """Tick (real time passes, the fake clock does not) until the supervisor has noticed an exit."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events = supervisor.tick()
        if events:
            return events
        time.sleep(0.02)
    raise TimeoutError("the child did not exit")


def supervised(policy: RestartPolicy, clock: FakeClock) -> tuple[Supervisor, list[int]]:
    started: list[int] = []
    supervisor = Supervisor(policy, lambda process, _kind: started.append(process.pid), lambda: None, clock)
    return supervisor, started


def test_waits_double_per_failure_in_a_row_until_the_child_is_marked_failed(tmp_path: Path) -> None:
    clock = FakeClock()
    supervisor, started = supervised(RestartPolicy(on_failure_retries=3, on_failure_retry_interval=10), clock)
    supervisor.start(child(tmp_path, FAILING), "producer")
    [state] = supervisor.children
    waits = []
    for _ in range(3):
        [event] = tick_until_exit_seen(supervisor)
        assert state.state == "restarting", event
        waits.append(state.restart_at - clock.now)
        clock.now = state.restart_at - 0.001
        assert supervisor.tick() == [] and state.state == "restarting"  # not a moment early
        clock.now = state.restart_at
        assert supervisor.tick() == [f"producer restarted (restart {state.restarts}, pid {started[-1]})"]

    [event] = tick_until_exit_seen(supervisor)

    assert waits == [10, 20, 40]
    assert state.state == "failed" and state.restarts == 3 and len(set(started)) == 4
    assert state.last_error == "error: unrecognized arguments: --bogus"
    assert event.startswith("producer exited with code 2; failed 4 times in a row, not restarted again:")
    clock.now += 3600
    assert supervisor.tick() == [] and state.restarts == 3


def test_a_run_that_lasted_starts_a_new_streak_and_on_failure_leaves_a_clean_exit_alone(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    policy = RestartPolicy(type="OnFailure", on_failure_retry_interval=5, stable_after=60)
    supervisor, _ = supervised(policy, clock)
    supervisor.start(child(tmp_path, FAILING), "job")
    [state] = supervisor.children
    tick_until_exit_seen(supervisor)
    clock.now = state.restart_at
    supervisor.tick()
    tick_until_exit_seen(supervisor)
    assert (state.failures_in_a_row, state.restart_at - clock.now) == (2, 10)
    clock.now = state.restart_at
    supervisor.tick()
    clock.now += 61  # this run lasts past stable_after
    tick_until_exit_seen(supervisor)
    assert (state.failures_in_a_row, state.restart_at - clock.now) == (1, 5)

    supervisor.start(child(tmp_path, "pass", name="one-shot"), "producer")
    tick_until_exit_seen(supervisor)
    assert supervisor.children[1].state == "completed"


def test_never_restarts_nothing() -> None:
    assert not RestartPolicy(type="Never").restarts_after(1)
    assert RestartPolicy(type="Always").restarts_after(0)
    with pytest.raises(StreamstackError, match="--restart-interval 0"):
        RestartPolicy(on_failure_retry_interval=0)


def test_defaults_are_the_charts() -> None:
    chart = yaml.safe_load((REPO_ROOT / "charts" / "streaming-job" / "values.yaml").read_text())[
        "restartPolicy"
    ]
    policy = RestartPolicy()
    assert (policy.type, policy.on_failure_retry_interval) == (chart["type"], chart["onFailureRetryInterval"])


def test_last_error_line_is_a_tracebacks_last_line() -> None:
    log = b"INFO started\nTraceback (most recent call last):\n  File x\nValueError: no topic\n\n"
    assert last_error_line(log) == "ValueError: no topic"
    assert last_error_line(b"killed\n") == "killed"
    assert last_error_line(b"") is None


def test_last_error_line_prefers_the_programs_own_error_line() -> None:
    """A job names the cause in one line before Spark's traceback, whose message runs over many lines (the
    query's plan among them); that line is what `local status` shows."""
    log = (
        b"clickstream-windows: error: checkpoint write failed under /c/q: No space left on device\n"
        b"Traceback (most recent call last):\n  File x\n"
        b"pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query terminated\n"
        b"=== Streaming Query ===\nLogical Plan:\n+- ~Project [dead_letter_reason#29 AS error_kind#3]\n"
    )
    assert last_error_line(log) == (
        "clickstream-windows: error: checkpoint write failed under /c/q: No space left on device"
    )
