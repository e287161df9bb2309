"""Every config dataclass checks its own values when it is built, not only when `load()` reads the stack: one
built in code with a bad value raises ConfigError whose message starts with the stack setting to change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from infra.config import (
    CheckpointConfig,
    ClusterConfig,
    ConfigError,
    DriverResources,
    ExecutorResources,
    ImageReference,
    JobConfig,
    KafkaConfig,
    LagExporterConfig,
    MonitoringConfig,
    NodePool,
    Origin,
    Resources,
    SparkConfig,
    TopicConfig,
)
from tests.infra.conftest import load_config

SPARK_IMAGE = "streamstack/jobs:0.1.0-spark4.3.0"
EXPORTER_IMAGE = "streamstack/lag-exporter:0.1.0"


def job(**changes: Any) -> JobConfig:
    """A job config shaped like user-view's catalogue entry (declared stateless here), with `changes`."""
    fields: dict[str, Any] = {
        "name": "user-view",
        "module": "user_view",
        "stateful": False,
        "topics": (("--users-topic", "users"), ("--output-topic", "user-view")),
        "reads": ("--users-topic",),
        "writes": ("--output-topic",),
    }
    return JobConfig(**{**fields, **changes})


def pool(**changes: Any) -> NodePool:
    fields: dict[str, Any] = {
        "name": "brokers",
        "roles": ("broker",),
        "replicas": 3,
        "storage_size": "10Gi",
    }
    return NodePool(**{**fields, **changes})


BAD_VALUES: list[tuple[str, Callable[[], object], str]] = [
    ("cluster-nodes", lambda: ClusterConfig(nodes=0), "streamstack:cluster.nodes"),
    (
        "cluster-kubernetes-version",
        lambda: ClusterConfig(kubernetes_version="v1.33"),
        "streamstack:cluster.kubernetesVersion",
    ),
    (
        "cluster-api-server-cidr",
        lambda: ClusterConfig(api_server_cidrs=("10.0.0.0/28", "10.0.0.1/28")),
        "streamstack:cluster.apiServerCidrs[1]",
    ),
    (
        "cluster-node-cidr-catch-all",
        lambda: ClusterConfig(node_cidrs=("0.0.0.0/0",)),
        "streamstack:cluster.nodeCidrs[0]",
    ),
    (
        "cluster-node-cidr-twice",
        lambda: ClusterConfig(node_cidrs=("10.0.16.0/20", "10.0.16.0/20")),
        "streamstack:cluster.nodeCidrs",
    ),
    ("pool-name", lambda: pool(name="Brokers"), "streamstack:kafka.nodePools.name"),
    ("pool-roles", lambda: pool(roles=("zookeeper",)), "streamstack:kafka.nodePools.roles"),
    ("pool-roles-twice", lambda: pool(roles=("broker", "broker")), "streamstack:kafka.nodePools.roles"),
    ("pool-replicas", lambda: pool(replicas=0), "streamstack:kafka.nodePools.replicas"),
    ("pool-storage-size", lambda: pool(storage_size="ten gigs"), "streamstack:kafka.nodePools.storage.size"),
    (
        "pool-of-an-entry",
        lambda: pool(replicas=0, setting="streamstack:kafka.nodePools[1]"),
        "streamstack:kafka.nodePools[1].replicas",
    ),
    (
        "resources-quantity",
        lambda: Resources("streamstack:lagExporter.resources", {"cpu": "lots"}),
        "streamstack:lagExporter.resources.requests.cpu",
    ),
    (
        "resources-name",
        lambda: Resources("streamstack:lagExporter.resources", limits={"gpu": "1"}),
        "streamstack:lagExporter.resources.limits.gpu",
    ),
    ("kafka-namespace", lambda: KafkaConfig(namespace="Kafka"), "streamstack:kafka.namespace"),
    ("kafka-cluster-name", lambda: KafkaConfig(cluster_name="kafka_1"), "streamstack:kafka.clusterName"),
    (
        "kafka-replication-factor",
        lambda: KafkaConfig(replication_factor=0),
        "streamstack:kafka.replicationFactor",
    ),
    (
        "kafka-min-insync-replicas",
        lambda: KafkaConfig(min_insync_replicas=0),
        "streamstack:kafka.minInsyncReplicas",
    ),
    (
        "kafka-pool-names",
        lambda: KafkaConfig(node_pools=(pool(roles=("controller", "broker")), pool())),
        "streamstack:kafka.nodePools",
    ),
    ("topic-name", lambda: TopicConfig("Page_Views", 4, 1, {}), "streamstack:topics.Page_Views"),
    (
        "topic-partitions",
        lambda: TopicConfig("page-views", 0, 1, {}),
        "streamstack:topics.page-views.partitions",
    ),
    ("topic-replicas", lambda: TopicConfig("page-views", 4, 0, {}), "streamstack:kafka.replicationFactor"),
    (
        "topic-min-isr",
        lambda: TopicConfig("page-views", 4, 1, {"min.insync.replicas": "0"}),
        "streamstack:kafka.minInsyncReplicas",
    ),
    (
        "topic-replicas-of-an-override",
        lambda: TopicConfig("users", 4, 0, {}, replicas_setting="streamstack:topics.users.replicas"),
        "streamstack:topics.users.replicas",
    ),
    (
        "spark-operator-namespace",
        lambda: SparkConfig(image=SPARK_IMAGE, operator_namespace="Spark Operator"),
        "streamstack:spark.operatorNamespace",
    ),
    (
        "spark-jobs-namespace",
        lambda: SparkConfig(image=SPARK_IMAGE, jobs_namespace="-streaming"),
        "streamstack:spark.jobsNamespace",
    ),
    (
        "spark-pull-policy",
        lambda: SparkConfig(image=SPARK_IMAGE, image_pull_policy="Sometimes"),
        "streamstack:spark.imagePullPolicy",
    ),
    (
        "spark-service-account",
        lambda: SparkConfig(image=SPARK_IMAGE, service_account="Spark"),
        "streamstack:spark.serviceAccount",
    ),
    (
        "image-without-tag",
        lambda: ImageReference("streamstack/jobs", "", setting="streamstack:spark.image"),
        "streamstack:spark.image",
    ),
    (
        "image-without-repository",
        lambda: ImageReference("", "0.1.0", setting="streamstack:lagExporter.image"),
        "streamstack:lagExporter.image",
    ),
    (
        "checkpoint-access-mode",
        lambda: CheckpointConfig(access_mode="ReadWriteSometimes"),
        "streamstack:jobDefaults.checkpoint.accessMode",
    ),
    ("checkpoint-size", lambda: CheckpointConfig(size="1 GB"), "streamstack:jobDefaults.checkpoint.size"),
    (
        "checkpoint-size-of-an-entry",
        lambda: CheckpointConfig(
            size="1 GB",
            origin=Origin("jobDefaults.checkpoint", "jobs[2].checkpoint", frozenset({"size"})),
        ),
        "streamstack:jobs[2].checkpoint.size",
    ),
    ("driver-cores", lambda: DriverResources(cores=0), "streamstack:jobDefaults.driver.cores"),
    (
        "driver-core-request",
        lambda: DriverResources(core_request="1 core"),
        "streamstack:jobDefaults.driver.coreRequest",
    ),
    (
        "driver-core-limit",
        lambda: DriverResources(core_limit="two"),
        "streamstack:jobDefaults.driver.coreLimit",
    ),
    ("driver-memory", lambda: DriverResources(memory="1 GB"), "streamstack:jobDefaults.driver.memory"),
    (
        "driver-memory-overhead",
        lambda: DriverResources(memory_overhead="320 MiB"),
        "streamstack:jobDefaults.driver.memoryOverhead",
    ),
    (
        "executor-instances",
        lambda: ExecutorResources(instances=0),
        "streamstack:jobDefaults.executor.instances",
    ),
    ("executor-cores", lambda: ExecutorResources(cores=0), "streamstack:jobDefaults.executor.cores"),
    ("executor-memory", lambda: ExecutorResources(memory="4GB"), "streamstack:jobDefaults.executor.memory"),
    (
        "executor-memory-of-an-entry",
        lambda: ExecutorResources(
            memory="4GB", origin=Origin("jobDefaults.executor", "jobs[4].executor", frozenset({"memory"}))
        ),
        "streamstack:jobs[4].executor.memory",
    ),
    (
        "executor-memory-overhead-of-an-entry",
        lambda: ExecutorResources(
            memory_overhead="0.3g",
            origin=Origin("jobDefaults.executor", "jobs[4].executor", frozenset({"memoryOverhead"})),
        ),
        "streamstack:jobs[4].executor.memoryOverhead",
    ),
    ("job-name", lambda: job(name="User_View"), "streamstack:jobs.name"),
    ("job-name-too-long", lambda: job(name="a" * 52), "streamstack:jobs.name"),
    ("job-module", lambda: job(module="user-view"), "streamstack:jobs.module"),
    ("job-topic-flag", lambda: job(topics=(("users", "users"),)), "streamstack:jobs.topics.users"),
    (
        "job-topic-name",
        lambda: job(topics=(("--users-topic", "Users"),)),
        "streamstack:jobs.topics.--users-topic",
    ),
    ("job-reads", lambda: job(reads=("--input-topic",)), "streamstack:jobs.reads"),
    ("job-writes", lambda: job(writes=("--users",)), "streamstack:jobs.writes"),
    ("job-trigger-interval", lambda: job(trigger_interval="5s"), "streamstack:jobDefaults.triggerInterval"),
    (
        "job-max-offsets-per-trigger",
        lambda: job(max_offsets_per_trigger=0),
        "streamstack:jobDefaults.maxOffsetsPerTrigger",
    ),
    (
        "job-shuffle-partitions",
        lambda: job(shuffle_partitions=0),
        "streamstack:jobDefaults.shufflePartitions",
    ),
    ("job-metrics-port", lambda: job(metrics_port=80), "streamstack:jobDefaults.metricsPort"),
    (
        "job-dead-letter-topic",
        lambda: job(dead_letter_topic="Dead Letters"),
        "streamstack:jobDefaults.deadLetterTopic",
    ),
    (
        "job-setting-of-an-entry",
        lambda: job(
            metrics_port=80,
            origin=Origin("jobDefaults", "jobs[1]", frozenset({"name", "metricsPort"})),
        ),
        "streamstack:jobs[1].metricsPort",
    ),
    (
        "job-name-of-an-entry",
        lambda: job(name="User_View", origin=Origin("jobDefaults", "jobs[1]", frozenset({"name"}))),
        "streamstack:jobs[1].name",
    ),
    (
        "exporter-pull-policy",
        lambda: LagExporterConfig(image=EXPORTER_IMAGE, image_pull_policy="Sometimes"),
        "streamstack:lagExporter.imagePullPolicy",
    ),
    (
        "exporter-port",
        lambda: LagExporterConfig(image=EXPORTER_IMAGE, port=80),
        "streamstack:lagExporter.port",
    ),
    (
        "exporter-refresh-interval",
        lambda: LagExporterConfig(image=EXPORTER_IMAGE, refresh_interval=0),
        "streamstack:lagExporter.refreshInterval",
    ),
    (
        "exporter-log-level",
        lambda: LagExporterConfig(image=EXPORTER_IMAGE, log_level="TRACE"),
        "streamstack:lagExporter.logLevel",
    ),
    (
        "exporter-run-as-user",
        lambda: LagExporterConfig(image=EXPORTER_IMAGE, run_as_user=0),
        "streamstack:lagExporter.runAsUser",
    ),
    (
        "monitoring-namespace",
        lambda: MonitoringConfig(namespace="Monitoring"),
        "streamstack:monitoring.namespace",
    ),
    (
        "monitoring-release-name",
        lambda: MonitoringConfig(release_name="kube_prometheus_stack"),
        "streamstack:monitoring.releaseName",
    ),
    (
        "monitoring-retention",
        lambda: MonitoringConfig(prometheus_retention="2 days"),
        "streamstack:monitoring.prometheus.retention",
    ),
    (
        "monitoring-storage-size",
        lambda: MonitoringConfig(prometheus_storage_size="100 GB"),
        "streamstack:monitoring.prometheus.storageSize",
    ),
]


@pytest.mark.parametrize(
    ("build", "setting"), [pytest.param(build, name, id=case) for case, build, name in BAD_VALUES]
)
def test_a_config_built_with_a_bad_value_raises_naming_its_setting(
    build: Callable[[], object], setting: str
) -> None:
    with pytest.raises(ConfigError) as error:
        build()
    assert str(error.value).startswith(f"{setting}: "), str(error.value)


def test_defaults_are_valid() -> None:
    for build in (
        ClusterConfig,
        CheckpointConfig,
        DriverResources,
        ExecutorResources,
        KafkaConfig,
        MonitoringConfig,
        job,
        pool,
        lambda: SparkConfig(image=SPARK_IMAGE),
        lambda: LagExporterConfig(image=EXPORTER_IMAGE),
        lambda: TopicConfig("page-views", 4, 1, {"min.insync.replicas": "1"}),
        lambda: Resources("streamstack:lagExporter.resources", {"cpu": "50m"}, {"memory": "256Mi"}),
        lambda: ImageReference("streamstack/jobs", "0.1.0", "sha256:ab", setting="streamstack:spark.image"),
    ):
        build()


@pytest.mark.parametrize(
    ("jobs", "job_defaults", "setting"),
    [
        ([{"name": "user-view", "executor": {"memory": "4GB"}}], {}, "streamstack:jobs[0].executor.memory"),
        ([{"name": "user-view"}], {"executor": {"memory": "4GB"}}, "streamstack:jobDefaults.executor.memory"),
        (
            [{"name": "user-view", "driver": {"memoryOverhead": "256 MB"}}],
            {},
            "streamstack:jobs[0].driver.memoryOverhead",
        ),
        (
            [{"name": "user-view"}],
            {"executor": {"memoryOverhead": 256}},
            "streamstack:jobDefaults.executor.memoryOverhead",
        ),
        ([{"name": "user-view", "metricsPort": 80}], {}, "streamstack:jobs[0].metricsPort"),
        ([{"name": "user-view", "checkpoint": {"size": "1 GB"}}], {}, "streamstack:jobs[0].checkpoint.size"),
    ],
)
def test_a_bad_job_value_names_the_entry_or_the_defaults_that_set_it(
    jobs: list[dict[str, Any]], job_defaults: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_config("dev", jobs=jobs, jobDefaults=job_defaults)
    assert str(error.value).startswith(f"{setting}: "), str(error.value)
