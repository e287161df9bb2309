"""KafkaCluster on its own: the Strimzi release, a KRaft Kafka with node pools, metrics, topics and users."""

from __future__ import annotations

import re
from collections.abc import Callable

import pulumi
import pytest

from contracts.pipeline import load_pipeline
from infra.components.kafka_cluster import KafkaCluster, KafkaClusterArgs
from infra.config import ConfigError, StackConfig, TopicConfig
from infra.kafka_access import exporter_user, job_user, load_generator_user
from tests.infra.conftest import Stack, build, load_config

JOBS_NAMESPACE = "streaming"


def cluster_args(config: StackConfig) -> KafkaClusterArgs:
    prefix = config.spark.shadow_group_prefix
    exporter = exporter_user([topic.name for topic in config.topics], prefix)
    users = (*(job_user(job, prefix) for job in config.jobs), exporter)
    load_generator = load_generator_user(config.jobs) if config.load_generator.enabled else None
    return KafkaClusterArgs(
        kafka=config.kafka,
        topics=config.topics,
        users=users,
        users_namespace=JOBS_NAMESPACE,
        monitoring_namespace="monitoring",
        load_generator=load_generator,
    )


def build_cluster(mocked: Callable[[str], Stack], stack: str) -> tuple[Stack, StackConfig, list[str]]:
    recorder = mocked(stack)
    config = load_config(stack)
    bootstrap: list[str] = []

    def component() -> pulumi.Output[None]:
        return KafkaCluster("kafka", cluster_args(config)).bootstrap_servers.apply(bootstrap.append)

    build(component)
    return recorder, config, bootstrap


def test_strimzi_operator_release_is_pinned_and_watches_the_jobs_namespace(
    mocked: Callable[[str], Stack],
) -> None:
    recorder, _, _ = build_cluster(mocked, "dev")
    (release,) = recorder.of_kind("Release")
    assert release.inputs["chart"] == "oci://quay.io/strimzi-helm/strimzi-kafka-operator"
    assert release.inputs["version"] == "1.2.0"
    assert release.inputs["namespace"] == "kafka"
    assert release.inputs["values"]["watchNamespaces"] == [JOBS_NAMESPACE]
    assert release.inputs["values"]["defaultImageTag"] == "1.2.0"


def test_kafka_is_kraft_authenticated_and_waited_for(mocked: Callable[[str], Stack]) -> None:
    recorder, config, bootstrap = build_cluster(mocked, "dev")
    kafka = recorder.named("Kafka", "streamstack")
    assert kafka.inputs["apiVersion"] == "kafka.strimzi.io/v1"
    assert kafka.metadata["annotations"]["pulumi.com/waitFor"] == "condition=Ready"
    spec = kafka.spec["kafka"]
    assert (spec["version"], spec["metadataVersion"]) == ("4.3.1", "4.3-IV0")
    listeners = {listener["name"]: listener for listener in spec["listeners"]}
    assert all(listener["type"] == "internal" for listener in listeners.values())
    assert all(listener["authentication"]["type"] == "scram-sha-512" for listener in listeners.values())
    assert spec["authorization"]["type"] == "simple"
    assert spec["metricsConfig"]["type"] == "strimziMetricsReporter"
    assert spec["config"]["min.insync.replicas"] == config.kafka.min_insync_replicas
    assert spec["config"]["default.replication.factor"] == config.kafka.replication_factor
    assert kafka.spec["entityOperator"]["userOperator"]["watchedNamespace"] == JOBS_NAMESPACE
    # The bootstrap address is Strimzi's bootstrap Service and the authenticated listener's port.
    port = listeners["scram"]["port"]
    assert bootstrap == [f"streamstack-kafka-bootstrap.kafka.svc:{port:.0f}"]


def test_dev_has_one_dual_role_pool_prod_separate_controllers_and_brokers(
    mocked: Callable[[str], Stack],
) -> None:
    dev, _, _ = build_cluster(mocked, "dev")
    (pool,) = dev.of_kind("KafkaNodePool")
    assert sorted(pool.spec["roles"]) == ["broker", "controller"]
    assert pool.spec["replicas"] == 1
    (volume,) = pool.spec["storage"]["volumes"]
    assert (volume["kraftMetadata"], volume["class"], volume["deleteClaim"]) == ("shared", "standard", False)
    assert pool.metadata["labels"]["strimzi.io/cluster"] == "streamstack"

    prod, _, _ = build_cluster(mocked, "prod")
    pools = {pool.metadata["name"]: pool.spec for pool in prod.of_kind("KafkaNodePool")}
    assert (pools["controllers"]["roles"], pools["controllers"]["replicas"]) == (["controller"], 3)
    assert (pools["brokers"]["roles"], pools["brokers"]["replicas"]) == (["broker"], 3)
    kafka_config = prod.named("Kafka", "streamstack").spec["kafka"]["config"]
    assert (kafka_config["default.replication.factor"], kafka_config["min.insync.replicas"]) == (3, 2)


def test_broker_metrics_pod_monitor_selects_the_kafka_pods(mocked: Callable[[str], Stack]) -> None:
    recorder, _, _ = build_cluster(mocked, "dev")
    (monitor,) = recorder.of_kind("PodMonitor")
    assert monitor.metadata["namespace"] == "kafka"
    assert monitor.spec["selector"]["matchLabels"] == {
        "strimzi.io/cluster": "streamstack",
        "strimzi.io/kind": "Kafka",
    }
    # tcp-prometheus is the port Strimzi gives the metrics endpoint of every Kafka pod.
    assert [endpoint["port"] for endpoint in monitor.spec["podMetricsEndpoints"]] == ["tcp-prometheus"]


def test_every_pipeline_topic_with_partitions_replicas_retention_and_compaction(
    mocked: Callable[[str], Stack],
) -> None:
    recorder, _, _ = build_cluster(mocked, "prod")
    topics = {topic.metadata["name"]: topic for topic in recorder.of_kind("KafkaTopic")}
    assert set(topics) == {topic.name for topic in load_pipeline().topics}
    for definition in load_pipeline().topics:
        topic = topics[definition.name]
        assert topic.metadata["labels"]["strimzi.io/cluster"] == "streamstack"
        assert topic.metadata["annotations"]["pulumi.com/waitFor"] == "condition=Ready"
        assert topic.spec["replicas"] == 3
        assert topic.spec["config"]["min.insync.replicas"] == "2"
        assert topic.spec["config"]["cleanup.policy"] == definition.cleanup_policy
        if definition.retention_ms is not None:
            assert topic.spec["config"]["retention.ms"] == str(definition.retention_ms)
    # Changelogs and views keep the latest value per key; prod raises the busy inputs' partitions.
    compacted = {
        name for name, topic in topics.items() if topic.spec["config"]["cleanup.policy"] == "compact"
    }
    assert {"users", "orders", "user-view", "page-views-per-url", "user-sessions"} <= compacted
    assert "page-views" not in compacted
    assert topics["page-views"].spec["partitions"] == 12
    assert topics["users"].spec["partitions"] == 2


def test_a_scram_kafka_user_per_client_in_the_jobs_namespace(mocked: Callable[[str], Stack]) -> None:
    recorder, config, _ = build_cluster(mocked, "dev")
    users = {user.metadata["name"]: user for user in recorder.of_kind("KafkaUser")}
    assert set(users) == {job.name for job in config.jobs} | {"lag-exporter", "load-generator"}
    for user in users.values():
        assert user.metadata["namespace"] == JOBS_NAMESPACE
        assert user.metadata["labels"]["strimzi.io/cluster"] == "streamstack"
        assert user.spec["authentication"] == {"type": "scram-sha-512"}
        assert user.spec["authorization"]["type"] == "simple"
        # Strimzi generates the password; nothing secret is in the object.
        assert "password" not in user.spec["authentication"]
    exporter_acls = users["lag-exporter"].spec["authorization"]["acls"]
    assert not [acl for acl in exporter_acls if "Write" in acl["operations"]]


def test_cluster_args_reject_a_topic_above_the_broker_count() -> None:
    config = load_config("dev")
    too_many = TopicConfig("page-views", 4, 2, {"min.insync.replicas": "1"})
    with pytest.raises(ConfigError, match=re.escape("streamstack:kafka.replicationFactor")):
        KafkaClusterArgs(
            kafka=config.kafka,
            topics=(too_many,),
            users=(),
            users_namespace=JOBS_NAMESPACE,
            monitoring_namespace="monitoring",
        )


def test_cluster_args_reject_a_user_of_a_topic_the_stack_lacks() -> None:
    config = load_config("dev")
    user = job_user(config.jobs[0], "streamstack-")
    without_inputs = tuple(topic for topic in config.topics if topic.name != "page-views")
    with pytest.raises(ConfigError, match=re.escape("streamstack:topics")):
        KafkaClusterArgs(
            kafka=config.kafka,
            topics=without_inputs,
            users=(user,),
            users_namespace=JOBS_NAMESPACE,
            monitoring_namespace="monitoring",
        )


def test_the_load_generator_may_only_write_the_pipelines_input_topics(mocked: Callable[[str], Stack]) -> None:
    recorder, _, _ = build_cluster(mocked, "dev")
    user = recorder.named("KafkaUser", "load-generator")
    acls = user.spec["authorization"]["acls"]
    topics = {
        acl["resource"]["name"]: acl["operations"] for acl in acls if acl["resource"]["type"] == "topic"
    }
    # What the producers (jobs/producers) write and no job writes: the events entering the pipeline.
    inputs = ["page-views", "ad-impressions", "ad-clicks", "users", "orders", "order-events"]
    assert topics == {topic: ["Describe", "Write"] for topic in inputs}
    assert [acl for acl in acls if acl["resource"]["type"] not in ("topic",)] == [
        {"type": "allow", "resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]}
    ]
    # Its pods may reach the client listeners only.
    policy = recorder.named("NetworkPolicy", "load-generator")
    assert policy.metadata["namespace"] == JOBS_NAMESPACE
    assert policy.spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "load-generator"
    (egress,) = policy.spec["egress"]
    assert sorted(port["port"] for port in egress["ports"]) == [9092, 9093]
    assert policy.spec["ingress"] == []


def test_prod_has_no_load_generator(mocked: Callable[[str], Stack]) -> None:
    recorder, _, _ = build_cluster(mocked, "prod")
    names = {user.metadata["name"] for user in recorder.of_kind("KafkaUser")}
    assert "load-generator" not in names
    assert not [p for p in recorder.of_kind("NetworkPolicy") if p.metadata["name"] == "load-generator"]
