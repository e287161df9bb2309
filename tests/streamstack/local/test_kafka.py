"""The local KRaft broker: topics get the partitions and configs asked for, its log lands in a file, it
serves Strimzi's metric names through the metrics reporter on 127.0.0.1, and its JVM runs with the local
options (the benchmarks' brokers without them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from streamstack.local.identity import ProcessIdentity
from streamstack.local.kafka import LOCAL_KAFKA_JAVA_OPTIONS, LocalKafka, TopicSpec
from streamstack.local.pipeline import streaming_pipeline
from tests.kafka_helpers import metric_sum, produce, read_all, scrape, wait_for

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


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} print them) of the sockets listening on `port`."""
    addresses = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                addresses.add(address)
    return addresses


def test_the_broker_serves_strimzi_metrics_reporter_names_on_loopback(
    kafka: LocalKafka, topic_name: str
) -> None:
    """The names and labels the Kafka panels and alerts use, with values that follow what happened: 30
    messages of ~100 bytes appended to a 2-partition topic and read back, nothing offline, under-replicated or
    under min ISR."""
    kafka.create_topics([TopicSpec(topic_name, partitions=2)])
    records = [(f"k{i}".encode(), b"v" * 100) for i in range(30)]
    produce(kafka.bootstrap_servers, topic_name, records)
    assert len(read_all(kafka.bootstrap_servers, topic_name)) == 30

    def topic_metric(samples: dict[str, float], name: str) -> float:
        return metric_sum(samples, f"kafka_server_brokertopicmetrics_{name}_total", topic=topic_name)

    def counted() -> bool:
        samples = scrape(kafka.metrics_url)
        return topic_metric(samples, "messagesinpersec") == 30 and topic_metric(samples, "bytesoutpersec") > 0

    wait_for(counted, timeout=30, what=f"messages in and bytes out of {topic_name} on {kafka.metrics_url}")
    samples = scrape(kafka.metrics_url)
    assert topic_metric(samples, "bytesinpersec") > 30 * 100
    assert topic_metric(samples, "bytesoutpersec") > 30 * 100
    for partition in ("0", "1"):
        assert (
            samples[f'kafka_cluster_partition_underminisr{{partition="{partition}",topic="{topic_name}"}}']
            == 0
        )
    assert samples["kafka_server_replicamanager_underreplicatedpartitions{}"] == 0
    assert samples["kafka_controller_kafkacontroller_offlinepartitionscount{}"] == 0
    assert samples["kafka_controller_kafkacontroller_activecontrollercount{}"] == 1
    # Strimzi's default allowlist: Kafka metrics outside it are not exported (the reporter adds JVM metrics).
    kafka_names = {name.partition("{")[0] for name in samples if name.startswith("kafka_")}
    assert "kafka_server_fetchsessioncache_numincrementalfetchsessions" not in kafka_names
    assert "kafka_log_log_logendoffset" not in kafka_names
    assert kafka.metrics_url == f"http://{kafka.metrics_target}/metrics"
    # 127.0.0.1 only: as an IPv4 socket, or (how the JDK's HTTP server binds) an IPv6 one on ::ffff:127.0.0.1.
    listening = _listening_addresses(kafka.metrics_port)
    assert listening and listening <= {"0100007F", "0000000000000000FFFF00000100007F"}, listening


def test_the_brokers_jvm_runs_with_the_local_java_options_unless_given_none(
    kafka: LocalKafka, tmp_path: Path
) -> None:
    identity = ProcessIdentity.of(kafka.pid)
    assert identity is not None
    assert LOCAL_KAFKA_JAVA_OPTIONS
    assert all(option in identity.cmdline for option in LOCAL_KAFKA_JAVA_OPTIONS), identity.cmdline
    # The storage tool runs with the same options as the broker; a benchmark's broker with none.
    as_a_cluster = LocalKafka(kafka.runtimes, tmp_path, java_options=())._java("kafka.Kafka")
    assert not any(option in as_a_cluster for option in LOCAL_KAFKA_JAVA_OPTIONS)
    assert kafka._java("kafka.tools.StorageTool")[1:] == [*identity.cmdline[1:-2], "kafka.tools.StorageTool"]


def test_pipeline_topics_keep_their_names_as_the_local_reporters_topic_label() -> None:
    """metrics-reporter 0.2.0 labels a topic `a.b` as `a_b` (Kafka's Yammer scope), unlike a cluster's: the
    Kafka panels filter broker metrics by the lag exporter's exact topic names, so no topic may have a dot."""
    assert [topic.name for topic in streaming_pipeline().topics if "." in topic.name] == []
