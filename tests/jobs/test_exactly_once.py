"""Exactly-once effect: SIGKILL the window job at several points, mid-batch included, restart it from its
checkpoint each time, and the output topic read as latest value per key equals an independent count.

The job's Kafka sink is at-least-once: a batch cut short by the kill is written again on restart. The effect
is exactly-once because every output row is keyed by (window, url) and a re-run batch recomputes the same
values from the same offsets and the state of the previous batch.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaProducer

from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import start_window_job, views_per_key
from tests.kafka_helpers import metric_sum, scrape, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

EVENTS = 100_000
URLS = 20
WINDOW_SECONDS = 10
BATCH_RECORDS = 5_000
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)


def events() -> list[tuple[str, str, float]]:
    """(user, url, seconds after BASE): about 50 events per second of event time, shuffled in runs of 50."""
    rng = random.Random(20261122)
    in_order = [(f"user-{rng.randrange(500)}", f"/p/{rng.randrange(URLS)}", i / 50.0) for i in range(EVENTS)]
    shuffled: list[tuple[str, str, float]] = []
    for start in range(0, EVENTS, 50):
        chunk = in_order[start : start + 50]
        rng.shuffle(chunk)
        shuffled.extend(chunk)
    return shuffled


def expected_counts(sent: list[tuple[str, str, float]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for _, url, seconds in sent:
        start = BASE + timedelta(seconds=int(seconds // WINDOW_SECONDS) * WINDOW_SECONDS)
        counts[f"{start.strftime('%Y-%m-%dT%H:%M:%S')}.000Z|{url}"] += 1
    return dict(counts)


def produce_fast(bootstrap_servers: str, topic: str, sent: list[tuple[str, str, float]]) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap_servers, acks="all", linger_ms=20, batch_size=262_144
    )
    try:
        for user, url, seconds in sent:
            stamp = (BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            body = json.dumps({"user_id": user, "url": url, "event_time": stamp}).encode()
            producer.send(topic, key=user.encode(), value=body)
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=10)


def batch_files(checkpoint: Path, log: str) -> set[int]:
    directory = checkpoint / log
    if not directory.is_dir():
        return set()
    return {int(name) for name in os.listdir(directory) if name.isdigit()}


def kill_hard(process: ManagedProcess) -> None:
    """SIGKILL the driver and its JVM at once, as a node failure would, then reap."""
    os.killpg(process.pid, signal.SIGKILL)
    process.stop(timeout=30)


@pytest.mark.timeout(900)
def test_sigkill_at_any_point_then_restart_yields_the_uninterrupted_result(
    runtimes: Runtimes, kafka: LocalKafka, tmp_path: Path
) -> None:
    input_topic, output_topic = "eos-page-views", "eos-page-views-per-url"
    kafka.create_topics(
        [
            TopicSpec(input_topic, partitions=4),
            TopicSpec(output_topic, partitions=4, compact=True),
            TopicSpec("eos-dead-letters", partitions=1),
        ]
    )
    sent = events()
    produce_fast(kafka.bootstrap_servers, input_topic, sent)
    checkpoint_root = tmp_path / "checkpoints"
    query_checkpoint = checkpoint_root / "clickstream-windows"

    def start() -> tuple[ManagedProcess, str]:
        return start_window_job(
            runtimes,
            kafka.bootstrap_servers,
            checkpoint_dir=checkpoint_root,
            log_path=tmp_path / "job.log",
            topics=(input_topic, output_topic, "eos-dead-letters"),
            settings=(
                "--window-duration",
                f"{WINDOW_SECONDS} seconds",
                # Nothing is late: the result must not depend on where batches happen to split.
                "--watermark-delay",
                "2 hours",
                "--max-offsets-per-trigger",
                str(BATCH_RECORDS),
                "--shuffle-partitions",
                "2",
            ),
        )

    def wait_until(condition: str, process: ManagedProcess, predicate: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert process.is_running(), f"the job exited early; see {process.log_path}"
            if predicate():
                return
            time.sleep(0.02)
        raise TimeoutError(f"timed out waiting for {condition}")

    kills: list[str] = []
    # 1: right after batch 2 commits (between batches).
    process, _ = start()
    wait_until("batch 2 to commit", process, lambda: 2 in batch_files(query_checkpoint, "commits"))
    kill_hard(process)
    kills.append(f"after commit {max(batch_files(query_checkpoint, 'commits'))}")

    # 2 and 3: while a batch is planned in the offset log but not yet committed.
    for _ in range(2):
        process, _ = start()
        first_new = max(batch_files(query_checkpoint, "offsets")) + 2

        def in_flight(first_new: int = first_new) -> bool:
            offsets, commits = (
                batch_files(query_checkpoint, "offsets"),
                batch_files(query_checkpoint, "commits"),
            )
            return any(batch >= first_new and batch not in commits for batch in offsets)

        wait_until(f"batch {first_new} or later to be in flight", process, in_flight)
        kill_hard(process)
        uncommitted = batch_files(query_checkpoint, "offsets") - batch_files(query_checkpoint, "commits")
        assert uncommitted, "the kill was meant to land mid-batch"
        kills.append(f"mid-batch {sorted(uncommitted)}")

    # Final run to the end of the input.
    process, metrics_url = start()
    try:
        wait_for(
            lambda: (
                metric_sum(
                    scrape(metrics_url), "streamstack_query_source_end_offset", query="clickstream-windows"
                )
                == EVENTS
            ),
            timeout=400,
            what=f"the restarted job to reach the end of the input (kills: {kills}, log {process.log_path})",
        )
    finally:
        process.stop()

    latest_per_key = views_per_key(kafka.bootstrap_servers, output_topic)
    assert len(kills) == 3
    assert latest_per_key == expected_counts(sent)
