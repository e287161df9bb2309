"""Replay: a job reprocesses the log into a new output with a new checkpoint, from the beginning, from chosen
offsets, or from a point in time, and each result equals an independent count over the records it covers."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql import SparkSession

from jobs.clickstream_windows.main import WindowJobConfig, start_queries
from jobs.common.config import StreamingJobConfig
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.kafka_helpers import read_all

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
LATER_MS = int((BASE + timedelta(hours=1)).timestamp() * 1000)


@pytest.fixture(scope="module")
def sent(kafka: LocalKafka) -> tuple[str, list[tuple[int, int, int, str, float]]]:
    """A 2-partition input topic and its records: (partition, offset, Kafka timestamp ms, url, seconds)."""
    topic = f"replay-{uuid.uuid4().hex[:8]}"
    kafka.create_topics([TopicSpec(topic, partitions=2)])
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
    records: list[tuple[int, int, int, str, float]] = []
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


def reference(records: list[tuple[int, int, int, str, float]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for _, _, _, url, seconds in records:
        start = BASE + timedelta(seconds=int(seconds // 10) * 10)
        counts[f"{start.strftime('%Y-%m-%dT%H:%M:%S')}.000Z|{url}"] += 1
    return dict(counts)


def run_to_end(
    spark: SparkSession,
    kafka: LocalKafka,
    tmp_path: Path,
    input_topic: str,
    *,
    starting_offsets: str = "earliest",
    starting_timestamp_ms: int | None = None,
) -> dict[str, int]:
    """Run the job over all available input into a new output topic and checkpoint; latest count per key."""
    output_topic = f"replay-out-{uuid.uuid4().hex[:8]}"
    dead_letters = f"replay-dead-{uuid.uuid4().hex[:8]}"
    kafka.create_topics([TopicSpec(output_topic, partitions=2, compact=True), TopicSpec(dead_letters)])
    config = WindowJobConfig(
        streaming=StreamingJobConfig(
            query_name="clickstream-windows",
            bootstrap_servers=kafka.bootstrap_servers,
            checkpoint_dir=str(tmp_path / output_topic),
            metrics_port=0,
            trigger_interval="1 second",
            dead_letter_topic=dead_letters,
            starting_offsets=starting_offsets,
            starting_timestamp_ms=starting_timestamp_ms,
        ),
        input_topic=input_topic,
        output_topic=output_topic,
        window_duration="10 seconds",
        watermark_delay="3 hours",
    )
    queries = start_queries(spark, config)
    try:
        for query in queries:
            query.processAllAvailable()
    finally:
        for query in queries:
            query.stop()
    latest: dict[str, int] = {}
    for key, value in read_all(kafka.bootstrap_servers, output_topic):
        assert key is not None and value is not None
        latest[key.decode()] = json.loads(value)["views"]
    return latest


def test_replay_from_the_beginning_reproduces_the_result(
    spark: SparkSession,
    kafka: LocalKafka,
    tmp_path: Path,
    sent: tuple[str, list[tuple[int, int, int, str, float]]],
) -> None:
    topic, records = sent
    first = run_to_end(spark, kafka, tmp_path, topic)
    replayed = run_to_end(spark, kafka, tmp_path, topic, starting_offsets="earliest")
    assert first == replayed == reference(records)


def test_replay_from_chosen_offsets_covers_exactly_the_records_after_them(
    spark: SparkSession,
    kafka: LocalKafka,
    tmp_path: Path,
    sent: tuple[str, list[tuple[int, int, int, str, float]]],
) -> None:
    topic, records = sent
    start = {0: 120, 1: 30}
    offsets_json = json.dumps({topic: {str(partition): offset for partition, offset in start.items()}})

    replayed = run_to_end(spark, kafka, tmp_path, topic, starting_offsets=offsets_json)

    assert replayed == reference([r for r in records if r[1] >= start[r[0]]])


def test_replay_from_a_point_in_time_starts_at_the_first_record_at_or_after_it(
    spark: SparkSession,
    kafka: LocalKafka,
    tmp_path: Path,
    sent: tuple[str, list[tuple[int, int, int, str, float]]],
) -> None:
    topic, records = sent

    replayed = run_to_end(spark, kafka, tmp_path, topic, starting_timestamp_ms=LATER_MS)

    assert replayed == reference([r for r in records if r[2] >= LATER_MS])
