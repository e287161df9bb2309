"""SIGKILL of the view-bursts job (issue 19): restarted on the same checkpoint, its output equals the oracle,
and the per-user buffers and event-time timeouts registered before the kill work after it.

The job runs as deployed, a child process (its main query and dead letters; no alerts or late topic), with
a small `--max-offsets-per-trigger` so that the first half of the input takes several batches. After two
batches are committed its process group (driver and JVM) is SIGKILLed, mid-batch if one is in flight; the
second half is produced and the job restarted on the same checkpoint. Bursts of three bots span the kill, so
the restarted job must still hold the views buffered before it to count them; users seen only before the
kill have timeouts registered only before it. Checks: the restarted driver's first batch is the one after
the last commit; the output read as latest value per user equals a plain-Python count (the most views within
less than 60 s of each other: nothing is late, nothing is forgotten); then one view far ahead moves the
watermark past every user's newest view + the retention, and the state empties to that view's user alone:
the timeouts fired, those from before the kill included. State size per user and the kill-to-first-batch
time are printed (shared machine).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaProducer

from streamstack.local.jobs import spark_job_process
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.ports import free_port
from streamstack.local.process import ManagedProcess, process_group_alive
from streamstack.runtimes import Runtimes
from tests.jobs.test_exactly_once import batch_files
from tests.kafka_helpers import latest_per_key, metric_sum, read_records, scrape, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "view-bursts"
WINDOW = 60.0
RETENTION = 300.0
BATCH_RECORDS = 250
BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def sent_views() -> list[tuple[str, float]]:
    """(user, seconds after BASE), 120 s of event time in order of whole seconds, shuffled within each:
    30 users throughout, 5 only in the first 20 s, and 3 bots with bursts from 35 s to 85 s."""
    rng = random.Random(1919)
    views = [(f"user-{rng.randrange(30)}", rng.uniform(0, 120)) for _ in range(1_200)]
    views += [(f"early-{rng.randrange(5)}", rng.uniform(0, 20)) for _ in range(50)]
    for bot, (start, length, count) in enumerate(((35, 40, 120), (50, 30, 90), (40, 50, 150))):
        views += [(f"bot-{bot}", rng.uniform(start, start + length)) for _ in range(count)]
    views = [(user, round(seconds, 3)) for user, seconds in views]
    by_second: dict[int, list[tuple[str, float]]] = {}
    for view in views:
        by_second.setdefault(int(view[1]), []).append(view)
    ordered: list[tuple[str, float]] = []
    for second in sorted(by_second):
        chunk = by_second[second]
        rng.shuffle(chunk)
        ordered.extend(chunk)
    return ordered


def produce_views(bootstrap_servers: str, topic: str, views: list[tuple[str, float]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=20)
    try:
        for user, seconds in views:
            stamp = (BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            body = json.dumps({"user_id": user, "url": "/p", "event_time": stamp}).encode()
            producer.send(topic, key=user.encode(), value=body)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)


def largest_bursts(views: list[tuple[str, float]]) -> dict[str, int]:
    """The oracle: per user, the most views whose times lie within less than WINDOW of one another."""
    times: dict[str, list[float]] = {}
    for user, seconds in views:
        times.setdefault(user, []).append(seconds)
    return {user: max(sum(1 for u in ts if t <= u < t + WINDOW) for t in ts) for user, ts in times.items()}


@pytest.mark.timeout(600)
def test_a_sigkilled_burst_job_resumes_with_its_buffers_and_timeouts(
    runtimes: Runtimes, kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    input_topic, output_topic, dead_letters = (f"{topic_name}-{kind}" for kind in ("views", "bursts", "dl"))
    kafka.create_topics(
        [
            TopicSpec(input_topic, partitions=2),
            TopicSpec(output_topic, partitions=2, compact=True),
            TopicSpec(dead_letters, partitions=1),
        ]
    )
    views = sent_views()
    half = len(views) // 2
    checkpoint_root = tmp_path / "checkpoints"
    query_checkpoint = checkpoint_root / JOB
    produce_views(bootstrap, input_topic, views[:half])

    def start(*limit: str) -> tuple[ManagedProcess, str]:
        port = free_port()
        process = spark_job_process(
            runtimes,
            "jobs.view_bursts",
            name=JOB,
            bootstrap_servers=bootstrap,
            checkpoint_dir=checkpoint_root,
            metrics_port=port,
            log_path=tmp_path / "job.log",
            scratch_dir=tmp_path / "scratch",
            trigger_interval="1 second",
            extra_args=(
                *("--input-topic", input_topic, "--output-topic", output_topic),
                *("--dead-letter-topic", dead_letters, "--window-length", f"{WINDOW:.0f} seconds"),
                *("--watermark-delay", "5 seconds", "--state-retention", f"{RETENTION:.0f} seconds"),
                *("--burst-threshold", "30", "--shuffle-partitions", "2", *limit),
            ),
        ).start()
        return process, f"http://127.0.0.1:{port}/metrics"

    def running(process: ManagedProcess, condition: str, predicate: Callable[[], bool]) -> None:
        def check() -> bool:
            assert process.is_running(), f"the job exited early; see {process.log_path}"
            return predicate()

        wait_for(check, timeout=240, what=condition, interval=0.05)

    process, _ = start("--max-offsets-per-trigger", str(BATCH_RECORDS))
    try:
        running(process, "batch 2 to commit", lambda: 2 in batch_files(query_checkpoint, "commits"))
        os.killpg(process.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: not process_group_alive(process.pid), timeout=30, what="the killed job to die")
    finally:
        process.stop(timeout=30)
    planned, committed = batch_files(query_checkpoint, "offsets"), batch_files(query_checkpoint, "commits")
    last_committed = max(committed)
    where = f"batches {sorted(planned - committed)} in flight" if planned - committed else "between batches"

    def new_commits() -> set[int]:
        return batch_files(query_checkpoint, "commits") - committed

    produce_views(bootstrap, input_topic, views[half:])
    process, metrics_url = start()
    try:
        running(
            process,
            "the restarted job's first batch",
            lambda: committed < batch_files(query_checkpoint, "commits"),
        )
        first_batch = min(new_commits())
        first_batch_after = time.monotonic() - killed

        def offsets_read() -> float:
            return metric_sum(scrape(metrics_url), "streamstack_query_source_end_offset", query=JOB)

        running(process, f"all {len(views)} views read", lambda: offsets_read() == len(views))
        samples = scrape(metrics_url)
        users = metric_sum(samples, "streamstack_query_state_rows", query=JOB)
        state_bytes = metric_sum(samples, "streamstack_query_state_memory_bytes", query=JOB)
        # One view far ahead: the watermark passes every other user's newest view + the retention.
        produce_views(bootstrap, input_topic, [("clock", 120 + RETENTION + 60)])
        running(
            process,
            "the state to hold the clock's user alone",
            lambda: metric_sum(scrape(metrics_url), "streamstack_query_state_rows", query=JOB) == 1,
        )
    finally:
        process.stop(timeout=30)
    print(
        f"\nSIGKILL after batch {last_committed} committed, {where}; restarted job's first batch "
        f"{first_batch} committed {first_batch_after:.1f} s after the kill (shared machine); state before "
        f"the clock view: {users:.0f} users, {state_bytes:.0f} bytes, {state_bytes / users:.0f} bytes/user"
    )

    assert first_batch == last_committed + 1
    assert users == len({user for user, _ in views})
    latest = latest_per_key(read_records(bootstrap, output_topic))
    expected = largest_bursts([*views, ("clock", 120 + RETENTION + 60)])
    assert {user: value["views"] for user, value in latest.items()} == expected
    assert min(expected[f"bot-{bot}"] for bot in range(3)) > 30
    for value in latest.values():
        first = (datetime.fromisoformat(value["first_view"]) - BASE).total_seconds()
        last = (datetime.fromisoformat(value["last_view"]) - BASE).total_seconds()
        assert 0 <= last - first < WINDOW
        assert value["over_threshold"] == (value["views"] > 30)
    assert read_records(bootstrap, dead_letters) == []
