"""Who may do what on Kafka: a KafkaUser per job, one for the lag exporter, one for load generators
(synthetic producers) and one for Kafka Connect (change data capture), with ACLs limited to their topics
and consumer groups. Strimzi's User Operator generates each user's SCRAM-SHA-512 password into a Secret
named after the user (keys `password` and `sasl.jaas.config`); no password is ever in the stack config.
`KafkaClient` is how a workload of our charts logs in with its user's Secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from contracts.cdc import CdcSource
from contracts.shadow_groups import job_shadow_groups
from infra.config import JobConfig

# Spark's Kafka source names its consumer groups `spark-kafka-source-<uuid>-...` and batch reads
# `spark-kafka-relation-<uuid>-...` (the `groupIdPrefix` option's defaults); they fetch, never commit.
SPARK_GROUP_PREFIXES = ("spark-kafka-source-", "spark-kafka-relation-")
COMMIT_LOG_TOPIC = "__consumer_offsets"
EXPORTER_USER = "lag-exporter"
LOAD_GENERATOR_USER = "load-generator"
# How a workload logs in as its KafkaUser: the users are `scram-sha-512`, and the workload reads the whole
# JAAS line from this key of the user's Secret (as STREAMSTACK_KAFKA_SASL_JAAS_CONFIG).
SASL_MECHANISM = "SCRAM-SHA-512"
JAAS_CONFIG_KEY = "sasl.jaas.config"
# Strimzi's key of the current cluster CA certificate (PEM) in its CA Secret, and in the copy clients mount.
CA_KEY = "ca.crt"


@dataclass(frozen=True, kw_only=True)
class KafkaClient:
    """How a workload of our charts (a streaming job, the lag exporter) reaches Kafka."""

    bootstrap_servers: str
    # Its KafkaUser's Secret, in the workload's namespace.
    user_secret: str
    # The Secret (in the workload's namespace) with the Kafka cluster CA: SASL_SSL to the TLS listener with
    # the CA mounted; None: SASL_PLAINTEXT (`kafka.clientTls`).
    ca_secret: str | None = None

    @property
    def security_protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.ca_secret is None else "SASL_SSL"

    def chart_values(self) -> dict[str, Any]:
        """The `kafka` values of the streaming-job and lag-exporter charts."""
        return {
            "bootstrapServers": self.bootstrap_servers,
            "securityProtocol": self.security_protocol,
            "sasl": {
                "mechanism": SASL_MECHANISM,
                "secretName": self.user_secret,
                "jaasConfigKey": JAAS_CONFIG_KEY,
            },
            "tls": {"caSecretName": self.ca_secret or "", "caKey": CA_KEY},
        }


@dataclass(frozen=True)
class Acl:
    """One `allow` rule of a KafkaUser: operations on a topic, group or the cluster, by name or by prefix."""

    resource_type: str
    operations: tuple[str, ...]
    name: str | None = None
    pattern_type: str = "literal"

    def as_dict(self) -> dict[str, object]:
        resource: dict[str, object] = {"type": self.resource_type}
        if self.name is not None:
            resource["name"] = self.name
            resource["patternType"] = self.pattern_type
        return {"type": "allow", "resource": resource, "operations": list(self.operations)}


@dataclass(frozen=True)
class KafkaUserSpec:
    """A SCRAM-SHA-512 KafkaUser; its Secret (password, sasl.jaas.config) has the same name."""

    name: str
    acls: tuple[Acl, ...]

    @property
    def secret_name(self) -> str:
        return self.name

    def topics_with(self, operation: str) -> set[str]:
        return {
            acl.name
            for acl in self.acls
            if acl.resource_type == "topic" and acl.name is not None and operation in acl.operations
        }


def _topic_acls(read: Iterable[str], write: Iterable[str]) -> list[Acl]:
    read, write = list(dict.fromkeys(read)), list(dict.fromkeys(write))
    acls = []
    for topic in dict.fromkeys([*read, *write]):
        operations = ["Describe"]
        if topic in read:
            operations.append("Read")
        if topic in write:
            operations.append("Write")
        acls.append(Acl("topic", tuple(operations), topic))
    return acls


def job_user(job: JobConfig, shadow_group_prefix: str) -> KafkaUserSpec:
    """Read its input topics, write its outputs and dead letters, commit its own shadow groups
    (`<prefix><job>` and `<prefix><job>.<query>`), and use Spark's fetch-only consumer groups."""
    acls = _topic_acls(job.read_topics, job.written_topics)
    acls.append(
        Acl("group", ("Describe", "Read"), job_shadow_groups(job.name, shadow_group_prefix), "prefix")
    )
    acls.extend(Acl("group", ("Describe", "Read"), prefix, "prefix") for prefix in SPARK_GROUP_PREFIXES)
    return KafkaUserSpec(job.name, tuple(acls))


def exporter_user(topics: Iterable[str], shadow_group_prefix: str) -> KafkaUserSpec:
    """Describe the cluster and the shadow groups, read the pipeline's topics (record timestamps for lag in
    seconds) and `__consumer_offsets` (commit times), write nothing."""
    acls = [Acl("cluster", ("Describe",))]
    acls.extend(_topic_acls([*topics, COMMIT_LOG_TOPIC], []))
    acls.append(Acl("group", ("Describe",), shadow_group_prefix, "prefix"))
    return KafkaUserSpec(EXPORTER_USER, tuple(acls))


def exporter_group_allow(shadow_group_prefix: str) -> str:
    """The exporter's `--group-allow`: only the groups its ACLs let it describe."""
    return re.escape(shadow_group_prefix) + ".*"


def pipeline_input_topics(jobs: Sequence[JobConfig]) -> list[str]:
    """Topics some job reads and no job writes: where events enter the pipeline (in catalogue order)."""
    written = {topic for job in jobs for topic in job.written_topics}
    return list(dict.fromkeys(topic for job in jobs for topic in job.read_topics if topic not in written))


def load_generator_user(jobs: Sequence[JobConfig]) -> KafkaUserSpec:
    """Write (and describe) the pipeline's input topics and nothing else: no reads, no consumer groups.
    IdempotentWrite on the cluster lets an idempotent producer (acks=all) initialise its producer id."""
    acls = [Acl("topic", ("Describe", "Write"), topic) for topic in pipeline_input_topics(jobs)]
    acls.append(Acl("cluster", ("IdempotentWrite",)))
    return KafkaUserSpec(LOAD_GENERATOR_USER, tuple(acls))


def kafka_connect_user(name: str, source: CdcSource, heartbeat_topics: Iterable[str] = ()) -> KafkaUserSpec:
    """Kafka Connect running the CDC connector (contracts/cdc.py): join its worker group; read, write and
    check the config of its three internal topics (Connect verifies they are compacted: DescribeConfigs;
    without it Connect only logs that it could not); write the changelog topics the connector routes its
    tables to and Debezium's heartbeat topic. Nothing else: no Create (the topics are KafkaTopics and the
    worker runs with topic.creation.enable=false; a denied create of an existing internal topic is not an
    error), no consumer group but its own (Connect reads its internal topics by assignment), no cluster
    operation (a producer with only Write on a topic may be idempotent, KIP-679)."""
    acls = [Acl("group", ("Describe", "Read"), source.connect.group_id)]
    acls.extend(
        Acl("topic", ("Describe", "DescribeConfigs", "Read", "Write"), topic)
        for topic in source.connect.internal_topics
    )
    acls.extend(_topic_acls([], [*source.topics, *heartbeat_topics]))
    return KafkaUserSpec(name, tuple(acls))
