"""A job, its shadow-group commits and a producer against a real broker that requires SASL/SCRAM-SHA-512.

In a cluster every job logs in as its own KafkaUser, the credentials arriving as environment variables from
the user's Secret. Here the broker has a SCRAM listener beside PLAINTEXT: the job and the producer use only
the SCRAM listener; the test sets up and reads back through PLAINTEXT.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from contracts.kafka_security import KafkaSecurity
from jobs.clickstream_windows.config import WindowJobConfig
from jobs.clickstream_windows.main import start_queries
from jobs.common.shadow_group import ShadowGroupCommitter
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.kafka_security import SecuredListeners
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import (
    UNUSED_WINDOW_KIND_DURATIONS,
    iso,
    process_all,
    running,
    streaming_config,
)
from tests.kafka_helpers import group_offsets, latest_per_key, produce, read_all, read_records, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

USER = "job-clickstream"
PROTOCOL = "SASL_PLAINTEXT"
MECHANISM = "SCRAM-SHA-512"


def jaas(user: str, password: str) -> str:
    module = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return f'{module} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def scram_kafka(
    runtimes: Runtimes, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalKafka, str]]:
    kafka = LocalKafka(
        runtimes, tmp_path_factory.mktemp("scram-kafka"), secured=SecuredListeners((MECHANISM,))
    )
    kafka.start()
    try:
        password = secrets.token_urlsafe(18)
        kafka.add_scram_user(USER, password)
        yield kafka, password
    finally:
        kafka.stop()


def security(password: str) -> KafkaSecurity:
    return KafkaSecurity.from_environment(
        {
            "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": PROTOCOL,
            "STREAMSTACK_KAFKA_SASL_MECHANISM": MECHANISM,
            "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": jaas(USER, password),
        }
    )


def test_a_window_job_reads_and_writes_through_the_scram_listener(
    spark: SparkSession, scram_kafka: tuple[LocalKafka, str], tmp_path: Path
) -> None:
    kafka, password = scram_kafka
    shared = replace(
        streaming_config("secured-windows", kafka.address(PROTOCOL), tmp_path, "secured"),
        kafka_security=security(password),
    )
    config = WindowJobConfig(
        streaming=shared,
        input_topic="secured-views",
        output_topic="secured-views-per-url",
        window_duration="1 minute",
        watermark_delay="10 seconds",
        **UNUSED_WINDOW_KIND_DURATIONS,
    )
    kafka.create_topics(
        [
            TopicSpec(config.input_topic, partitions=2),
            TopicSpec(config.output_topic, partitions=1, compact=True),
            TopicSpec(shared.dead_letter_topic),
        ]
    )
    base = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
    urls = [f"/p/{i % 3}" for i in range(30)]
    events = [
        json.dumps({"user_id": f"u{i}", "url": url, "event_time": iso(base + timedelta(seconds=i))}).encode()
        for i, url in enumerate(urls)
    ]
    produce(kafka.bootstrap_servers, config.input_topic, [(None, event) for event in events])
    produce(kafka.bootstrap_servers, config.input_topic, [(None, b"{not json")])

    with running(start_queries(spark, config)) as queries:
        process_all(queries)

    counts = {
        key: value["views"]
        for key, value in latest_per_key(read_records(kafka.bootstrap_servers, config.output_topic)).items()
    }
    # All 30 events fall in one one-minute window (seconds 0..29 of a whole minute): counts per url.
    assert sorted(counts.values()) == sorted(Counter(urls).values())
    assert len(read_all(kafka.bootstrap_servers, shared.dead_letter_topic)) == 1


def test_shadow_group_commits_log_in_with_the_jobs_credentials(scram_kafka: tuple[LocalKafka, str]) -> None:
    kafka, password = scram_kafka
    kafka.create_topics([TopicSpec("secured-commits", partitions=2)])
    group = "streamstack-secured-commits"
    committer = ShadowGroupCommitter(
        kafka.address(PROTOCOL), group, retry_seconds=0.2, client_options=security(password).client_options()
    )
    committer.submit({"secured-commits": {"0": 5, "1": 7}})

    wait_for(
        lambda: group_offsets(kafka, group) == {0: 5, 1: 7}, 30, "the shadow group's commits through SCRAM"
    )


def test_a_producer_sends_through_the_scram_listener_and_is_refused_a_wrong_password(
    scram_kafka: tuple[LocalKafka, str], tmp_path: Path
) -> None:
    kafka, password = scram_kafka
    kafka.create_topics([TopicSpec("secured-producer")])
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMSTACK_KAFKA_")}
    command = [
        sys.executable,
        "-m",
        "jobs.producers.clickstream",
        "--bootstrap-servers",
        kafka.address(PROTOCOL),
        "--topic",
        "secured-producer",
        "--rate",
        "200",
        "--max-events",
        "20",
    ]
    env = {
        **base_env,
        "STREAMSTACK_KAFKA_SECURITY_PROTOCOL": PROTOCOL,
        "STREAMSTACK_KAFKA_SASL_MECHANISM": MECHANISM,
        "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": jaas(USER, password),
    }
    sent = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert sent.returncode == 0, sent.stderr
    assert len(read_all(kafka.bootstrap_servers, "secured-producer")) == 20
    assert password not in sent.stdout + sent.stderr

    wrong = "not-" + password
    refused = subprocess.run(
        command,
        env={**env, "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG": jaas(USER, wrong)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0
    assert wrong not in refused.stdout + refused.stderr
    assert len(read_all(kafka.bootstrap_servers, "secured-producer")) == 20
