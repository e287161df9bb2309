"""The local KRaft broker: topics get the partitions and configs asked for, and its log lands in a file."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.kafka_helpers import produce, read_all

pytestmark = pytest.mark.integration


def _topic_overrides(kafka: LocalKafka, topic: str) -> dict[str, str]:
    """The configs set on the topic itself (not broker defaults)."""
    admin = kafka.admin()
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    return {
        name: entry["value"]
        for name, entry in described["topic"][topic].items()
        if entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    }


def test_topics_are_created_with_partitions_retention_and_compaction(
    kafka: LocalKafka, topic_name: str
) -> None:
    events, changelog = f"{topic_name}-events", f"{topic_name}-changelog"
    kafka.create_topics(
        [
            TopicSpec(events, partitions=4, retention_ms=3_600_000),
            TopicSpec(changelog, partitions=2, compact=True),
        ]
    )
    kafka.create_topics([TopicSpec(events, partitions=4)])  # creating again is a no-op, not an error

    admin = kafka.admin()
    try:
        described = {topic["name"]: topic for topic in admin.describe_topics([events, changelog])}
    finally:
        admin.close()
    assert len(described[events]["partitions"]) == 4
    assert len(described[changelog]["partitions"]) == 2
    assert _topic_overrides(kafka, events) == {"retention.ms": "3600000"}
    assert _topic_overrides(kafka, changelog) == {"cleanup.policy": "compact"}


def test_records_round_trip_and_the_broker_log_is_captured(kafka: LocalKafka, topic_name: str) -> None:
    kafka.create_topics([TopicSpec(topic_name, partitions=2)])
    records = [(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(50)]

    produce(kafka.bootstrap_servers, topic_name, records)

    assert sorted(read_all(kafka.bootstrap_servers, topic_name)) == sorted(records)
    log = kafka.log_path.read_text()
    assert "Transition from STARTING to STARTED (kafka.server.BrokerServer)" in log
    assert kafka.bootstrap_servers.startswith("127.0.0.1:")
