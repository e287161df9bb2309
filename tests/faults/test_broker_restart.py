"""Broker restart under running jobs (issue 15): the broker is stopped cleanly for ~18 s while the window job
and the lag exporter run, then started again on the same ports and storage, as a rolling restart of a
one-broker cluster does. Nobody restarts the job or the exporter: the job must still be running, its output
topic read as latest value per key must equal an independent count of every event produced (before and after
the outage), and the exporter must report the job's lag again with fresh values.

The test owns its broker (not the session `kafka` fixture, which other tests share) and stops every process
it starts.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from contracts.metrics import (
    EXPORTER_LAST_SUCCESS,
    EXPORTER_STALE,
    EXPORTER_UP,
    GROUP_RECORDS,
    LAG_PREFIX,
    QUERY_ACTIVE,
    QUERY_FAILED,
    QUERY_PREFIX,
)
from contracts.shadow_groups import shadow_group
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes
from tests.faults.helpers import COUNTING_SETTINGS
from tests.jobs.streaming_helpers import start_window_job, views_per_key
from tests.jobs.test_exactly_once import events, expected_counts, produce_fast
from tests.kafka_helpers import metric_sum, scrape, wait_for
from tests.monitoring.exporter_process import ExporterProcess, running_exporter

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "clickstream-windows"
INPUT, OUTPUT, DEAD_LETTERS = "restart-page-views", "restart-page-views-per-url", "restart-dead-letters"
BEFORE, AFTER = 3_000, 3_000  # events produced before the outage and after it
OUTAGE_SECONDS = 18.0
CHECKPOINT_LABEL = "windows"  # the exporter's --checkpoint-dir name: the query's group is "windows/<query>"


def _require_running(job: ManagedProcess, what: str) -> None:
    assert job.is_running(), (
        f"the job exited with {job.exit_code()} {what}; last lines of {job.log_path}:\n{job.log_tail(40)}"
    )


def _end_offset(job: ManagedProcess, job_metrics: str) -> float:
    """Input records the job's main query has read up to, from its last batch's end offsets; fails at once
    if the job has exited."""
    _require_running(job, "while processing")
    return metric_sum(scrape(job_metrics), "streamstack_query_source_end_offset", query=JOB, topic=INPUT)


def _cluster_id(kafka: LocalKafka) -> str:
    admin = kafka.admin()
    try:
        return str(admin.describe_cluster()["cluster_id"])
    finally:
        admin.close()


def _exporter_sample(exporter: ExporterProcess, name: str) -> float:
    return scrape(exporter.url)[LAG_PREFIX + name]


def _exporter_shows_caught_up(exporter: ExporterProcess, total: int, since: float) -> bool:
    """One scrape of a collection finished after `since` (Unix time) that reached Kafka, saw every record
    produced, and has the query at lag 0 in its checkpoint and in its shadow group."""
    samples = scrape(exporter.url)
    lag = LAG_PREFIX + GROUP_RECORDS
    return (
        samples[LAG_PREFIX + EXPORTER_UP] == 1
        and samples[LAG_PREFIX + EXPORTER_STALE] == 0
        and samples[LAG_PREFIX + EXPORTER_LAST_SUCCESS] > since
        and metric_sum(samples, LAG_PREFIX + "partition_latest_offset", topic=INPUT) == total
        and samples.get(f'{lag}{{group="{CHECKPOINT_LABEL}/{JOB}",source="checkpoint"}}') == 0
        and samples.get(f'{lag}{{group="{shadow_group(JOB)}",source="shadow"}}') == 0
    )


@pytest.mark.timeout(420)
def test_jobs_and_exporter_ride_out_a_broker_restart(runtimes: Runtimes, tmp_path: Path) -> None:
    sent = events()[: BEFORE + AFTER]
    kafka = LocalKafka(runtimes, tmp_path / "kafka").start()
    try:
        kafka.create_topics(
            [
                TopicSpec(INPUT, partitions=4),
                TopicSpec(OUTPUT, partitions=4, compact=True),
                TopicSpec(DEAD_LETTERS, partitions=1),
            ]
        )
        checkpoint_root = tmp_path / "checkpoints"
        job, job_metrics = start_window_job(
            runtimes,
            kafka.bootstrap_servers,
            checkpoint_dir=checkpoint_root,
            log_path=tmp_path / "job.log",
            topics=(INPUT, OUTPUT, DEAD_LETTERS),
            settings=COUNTING_SETTINGS,
        )
        try:
            exporter_flags = [
                *("--bootstrap-servers", kafka.bootstrap_servers),
                *("--refresh-interval", "1", "--window", "10", "--kafka-timeout", "3"),
                *("--checkpoint-dir", f"{CHECKPOINT_LABEL}={checkpoint_root}"),
            ]
            with running_exporter(exporter_flags, tmp_path / "exporter.log") as exporter:
                _broker_restart_scenario(kafka, job, job_metrics, exporter, sent)
        finally:
            job.stop(timeout=30)
    finally:
        kafka.stop()


def _broker_restart_scenario(
    kafka: LocalKafka,
    job: ManagedProcess,
    job_metrics: str,
    exporter: ExporterProcess,
    sent: list[tuple[str, str, float]],
) -> None:
    # Before: the job has read and committed the first part, and the exporter sees it caught up.
    produce_fast(kafka.bootstrap_servers, INPUT, sent[:BEFORE])
    wait_for(
        lambda: _end_offset(job, job_metrics) == BEFORE,
        timeout=180,
        what=f"the job to process the first {BEFORE} events (log {job.log_path})",
    )
    wait_for(
        lambda: _exporter_shows_caught_up(exporter, BEFORE, since=0),
        timeout=60,
        what=f"the exporter to report the job caught up before the outage ({exporter.log_path})",
    )
    cluster_id = _cluster_id(kafka)

    # The outage: a clean stop (SIGTERM), kept down while the job and the exporter keep running.
    kafka.stop()
    down_at = time.monotonic()
    assert kafka.exit_code() not in (None, -signal.SIGKILL), "the broker did not stop on SIGTERM"
    wait_for(
        lambda: _exporter_sample(exporter, EXPORTER_UP) == 0,
        timeout=OUTAGE_SECONDS,
        what="the exporter to report the broker unreachable (exporter_up 0)",
    )
    assert _exporter_sample(exporter, EXPORTER_STALE) == 1
    while time.monotonic() - down_at < OUTAGE_SECONDS:
        _require_running(job, "while the broker was down")
        time.sleep(0.5)

    restarting_at = time.monotonic()
    kafka.restart()
    ready_at, ready_unix = time.monotonic(), time.time()
    print(
        f"\nbroker held down {restarting_at - down_at:.1f} s, answered {ready_at - restarting_at:.1f} s "
        f"after its restart: unreachable for {ready_at - down_at:.1f} s"
    )
    assert _cluster_id(kafka) == cluster_id, "the restarted broker is a new cluster, not the same one"
    _require_running(job, "while the broker restarted")

    # After: the rest of the events, and nobody restarts anything.
    produce_fast(kafka.bootstrap_servers, INPUT, sent[BEFORE:])
    wait_for(
        lambda: _end_offset(job, job_metrics) > BEFORE,
        timeout=180,
        what=f"the job to commit a batch of the events produced after the restart (log {job.log_path})",
        interval=0.1,
    )
    first_batch_at = time.monotonic()
    wait_for(
        lambda: _end_offset(job, job_metrics) == BEFORE + AFTER,
        timeout=180,
        what=f"the job to process all {BEFORE + AFTER} events (log {job.log_path})",
    )
    caught_up_at = time.monotonic()
    _require_running(job, "after the restart")
    samples = scrape(job_metrics)
    assert metric_sum(samples, QUERY_PREFIX + QUERY_ACTIVE, query=JOB) == 1
    assert metric_sum(samples, QUERY_PREFIX + QUERY_FAILED, query=JOB) == 0

    assert views_per_key(kafka.bootstrap_servers, OUTPUT) == expected_counts(sent)

    wait_for(
        lambda: _exporter_shows_caught_up(exporter, BEFORE + AFTER, since=ready_unix),
        timeout=60,
        what=f"the exporter to report the job caught up after the restart ({exporter.log_path})",
    )
    assert exporter.process.poll() is None, "the exporter exited"
    print(
        "recovery from broker ready: first batch of new events committed after "
        f"{first_batch_at - ready_at:.1f} s, "
        f"all {BEFORE + AFTER} events processed after {caught_up_at - ready_at:.1f} s, "
        f"exporter caught up after {time.monotonic() - ready_at:.1f} s"
    )
