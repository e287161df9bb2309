"""SIGKILL of the order-state job (event sourcing) mid-batch: restarted on the same checkpoint, its state
topic equals the plain-Python fold of the whole log (tests.jobs.test_order_state.reference_fold).

The job runs as deployed, a child process (driver and JVM in one process group), reading an input produced
up front in small batches (--max-offsets-per-trigger), so that there is a batch to kill. It is SIGKILLed
while a batch is planned but not committed, after some committed: the orders' state for those batches lives
only in the checkpoint's state store. The restarted driver re-runs the batch in flight from the state before
it and goes on to the end of the input.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from streamstack.local.jobs import spark_job_process
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes
from tests.jobs.test_exactly_once import batch_files
from tests.jobs.test_order_state import BAD_RECORDS, encoded, reference_fold, scenario
from tests.kafka_helpers import (
    latest_per_key,
    metric_sum,
    produce,
    read_dead_letters,
    read_records,
    scrape,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "order-state"
ORDERS = 150
BATCH_RECORDS = 200


def kill_hard(process: ManagedProcess) -> None:
    """SIGKILL the driver and its JVM at once, as a node failure would, then reap."""
    os.killpg(process.pid, signal.SIGKILL)
    process.stop(timeout=30)


@pytest.mark.timeout(600)
def test_a_sigkilled_order_state_job_resumes_from_its_checkpoint_to_the_reference_states(
    runtimes: Runtimes, kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    input_topic, output_topic, dead_letters = (
        f"{topic_name}-order-events",
        f"{topic_name}-order-state",
        f"{topic_name}-dead-letters",
    )
    kafka.create_topics(
        [
            TopicSpec(input_topic, partitions=4),
            TopicSpec(output_topic, partitions=2, compact=True),
            TopicSpec(dead_letters, partitions=1),
        ]
    )
    bootstrap = kafka.bootstrap_servers
    sent = produce(
        bootstrap, input_topic, [*(encoded(body) for body in scenario(ORDERS, seed=5)), *BAD_RECORDS]
    )
    checkpoint_root = tmp_path / "checkpoints"
    query_checkpoint = checkpoint_root / JOB

    def start() -> tuple[ManagedProcess, str]:
        port = free_port()
        process = spark_job_process(
            runtimes,
            "jobs.order_state",
            name=JOB,
            bootstrap_servers=bootstrap,
            checkpoint_dir=checkpoint_root,
            metrics_port=port,
            log_path=tmp_path / "job.log",
            scratch_dir=tmp_path / "scratch",
            trigger_interval="1 second",
            extra_args=(
                *("--input-topic", input_topic, "--output-topic", output_topic),
                *("--dead-letter-topic", dead_letters),
                *("--max-offsets-per-trigger", str(BATCH_RECORDS), "--shuffle-partitions", "2"),
            ),
        ).start()
        return process, f"http://127.0.0.1:{port}/metrics"

    process, _ = start()
    try:
        deadline = time.monotonic() + 240
        while True:
            assert process.is_running(), f"the job exited early; see {process.log_path}"
            assert time.monotonic() < deadline, f"no batch in flight after a commit; see {process.log_path}"
            planned, committed = (
                batch_files(query_checkpoint, "offsets"),
                batch_files(query_checkpoint, "commits"),
            )
            if committed and planned - committed:
                break
            time.sleep(0.02)
    finally:
        kill_hard(process)
    planned, committed = batch_files(query_checkpoint, "offsets"), batch_files(query_checkpoint, "commits")
    assert planned - committed, "the kill was meant to land mid-batch"
    last_committed = max(committed)

    process, metrics_url = start()
    try:
        wait_for(
            lambda: (
                metric_sum(scrape(metrics_url), "streamstack_query_source_end_offset", query=JOB) == len(sent)
            ),
            timeout=300,
            what=f"the restarted job to read the whole input (log {process.log_path})",
        )
        rejected = {
            reason: metric_sum(
                scrape(metrics_url), "streamstack_query_dead_letters_total", query=JOB, reason=reason
            )
            for reason in ("invalid_transition", "duplicate_event")
        }
    finally:
        process.stop()

    # Resumed from the checkpoint: the restarted driver did not begin again at batch 0.
    assert min(batch_files(query_checkpoint, "commits") - committed) == last_committed + 1
    bad = {r.position: BAD_RECORDS[(r.key, r.value)] for r in sent if (r.key, r.value) in BAD_RECORDS}
    reference = reference_fold([r for r in sent if r.position not in bad])
    assert latest_per_key(read_records(bootstrap, output_topic)) == reference.states
    letters = {letter.origin: letter.reason for letter in read_dead_letters(bootstrap, dead_letters)}
    assert letters == {**reference.rejected, **bad}
    # The restarted driver counts what it rejected itself (its batches from the one in flight on).
    assert 0 < sum(rejected.values()) <= len(reference.rejected)
    print(
        f"\nSIGKILL with batches {sorted(planned - committed)} in flight after {last_committed} committed; "
        f"{len(reference.states)} orders, {len(reference.rejected)} rejected events, {len(bad)} malformed"
    )
