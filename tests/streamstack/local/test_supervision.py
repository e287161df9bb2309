"""The local stack's children never outlive its supervisor (SIGKILL, a closed output pipe), and `local down`
signals only the processes it recorded. The stack tests run a real `streamstack local up` with one job."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamstack.local.identity import ProcessIdentity
from streamstack.local.status import read_job_status
from tests.kafka_helpers import wait_for

CLI = [sys.executable, "-m", "streamstack.cli"]
MARKER = "STREAMSTACK_TEST_STACK"
"""Set in the supervisor's environment, inherited by every process of the stack (JVMs included)."""

JOB = "clickstream-windows"


def _environment_of(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _is_zombie(pid: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def stack_processes(marker: str) -> list[int]:
    """Live processes (not zombies) whose environment carries this test's marker."""
    wanted = f"{MARKER}={marker}".encode()
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and wanted in _environment_of(entry.name).split(b"\0")
        and not _is_zombie(entry.name)
    ]


def kill_leftovers(marker: str) -> None:
    for pid in stack_processes(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def read_state(workdir: Path) -> dict[str, object] | None:
    try:
        state: dict[str, object] = json.loads((workdir / "state.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return state


def _is_java_in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid and Path(f"/proc/{pid}/comm").read_text().strip() == "java"
    except OSError:
        return False


def job_has_jvm(job_pid: int, marker: str) -> bool:
    """The job's driver has started its JVM (a grandchild of the supervisor, in the driver's group)."""
    return any(_is_java_in_group(pid, job_pid) for pid in stack_processes(marker) if pid != job_pid)


@pytest.fixture
def stack_marker(tmp_path: Path) -> Iterator[str]:
    marker = str(tmp_path)
    try:
        yield marker
    finally:
        kill_leftovers(marker)


def start_stack(workdir: Path, marker: str, *extra_args: str, **popen: object) -> subprocess.Popen[bytes]:
    argv = [
        *CLI, "local", "up", "--workdir", str(workdir), "--jobs", JOB, "--kafka-port", "0",
        "--prometheus-port", "0", "--metrics-port", "0", "--exporter-port", "0", "--supervisor-port", "0",
        "--rate", "20", *extra_args,
    ]  # fmt: skip
    return subprocess.Popen(argv, env={**os.environ, MARKER: marker}, **popen)  # type: ignore[call-overload, no-any-return]


def wait_until_started(workdir: Path, marker: str, supervisor: subprocess.Popen[bytes]) -> dict[str, object]:
    """Until everything runs, the job's JVM included; the state file."""

    def started() -> bool:
        assert supervisor.poll() is None, "the supervisor exited while starting"
        state = read_state(workdir)
        if not state or not state.get("ready"):
            return False
        jobs = state["jobs"]
        assert isinstance(jobs, list)
        return job_has_jvm(int(jobs[0]["pid"]), marker)

    wait_for(started, timeout=240, what="the stack and its job's JVM", interval=1)
    state = read_state(workdir)
    assert state is not None
    return state


def stop_supervisor(supervisor: subprocess.Popen[bytes]) -> None:
    if supervisor.poll() is None:
        supervisor.kill()
    supervisor.wait()


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_sigkill_of_the_supervisor_leaves_no_process_of_the_stack(tmp_path: Path, stack_marker: str) -> None:
    workdir = tmp_path / "stack"
    with (tmp_path / "up.out").open("wb") as output:
        supervisor = start_stack(workdir, stack_marker, stdout=output, stderr=subprocess.STDOUT)
    try:
        state = wait_until_started(workdir, stack_marker, supervisor)
        jobs = state["jobs"]
        assert isinstance(jobs, list)
        job = jobs[0]
        wait_for(
            lambda: read_job_status(JOB, job["metrics_url"], True).state == "running",
            timeout=240,
            what="the job's query to run",
            interval=2,
        )
        recorded = state["processes"]
        assert isinstance(recorded, list)
        assert {entry["kind"] for entry in recorded} == {"kafka", "job", "producer", "exporter", "prometheus"}
        assert len(stack_processes(stack_marker)) > len(recorded)  # the job's JVM is not a direct child

        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait()
        killed = time.monotonic()
        wait_for(lambda: stack_processes(stack_marker) == [], timeout=10, what="no process of the stack left")
        print(f"no process of the stack left {time.monotonic() - killed:.1f} s after SIGKILL")
    finally:
        stop_supervisor(supervisor)


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_a_closed_output_pipe_then_ctrl_c_stops_every_child_cleanly(
    tmp_path: Path, stack_marker: str
) -> None:
    """`local up 2>&1 | tee up.log`, then Ctrl-C: tee is gone, and the supervisor still stops everything."""
    workdir = tmp_path / "stack"
    supervisor = start_stack(workdir, stack_marker, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until_started(workdir, stack_marker, supervisor)
        assert supervisor.stdout is not None
        supervisor.stdout.close()
        supervisor.send_signal(signal.SIGINT)
        assert supervisor.wait(timeout=120) == 0
    finally:
        stop_supervisor(supervisor)
    assert stack_processes(stack_marker) == []
    assert not (workdir / "state.json").exists()  # the supervisor's own teardown ran, not only the kernel's


def test_down_signals_only_processes_that_are_still_the_ones_recorded(tmp_path: Path) -> None:
    """Pids reused by unrelated processes (a wrong start time) are skipped and reported; a matching one is
    stopped."""
    unrelated = [subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(2)]
    ours = subprocess.Popen(["sleep", "61"], start_new_session=True)
    try:
        identities = [ProcessIdentity.of(process.pid) for process in [*unrelated, ours]]
        assert all(identities)
        supervisor, kafka, producer = (identity.as_record() for identity in identities if identity)
        state = {
            "supervisor_pid": supervisor["pid"],
            "supervisor": {**supervisor, "start_time": supervisor["start_time"] - 1},
            "workdir": str(tmp_path),
            "processes": [
                {"name": "kafka", "kind": "kafka", **kafka, "start_time": kafka["start_time"] + 7},
                {"name": "producer", "kind": "producer", **producer},
            ],
        }
        (tmp_path / "state.json").write_text(json.dumps(state))

        down = subprocess.run(
            [*CLI, "local", "down", "--workdir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

        assert down.returncode == 0, down.stderr
        assert (
            f"skipped pid {supervisor['pid']} (supervisor): a different process now has this pid"
            in down.stdout
        )
        assert f"skipped pid {kafka['pid']} (kafka): a different process now has this pid" in down.stdout
        assert "also stopped leftover producer" in down.stdout
        assert all(process.poll() is None for process in unrelated)
        assert ours.wait(timeout=10) == -signal.SIGTERM
    finally:
        for process in [*unrelated, ours]:
            process.kill()
            process.wait()
