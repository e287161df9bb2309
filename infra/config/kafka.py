"""`streamstack:kafka` and `streamstack:topics`: the Strimzi cluster and the catalogue's topics with their
overrides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contracts.pipeline import CLEANUP_POLICIES, DNS_LABEL_PATTERN, TOPIC_NAME_PATTERN, load_pipeline
from contracts.record_sizes import DEAD_LETTER_MAX_MESSAGE_BYTES, INPUT_MAX_MESSAGE_BYTES
from infra.config import versions
from infra.config.base import (
    ConfigError,
    Section,
    require_choice,
    require_match,
    require_minimum,
    setting,
)
from infra.config.cluster import NodePool, _node_pool


@dataclass(frozen=True)
class KafkaConfig:
    namespace: str = "kafka"
    cluster_name: str = "streamstack"
    operator_chart_version: str = "1.2.0"
    version: str = "4.3.1"
    metadata_version: str = "4.3-IV0"
    replication_factor: int = 1
    min_insync_replicas: int = 1
    node_pools: tuple[NodePool, ...] = (NodePool("dual-role", ("controller", "broker"), 1, "10Gi"),)
    listener_port: int = 9092
    # The pipeline's clients use the TLS listener (SASL_SSL, trusting Strimzi's cluster CA); False: the plain
    # SCRAM listener (SASL_PLAINTEXT), for a cluster network you trust (dev on kind).
    client_tls: bool = True

    def __post_init__(self) -> None:
        require_match(setting("kafka.namespace"), self.namespace, DNS_LABEL_PATTERN)
        require_match(setting("kafka.clusterName"), self.cluster_name, DNS_LABEL_PATTERN)
        require_minimum(setting("kafka.replicationFactor"), self.replication_factor, 1)
        require_minimum(setting("kafka.minInsyncReplicas"), self.min_insync_replicas, 1)
        names = [pool.name for pool in self.node_pools]
        if len(set(names)) != len(names):
            raise ConfigError(f"{setting('kafka.nodePools')}: pool names must differ, got {', '.join(names)}")
        versions.require_pinned_chart(
            setting("kafka.operatorChartVersion"), "strimzi-kafka-operator", self.operator_chart_version
        )
        runs = versions.STRIMZI_KAFKA_VERSIONS[self.operator_chart_version]
        if self.version not in runs:
            raise ConfigError(
                f"{setting('kafka.version')}: Kafka {self.version} is not supported by Strimzi "
                f"{self.operator_chart_version} (supported: {', '.join(runs)})"
            )
        match = versions.METADATA_VERSION_PATTERN.match(self.metadata_version)
        kafka_minor = versions.parse_version(setting("kafka.version"), self.version)[:2]
        if not match or (int(match[1]), int(match[2])) > kafka_minor:
            raise ConfigError(
                f"{setting('kafka.metadataVersion')}: {self.metadata_version!r} is not a KRaft metadata "
                f"version Kafka {self.version} can run (its own is {runs[self.version]})"
            )
        if not any("controller" in pool.roles for pool in self.node_pools):
            raise ConfigError(
                f"{setting('kafka.nodePools')}: no pool has the controller role (KRaft needs one)"
            )
        if self.brokers == 0:
            raise ConfigError(f"{setting('kafka.nodePools')}: no pool has the broker role")
        if self.replication_factor > self.brokers:
            raise ConfigError(
                f"{setting('kafka.replicationFactor')}: {self.replication_factor} is above the broker count "
                f"{self.brokers} (sum of the replicas of the broker pools in {setting('kafka.nodePools')})"
            )
        if self.min_insync_replicas > self.replication_factor:
            raise ConfigError(
                f"{setting('kafka.minInsyncReplicas')}: {self.min_insync_replicas} is above "
                f"{setting('kafka.replicationFactor')} {self.replication_factor}: no write could ever succeed"
            )

    @property
    def brokers(self) -> int:
        return sum(pool.replicas for pool in self.node_pools if "broker" in pool.roles)

    @property
    def controllers(self) -> int:
        return sum(pool.replicas for pool in self.node_pools if "controller" in pool.roles)

    @property
    def tls_listener_port(self) -> int:
        """The SCRAM-SHA-512 listener over TLS (the KafkaCluster component's `tls` listener)."""
        return self.listener_port + 1

    @property
    def client_port(self) -> int:
        """The listener the pipeline's clients use: TLS with `clientTls`, else the plain SCRAM one."""
        return self.tls_listener_port if self.client_tls else self.listener_port

    @property
    def client_security_protocol(self) -> str:
        return "SASL_SSL" if self.client_tls else "SASL_PLAINTEXT"

    @property
    def cluster_ca_secret(self) -> str:
        """Strimzi's Secret with the cluster CA's certificate (`ca.crt`) in the Kafka namespace; the program
        copies it under the same name into the clients' namespace (infra/components/kafka_ca.py)."""
        return f"{self.cluster_name}-cluster-ca-cert"

    @property
    def bootstrap_servers(self) -> str:
        """The clients' authenticated (SCRAM-SHA-512) listener behind Strimzi's bootstrap Service."""
        return f"{self.cluster_name}-kafka-bootstrap.{self.namespace}.svc:{self.client_port}"


@dataclass(frozen=True)
class TopicConfig:
    """A KafkaTopic; `replicas_setting`/`min_isr_setting` name where its replicas and min ISR were set."""

    name: str
    partitions: int
    replicas: int
    config: Mapping[str, str]
    replicas_setting: str = setting("kafka.replicationFactor")
    min_isr_setting: str = setting("kafka.minInsyncReplicas")

    def __post_init__(self) -> None:
        if not TOPIC_NAME_PATTERN.match(self.name):
            raise ConfigError(f"{setting(f'topics.{self.name}')}: not a valid topic and Kubernetes name")
        require_minimum(setting(f"topics.{self.name}.partitions"), self.partitions, 1)
        require_minimum(self.replicas_setting, self.replicas, 1)
        require_minimum(self.min_isr_setting, self.min_insync_replicas, 1)
        self._require_record_size_within_dead_letter_sizing()

    def _require_record_size_within_dead_letter_sizing(self) -> None:
        """The dead-letter topic and the jobs' Kafka producers are sized for the largest input record
        (contracts/record_sizes.py): a topic taking larger records would make that record's dead letter fail
        its query on every restart, and a smaller dead-letter limit the same."""
        limit = self.config.get("max.message.bytes")
        if limit is None:
            return
        name = setting(f"topics.{self.name}.config.max.message.bytes")
        if not limit.isdigit():
            raise ConfigError(f"{name}: {limit!r} is not a number of bytes")
        if self.name == load_pipeline().dead_letter_topic:
            if int(limit) < DEAD_LETTER_MAX_MESSAGE_BYTES:
                raise ConfigError(
                    f"{name}: {limit} is below the {DEAD_LETTER_MAX_MESSAGE_BYTES} bytes the dead letter of "
                    f"the largest input record takes (contracts/record_sizes.py)"
                )
        elif int(limit) > INPUT_MAX_MESSAGE_BYTES:
            raise ConfigError(
                f"{name}: {limit} is above the {INPUT_MAX_MESSAGE_BYTES} bytes the dead-letter topic and the "
                "jobs' Kafka producers are sized for (contracts/record_sizes.py): the dead letter of a "
                "larger record would fail its query on every restart"
            )

    @property
    def min_insync_replicas(self) -> int:
        return int(self.config.get("min.insync.replicas", "1"))


def require_topic_fits(topic: TopicConfig, brokers: int) -> None:
    """A topic cannot have more replicas than brokers, nor a min ISR above its replicas."""
    if topic.replicas > brokers:
        raise ConfigError(
            f"{topic.replicas_setting}: topic {topic.name} would have {topic.replicas} replicas but the "
            f"cluster has {brokers} broker(s) ({setting('kafka.nodePools')})"
        )
    if topic.min_insync_replicas > topic.replicas:
        raise ConfigError(
            f"{topic.min_isr_setting}: topic {topic.name} has min.insync.replicas "
            f"{topic.min_insync_replicas} above its {topic.replicas} replicas: no write could ever succeed"
        )


def _kafka(section: Section) -> KafkaConfig:
    section.only(
        "namespace",
        "clusterName",
        "operatorChartVersion",
        "version",
        "metadataVersion",
        "replicationFactor",
        "minInsyncReplicas",
        "nodePools",
        "clientTls",
    )
    pools = tuple(_node_pool(pool) for pool in section.sections("nodePools")) or KafkaConfig.node_pools
    brokers = sum(pool.replicas for pool in pools if "broker" in pool.roles)
    chart = section.string("operatorChartVersion", KafkaConfig.operator_chart_version)
    version = section.string("version", KafkaConfig.version)
    default_metadata = versions.STRIMZI_KAFKA_VERSIONS.get(chart, {}).get(
        version, KafkaConfig.metadata_version
    )
    replication = section.integer("replicationFactor", min(3, brokers))
    return KafkaConfig(
        namespace=section.string("namespace", KafkaConfig.namespace),
        cluster_name=section.string("clusterName", KafkaConfig.cluster_name),
        operator_chart_version=chart,
        version=version,
        metadata_version=section.string("metadataVersion", default_metadata),
        replication_factor=replication,
        min_insync_replicas=section.integer("minInsyncReplicas", max(1, replication - 1)),
        node_pools=pools,
        client_tls=section.boolean("clientTls", KafkaConfig.client_tls),
    )


def _topics(section: Section, kafka: KafkaConfig) -> tuple[TopicConfig, ...]:
    """The catalogue's topics with `streamstack:topics` overrides; a name the catalogue lacks adds a topic."""
    definitions = {topic.name: topic for topic in load_pipeline().topics}
    names = list(definitions) + [name for name in section.raw if name not in definitions]
    topics = []
    for name in names:
        override = section.section(name)
        override.only("partitions", "replicas", "retentionMs", "cleanupPolicy", "minInsyncReplicas", "config")
        definition = definitions.get(name)
        if definition is None and not override.has("partitions"):
            raise ConfigError(
                f"{override.name('partitions')}: required for a topic the catalogue does not have"
            )
        config = definition.topic_config() if definition else {"cleanup.policy": "delete"}
        config.update(override.string_map("config"))
        # Both become entries of the verbatim `config` map, where TopicConfig cannot tell them from
        # `config`'s own (which may set retention.ms -1, say): their checks are part of the conversion.
        if override.has("retentionMs"):
            retention = override.integer("retentionMs")
            require_minimum(override.name("retentionMs"), retention, 1)
            config["retention.ms"] = str(retention)
        if override.has("cleanupPolicy"):
            policy = override.string("cleanupPolicy")
            require_choice(override.name("cleanupPolicy"), policy, CLEANUP_POLICIES)
            config["cleanup.policy"] = policy
        config["min.insync.replicas"] = str(override.integer("minInsyncReplicas", kafka.min_insync_replicas))
        topics.append(
            TopicConfig(
                name=name,
                partitions=override.integer("partitions", definition.partitions if definition else None),
                replicas=override.integer("replicas", kafka.replication_factor),
                config=config,
                replicas_setting=override.name("replicas")
                if override.has("replicas")
                else setting("kafka.replicationFactor"),
                min_isr_setting=override.name("minInsyncReplicas")
                if override.has("minInsyncReplicas")
                else setting("kafka.minInsyncReplicas"),
            )
        )
    return tuple(topics)
