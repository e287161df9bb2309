"""The largest record an input topic accepts reaches the dead-letter topic whole, and the job goes on.

A dead letter is its record's value plus a key and headers, so it is larger than the record: the dead-letter
topic (pipeline.yaml, sized by contracts.record_sizes) and the jobs' Kafka producers (jobs.common.kafka_io)
must take more than the input topics do, or the dead-letter query fails on that batch at every restart.
Here on a real broker with the broker's default limit, through the sessionization job's queries.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import MessageSizeTooLargeError
from pyspark.sql import SparkSession

from contracts.pipeline import load_pipeline
from contracts.record_sizes import INPUT_MAX_MESSAGE_BYTES
from jobs.common.config import EventLimits
from jobs.sessionization.config import SessionJobConfig
from jobs.sessionization.main import start_queries
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import create_job_topics, iso, process_all, running, streaming_config
from tests.kafka_helpers import produce, read_dead_letters

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KEY = b"user-1"
# A record batch of one record: 61 bytes of batch header, then the record's length, attributes, timestamp
# and offset deltas, key length, key, value length, value and header count (varints).
RECORD_OVERHEAD = 61 + 3 + 1 + 1 + 1 + 1 + len(KEY) + 3 + 1


def page_view_with_event_time(event_time: str) -> bytes:
    return json.dumps({"user_id": "user-1", "url": "/", "event_time": event_time}).encode()


def largest_page_view() -> bytes:
    """A page view whose event time is text filling the record up to the input topics' limit."""
    frame = page_view_with_event_time("")
    return page_view_with_event_time("x" * (INPUT_MAX_MESSAGE_BYTES - RECORD_OVERHEAD - len(frame)))


def send(bootstrap_servers: str, topic: str, value: bytes) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", max_request_size=4 * 2**20)
    try:
        producer.send(topic, key=KEY, value=value).get(timeout=30)
    finally:
        producer.close(timeout=10)


@pytest.mark.parametrize(
    ("max_event_bytes", "reason"),
    [
        # The jobs' default: the record is a dead letter for its size alone.
        (EventLimits.max_event_bytes, "oversized"),
        # A job allowing events as large as the topic: the detail would quote the whole event time.
        (INPUT_MAX_MESSAGE_BYTES, "bad_timestamp"),
    ],
)
def test_the_largest_accepted_record_is_dead_lettered_whole_and_the_job_goes_on(
    spark: SparkSession,
    kafka: LocalKafka,
    topic_name: str,
    tmp_path: Path,
    *,
    max_event_bytes: int,
    reason: str,
) -> None:
    bootstrap = kafka.bootstrap_servers
    streaming = streaming_config("sessionization", bootstrap, tmp_path, topic_name)
    settings = dict(load_pipeline().job("sessionization").settings)
    config = SessionJobConfig(
        streaming=dataclasses.replace(streaming, event_limits=EventLimits(max_event_bytes=max_event_bytes)),
        input_topic=f"{topic_name}-views",
        output_topic=f"{topic_name}-sessions",
        session_gap=settings["--session-gap"],
        watermark_delay=settings["--watermark-delay"],
    )
    create_job_topics(
        kafka, streaming, TopicSpec(config.input_topic), TopicSpec(config.output_topic, compact=True)
    )
    largest = largest_page_view()
    with pytest.raises(MessageSizeTooLargeError):
        send(bootstrap, config.input_topic, largest + b" ")
    send(bootstrap, config.input_topic, largest)

    with running(start_queries(spark, config)) as queries:
        process_all(queries)
        following = page_view_with_event_time(iso(datetime.now(UTC)).replace("Z", ""))
        produce(bootstrap, config.input_topic, [(KEY, following)])
        process_all(queries)
        assert all(query.isActive and query.exception() is None for query in queries)

    letters = read_dead_letters(bootstrap, streaming.dead_letter_topic)
    assert [(letter.value, letter.reason) for letter in letters] == [
        (largest, reason),
        (following, "bad_timestamp"),
    ]
