"""The local supervisor restarts what exits, as spark-operator does: a SIGKILLed driver comes back and resumes
from its checkpoint; a child that fails at once every time ends marked failed with its last error line; a dead
Prometheus stops the whole stack. On real Kafka, Spark and Prometheus."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamstack.errors import StreamstackError
from streamstack.local.pipeline import Pipeline, streaming_pipeline
from streamstack.local.restart_policy import RestartPolicy
from streamstack.local.stack import LocalStack, LocalStackOptions
from streamstack.local.status import read_job_status
from streamstack.runtimes import Runtimes
from tests.kafka_helpers import scrape, wait_for
from tests.streamstack.local.test_supervision import (
    CLI,
    JOB,
    kill_leftovers,
    read_state,
    stack_processes,
    start_stack,
    stop_supervisor,
    wait_until_started,
)

RESTARTS = "streamstack_local_child_restarts_total"


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[str]:
    try:
        yield str(tmp_path)
    finally:
        kill_leftovers(str(tmp_path))


def local_status(workdir: Path) -> dict[str, Any]:
    result = subprocess.run(
        [*CLI, "local", "status", "--json", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def local_status_text(workdir: Path) -> str:
    return subprocess.run(
        [*CLI, "local", "status", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_sigkilled_driver_is_restarted_and_resumes_from_its_checkpoint(tmp_path: Path, marker: str) -> None:
    workdir = tmp_path / "stack"
    with (tmp_path / "up.out").open("wb") as output:
        supervisor = start_stack(
            workdir, marker, "--restart-interval", "2", stdout=output, stderr=subprocess.STDOUT
        )
    try:
        state = wait_until_started(workdir, marker, supervisor)
        jobs: list[dict[str, Any]] = state["jobs"]  # type: ignore[assignment]
        metrics_url = jobs[0]["metrics_url"]
        old_pid = int(jobs[0]["pid"])

        def batches_done() -> int:
            return read_job_status(JOB, metrics_url, True).last_batch_id or -1

        wait_for(lambda: batches_done() >= 3, timeout=300, what="the job's fourth batch", interval=1)
        batch_before = batches_done()
        os.kill(old_pid, signal.SIGKILL)
        killed = time.monotonic()

        def new_driver_batches() -> list[int]:
            """Batch ids the restarted driver reported, in the order seen."""
            current = read_state(workdir)
            assert current is not None and supervisor.poll() is None
            current_jobs: list[dict[str, Any]] = current["jobs"]  # type: ignore[assignment]
            if int(current_jobs[0]["pid"]) == old_pid:
                return seen
            status = read_job_status(JOB, metrics_url, True)
            if status.last_batch_id is not None and status.last_batch_id not in seen:
                seen.append(status.last_batch_id)
            return seen

        seen: list[int] = []
        wait_for(
            lambda: bool(new_driver_batches()), timeout=300, what="the restarted driver's batch", interval=0.5
        )
        recovery = time.monotonic() - killed
        # The recovery time (restart wait, leftover JVM, Spark start, one batch) is a goal reported from a
        # quiet machine, not asserted here: under the suite's load it varies several-fold.
        print(f"restarted driver's batch {seen[0]} {recovery:.1f} s after SIGKILL (before: {batch_before})")

        # A fresh checkpoint would start again at batch 0.
        assert seen[0] > batch_before
        [status] = local_status(workdir)["jobs"]
        assert (status["state"], status["restarts"]) == ("running", 1)
        assert f"{JOB}  running  1 " in local_status_text(workdir)
        metrics = scrape(local_status(workdir)["supervisor_metrics_url"])
        assert metrics[f'{RESTARTS}{{child="{JOB}",kind="job"}}'] == 1
        assert f"{JOB} exited with code -9; restarting in 2 s" in (tmp_path / "up.out").read_text()

        supervisor.send_signal(signal.SIGINT)
        assert supervisor.wait(timeout=120) == 0
    finally:
        stop_supervisor(supervisor)
    assert stack_processes(marker) == []


@pytest.mark.integration
@pytest.mark.slow
def test_a_child_failing_at_once_is_marked_failed_and_a_dead_prometheus_stops_the_stack(
    runtimes: Runtimes, tmp_path: Path
) -> None:
    catalogue = streaming_pipeline()
    producer = next(producer for producer in catalogue.producers if producer.name == "clickstream-producer")
    broken = dataclasses.replace(producer, arguments=(*producer.arguments, "--no-such-flag"))
    options = LocalStackOptions.on_free_ports(
        tmp_path,
        restart_policy=RestartPolicy(on_failure_retries=2, on_failure_retry_interval=0.5),
    )
    stack = LocalStack(runtimes, Pipeline(catalogue.topics, (broken,), ()), options)
    try:
        state = stack.up()
        events: list[str] = []

        def producer_given_up() -> bool:
            events.extend(stack.supervise())
            return bool(state["children"][producer.name]["state"] == "failed")

        wait_for(producer_given_up, timeout=120, what="the producer to be marked failed", interval=0.2)

        [reported] = local_status(tmp_path)["producers"]
        assert reported["restarts"] == 2
        assert "unrecognized arguments: --no-such-flag" in reported["last_error"]
        assert f"{producer.name} failed: {reported['last_error']}" in local_status_text(tmp_path)
        assert [event.split(";")[0] for event in events if "exited" in event] == [
            f"{producer.name} exited with code 2"
        ] * 3
        assert "failed 3 times in a row" in events[-1]
        metrics = scrape(state["supervisor_metrics_url"])
        assert metrics[f'{RESTARTS}{{child="{producer.name}",kind="producer"}}'] == 2
        assert metrics[f'{RESTARTS}{{child="lag-exporter",kind="exporter"}}'] == 0

        [prometheus] = [entry for entry in state["processes"] if entry["kind"] == "prometheus"]
        os.kill(int(prometheus["pid"]), signal.SIGKILL)

        def prometheus_death_reported() -> bool:
            try:
                stack.supervise()
            except StreamstackError as error:
                assert str(error).startswith("Prometheus exited with code -9, so the whole local stack stops")
                assert str(error).endswith(f"its log: {state['prometheus']['log']}")
                return True
            return False

        wait_for(prometheus_death_reported, timeout=10, what="Prometheus' death to stop the stack")
    finally:
        stack.down()
