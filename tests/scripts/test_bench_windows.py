"""The window benchmark: its rate arithmetic on progress reports shaped like Spark's, and its Python peers
(the plain consumer and Quix Streams) on a real topic with dead letters of every class, against the job's
own decoder and the counts known from how the topic was made."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession

from scripts.bench_windows import peers, throughput
from scripts.bench_windows.main import check_classification
from scripts.bench_windows.records import (
    PARTITIONS,
    classification_samples,
    closing_markers,
    data_windows,
    expected,
    topic_records,
)
from scripts.bench_windows.spark_side import load_producer, produce
from streamstack.local.kafka import LocalKafka, TopicSpec


def progress(start: str, rows: int, trigger_ms: int) -> dict[str, Any]:
    return {
        "timestamp": f"2026-11-22T12:00:{start}Z",
        "numInputRows": rows,
        "durationMs": {"triggerExecution": trigger_ms},
    }


def test_sustained_rate_leaves_out_the_first_and_last_batch() -> None:
    reports = [
        progress("00.000", 100, 3000),  # start-up: plan compilation, consumers created
        progress("03.000", 100, 1000),
        progress("04.000", 100, 1000),
        progress("05.000", 100, 2500),  # waits for a fetch at the end of the log
        progress("07.500", 0, 10),  # a no-data batch (watermark moved) carries no rows
    ]

    rates = throughput(list(reversed(reports)))

    assert rates["sustained_rows_per_second"] == pytest.approx(200 / 2.0)
    assert rates["drain_rows_per_second"] == pytest.approx(400 / 7.5)
    assert rates["rows"] == 400
    assert rates["batches"] == 4


def test_sustained_rate_needs_three_batches() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        throughput([progress("00.000", 100, 1000), progress("01.000", 100, 1000)])


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_python_peers_classify_and_count_like_the_job(
    kafka: LocalKafka, spark: SparkSession, topic_name: str
) -> None:
    events = 2_000
    now = datetime.now(UTC)
    # The peers' dead-letter rules against the job's decoder, record by record.
    check = check_classification(spark)
    assert check["differ"] == {}
    samples = classification_samples(now)
    sample_reasons = Counter(reason for reason in check["job_reasons"] if reason is not None)
    assert len(sample_reasons) == 9  # every decode reason occurs
    # A real topic: the benchmark's records and every bad sample, what each peer must find known up front.
    want, want_dead_letters = expected(events, now)
    markers, marker_ms = closing_markers(events, now)
    want_dead_letters += sample_reasons
    quix_topic = f"{topic_name}-quix"  # Quix gets a copy: the markers are appended to it
    kafka.create_topics([TopicSpec(t, partitions=PARTITIONS) for t in (topic_name, quix_topic)])
    producer = load_producer(kafka.bootstrap_servers)
    bad = [value for (value, _), reason in zip(samples, check["job_reasons"], strict=True) if reason]
    for topic in (topic_name, quix_topic):
        for index, value in enumerate(bad):
            produce(producer, topic, value, index % PARTITIONS)
        for partition, value, _, _ in topic_records(events, now):
            produce(producer, topic, value, partition)
    assert producer.flush(30) == 0
    records = events + len(bad)
    assert peers.topic_size(kafka.bootstrap_servers, topic_name) == records

    plain = peers.plain_consumer(kafka.bootstrap_servers, topic_name, records)
    valid = records - want_dead_letters.total()
    quix = peers.quix(
        kafka.bootstrap_servers, quix_topic, records, valid=valid, markers=markers, idle_seconds=1
    )

    for name, run in (("plain", plain), ("quix", quix)):
        assert run.records == records, name
        assert run.dead_letters == want_dead_letters, name
        assert run.seconds > 0 and run.cpu_seconds >= 0, name
    assert plain.counts == want
    assert data_windows(quix.counts, marker_ms) == want
