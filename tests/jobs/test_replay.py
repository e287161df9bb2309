"""Replay: a job reprocesses the log into a new output with a new checkpoint, from the beginning, from chosen
offsets, or from a point in time, and each result equals an independent count over the records it covers."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql import SparkSession

from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.main import start_queries
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    UNUSED_WINDOW_KIND_DURATIONS,
    create_job_topics,
    process_all,
    running,
    streaming_config,
    views_per_key,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
LATER_MS = int((BASE + timedelta(hours=1)).timestamp() * 1000)

Sent = tuple[int, int, int, str, float]
"""(partition, offset, Kafka timestamp ms, url, seconds after BASE) of a record of the input topic."""


@pytest.fixture(scope="module")
def sent(kafka: LocalKafka) -> tuple[str, list[Sent]]:
    """A 2-partition input topic and its records."""
    topic = f"replay-{uuid.uuid4().hex[:8]}"
    kafka.create_topics([TopicSpec(topic, partitions=2)])
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
    records: list[Sent] = []
    try:
        for i in range(400):
            seconds, url, partition = i * 0.5, f"/p/{i % 3}", i % 2
            timestamp_ms = int(BASE.timestamp() * 1000) if i < 250 else LATER_MS
            stamp = (BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            body = json.dumps({"user_id": f"user-{i % 5}", "url": url, "event_time": stamp}).encode()
            metadata = producer.send(topic, value=body, partition=partition, timestamp_ms=timestamp_ms).get(
                timeout=30
            )
            records.append((partition, metadata.offset, timestamp_ms, url, seconds))
    finally:
        producer.close(timeout=10)
    return topic, records


def reference(records: list[Sent]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for _, _, _, url, seconds in records:
        start = BASE + timedelta(seconds=int(seconds // 10) * 10)
        counts[f"{start.strftime('%Y-%m-%dT%H:%M:%S')}.000Z|{url}"] += 1
    return dict(counts)


@dataclass(frozen=True)
class Replay:
    spark: SparkSession
    kafka: LocalKafka
    tmp_path: Path
    input_topic: str

    def run_to_end(
        self, *, starting_offsets: str = "earliest", starting_timestamp_ms: int | None = None
    ) -> dict[str, int]:
        """Run the job over all available input into a new output topic and checkpoint; latest count per
        key."""
        prefix = f"replay-{uuid.uuid4().hex[:8]}"
        config = WindowJobConfig(
            streaming=replace(
                streaming_config(
                    "clickstream-windows", self.kafka.bootstrap_servers, self.tmp_path / prefix, prefix
                ),
                trigger_interval="1 second",
                starting_offsets=starting_offsets,
                starting_timestamp_ms=starting_timestamp_ms,
            ),
            input_topic=self.input_topic,
            output_topic=f"{prefix}-out",
            window_duration="10 seconds",
            watermark_delay="3 hours",
            # Without a windows topic only the per-url counts run; these durations go unused.
            **UNUSED_WINDOW_KIND_DURATIONS,
        )
        create_job_topics(
            self.kafka, config.streaming, TopicSpec(config.output_topic, partitions=2, compact=True)
        )
        with running(start_queries(self.spark, config)) as queries:
            process_all(queries)
        return views_per_key(self.kafka.bootstrap_servers, config.output_topic)


@pytest.fixture
def replay(spark: SparkSession, kafka: LocalKafka, tmp_path: Path, sent: tuple[str, list[Sent]]) -> Replay:
    return Replay(spark, kafka, tmp_path, sent[0])


def test_replay_from_the_beginning_reproduces_the_result(
    replay: Replay, sent: tuple[str, list[Sent]]
) -> None:
    first = replay.run_to_end()
    replayed = replay.run_to_end(starting_offsets="earliest")
    assert first == replayed == reference(sent[1])


def test_replay_from_chosen_offsets_covers_exactly_the_records_after_them(
    replay: Replay, sent: tuple[str, list[Sent]]
) -> None:
    topic, records = sent
    start = {0: 120, 1: 30}
    offsets_json = json.dumps({topic: {str(partition): offset for partition, offset in start.items()}})

    replayed = replay.run_to_end(starting_offsets=offsets_json)

    assert replayed == reference([r for r in records if r[1] >= start[r[0]]])


def test_replay_from_a_point_in_time_starts_at_the_first_record_at_or_after_it(
    replay: Replay, sent: tuple[str, list[Sent]]
) -> None:
    replayed = replay.run_to_end(starting_timestamp_ms=LATER_MS)

    assert replayed == reference([r for r in sent[1] if r[2] >= LATER_MS])
