"""KafkaConnect: change data capture in the cluster (issue 18). A Strimzi `KafkaConnect` running our Connect
image (infra/connect/Dockerfile: Strimzi's Kafka 4.3.1 image + Debezium's PostgreSQL plugin) and the Debezium
`KafkaConnector` built from `contracts.cdc.debezium_connector_config`, the one description of the connector
the local runtime uses too: what is captured, onto which topics, with which converters and transforms.

- Connect runs in the jobs' namespace (where the User Operator writes its KafkaUser's Secret) with
  `strimzi.io/use-connector-resources: "true"`: connectors are KafkaConnector resources, never REST calls.
  Its group and its config/offset/status topics come from the catalogue (`sources.cdc.connect`); the topics
  are KafkaTopics of the stack, so Connect creates none (`topic.creation.enable: false`).
- Its own KafkaUser (infra/kafka_access.py, `kafka_connect_user`): the worker group, the internal topics,
  the changelog topics and Debezium's heartbeat topic, which this component creates as a KafkaTopic (the
  brokers do not auto-create topics). No signalling or transaction-metadata topics: neither is enabled.
- The database password never appears in the connector's config: a Secret (from the stack secret
  `cdcDatabasePassword`) is mounted into the Connect pods and the connector reads it with Kafka's
  DirectoryConfigProvider (`${directory:<mount>:password}`), limited to that mount (`allowed.paths`). Chosen
  over Strimzi's KubernetesSecretConfigProvider, which would need a Role to read Secrets and egress to the
  Kubernetes API from the Connect pods.
- Restricted pods (non-root, no privilege escalation, no capabilities, read-only root filesystem,
  RuntimeDefault seccomp); NetworkPolicies for Connect -> Kafka, Connect -> PostgreSQL, Connect <-> Connect
  and the Strimzi operator -> Connect's REST API (infra/network.py).
- `pulumi up` waits until the KafkaConnect and the KafkaConnector are Ready.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from contracts.cdc import CdcSource, connect_worker_config, debezium_connector_config
from contracts.connect_metrics import jmx_exporter_rules
from infra import network
from infra.components.common import READY, WAIT_FOR, child, metadata, network_policies
from infra.components.kafka_cluster import API_VERSION, user_spec
from infra.config import ConfigError, ConnectConfig, KafkaConfig, setting
from infra.kafka_access import CA_KEY, KafkaUserSpec, kafka_connect_user

CONNECT_NAME = "cdc"  # the KafkaConnect; Strimzi names its pods cdc-connect-<n>
CONNECT_USER = "kafka-connect-cdc"
CREDENTIALS_SECRET = "cdc-database-credentials"
PASSWORD_KEY = "password"
# Strimzi mounts additional volumes only under /mnt.
CREDENTIALS_MOUNT = "/mnt/cdc-database-credentials"
CREDENTIALS_VOLUME = "cdc-database-credentials"
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
USE_CONNECTOR_RESOURCES = "strimzi.io/use-connector-resources"
# Debezium's default `topic.heartbeat.prefix`: heartbeats go to <prefix>.<topic.prefix>.
HEARTBEAT_PREFIX = "__debezium-heartbeat"
HEARTBEAT_RETENTION_MS = 3_600_000  # a heartbeat is only read as "the connector is alive"
# Pulling the Connect image on a cold node, starting the worker, loading the plugin.
CONNECT_READY_TIMEOUT = "15m"
METRICS_CONFIG_MAP = "cdc-connect-metrics"
METRICS_KEY = "metrics-config.yml"
METRICS_PORT_NAME = "tcp-prometheus"  # Strimzi's name for the metrics port of its pods
# The Prometheus JMX exporter's rules: contracts/connect_metrics.py, shared with the local Connect worker.
METRICS_RULES: dict[str, Any] = jmx_exporter_rules()


def password_reference() -> str:
    """What the connector config holds instead of the password: DirectoryConfigProvider's reference to the
    file `password` of the mounted Secret."""
    return f"${{directory:{CREDENTIALS_MOUNT}:{PASSWORD_KEY}}}"


def connector_config(source: CdcSource, *, hostname: str, port: int, user: str) -> dict[str, str]:
    """The Debezium connector's complete config for the cluster: `debezium_connector_config` with the
    cluster's database address and the password as a config-provider reference."""
    return debezium_connector_config(
        source, hostname=hostname, port=port, user=user, password=password_reference()
    )


def heartbeat_topics(config: dict[str, str]) -> list[str]:
    """The topic Debezium writes heartbeats to, when the connector config enables them."""
    if int(config.get("heartbeat.interval.ms", "0")) <= 0:
        return []
    prefix = config.get("topic.heartbeat.prefix", HEARTBEAT_PREFIX)
    return [f"{prefix}.{config['topic.prefix']}"]


def kubernetes_name(topic: str) -> str:
    """A KafkaTopic's metadata.name for a topic whose name Kubernetes refuses (`__debezium-heartbeat.x_y`)."""
    return topic.strip("_.-").replace("_", "-").lower()


def connector_spec(config: dict[str, str]) -> dict[str, Any]:
    """The KafkaConnector spec: Strimzi takes the class and task count as fields, never in `config`."""
    rest = {key: value for key, value in config.items() if key not in ("connector.class", "tasks.max")}
    return {
        "class": config["connector.class"],
        "tasksMax": int(config["tasks.max"]),
        # A failed connector or task is restarted by the operator (with back-off), as the local runtime's
        # supervisor restarts its Connect worker.
        "autoRestart": {"enabled": True},
        "state": "running",
        "config": rest,
    }


def connect_spec(
    connect: ConnectConfig,
    kafka: KafkaConfig,
    source: CdcSource,
    user: KafkaUserSpec,
    ca_secret: str | None,
) -> dict[str, Any]:
    container_security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    spec: dict[str, Any] = {
        "version": kafka.version,
        "replicas": connect.replicas,
        "image": connect.image,
        "bootstrapServers": kafka.bootstrap_servers,
        "groupId": source.connect.group_id,
        "configStorageTopic": source.connect.config_storage_topic,
        "offsetStorageTopic": source.connect.offset_storage_topic,
        "statusStorageTopic": source.connect.status_storage_topic,
        "authentication": {
            "type": "scram-sha-512",
            "username": user.name,
            "passwordSecret": {"secretName": user.secret_name, "password": "password"},
        },
        "metricsConfig": {
            "type": "jmxPrometheusExporter",
            "valueFrom": {"configMapKeyRef": {"name": METRICS_CONFIG_MAP, "key": METRICS_KEY}},
        },
        "config": {
            # The same as the local worker's (streamstack/local/connect.py).
            **connect_worker_config(),
            # Debezium confirms a position to the replication slot when Connect commits its offsets: every
            # 10 s (Connect's default is 60 s), so the slot retains less WAL.
            "offset.flush.interval.ms": 10000,
            # The internal topics exist (KafkaTopics of the catalogue); the brokers' default otherwise.
            "config.storage.replication.factor": -1,
            "offset.storage.replication.factor": -1,
            "status.storage.replication.factor": -1,
            "topic.creation.enable": False,
            "config.providers": "directory",
            "config.providers.directory.class": DIRECTORY_PROVIDER,
            "config.providers.directory.param.allowed.paths": CREDENTIALS_MOUNT,
        },
        "template": {
            "pod": {
                "metadata": {"labels": {"app.kubernetes.io/name": network.KAFKA_CONNECT_APP}},
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "volumes": [
                    {
                        "name": CREDENTIALS_VOLUME,
                        "secret": {"secretName": CREDENTIALS_SECRET, "defaultMode": 0o440},
                    }
                ],
            },
            "connectContainer": {
                "securityContext": container_security,
                "volumeMounts": [
                    {"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_MOUNT, "readOnly": True}
                ],
            },
        },
    }
    if ca_secret is not None:
        spec["tls"] = {"trustedCertificates": [{"secretName": ca_secret, "certificate": CA_KEY}]}
    resources = connect.resources.as_dict()
    if resources:
        spec["resources"] = resources
    if connect.heap is not None:
        # A fixed heap (cdc.connect.heap), which the memory request and limit hold with the non-heap
        # Connect measurably needs (infra/config/cdc.py checks); unset, Strimzi takes 75% of the limit.
        spec["jvmOptions"] = {"-Xms": connect.heap, "-Xmx": connect.heap}
    return spec


@dataclass(frozen=True, kw_only=True)
class KafkaConnectArgs:
    connect: ConnectConfig
    kafka: KafkaConfig
    source: CdcSource
    # Where Connect runs: the jobs' namespace, which the User Operator and the cluster operator watch.
    namespace: str
    # The database: where Connect reaches it, its login and password (a Pulumi secret), and the peer its
    # NetworkPolicy admits.
    database_host: str
    database_port: int
    database_user: str
    password: pulumi.Input[str]
    database_peer: network.DatabasePeer
    # The Kafka cluster CA Secret in `namespace` (kafka.clientTls), None for the plain SCRAM listener.
    ca_secret: str | None = None
    # The KafkaTopics of the stack: the internal and changelog topics must be among them.
    stack_topics: tuple[str, ...] = ()
    # The Kafka resource (KafkaCluster.kafka): the heartbeat topic and the user are created once it exists.
    kafka_resource: pulumi.Resource | None = None
    # Where Prometheus runs (it scrapes Connect's metrics port).
    monitoring_namespace: str = "monitoring"

    def __post_init__(self) -> None:
        needed = [*self.source.connect.internal_topics, *self.source.topics]
        missing = [topic for topic in needed if topic not in self.stack_topics]
        if missing:
            raise ConfigError(
                f"{setting('topics')}: change data capture needs topic {missing[0]}, which the stack does "
                "not create (pipeline.yaml sources.cdc)"
            )


class KafkaConnect(pulumi.ComponentResource):
    """Strimzi KafkaConnect + the Debezium KafkaConnector, with their KafkaUser, heartbeat topic, database
    credentials and NetworkPolicies."""

    connect: kubernetes.apiextensions.CustomResource
    connector: kubernetes.apiextensions.CustomResource
    user: KafkaUserSpec
    config: dict[str, str]

    def __init__(self, name: str, args: KafkaConnectArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("streamstack:cdc:KafkaConnect", name, None, opts)
        kafka = args.kafka
        self.config = connector_config(
            args.source, hostname=args.database_host, port=args.database_port, user=args.database_user
        )
        heartbeats = heartbeat_topics(self.config)
        self.user = kafka_connect_user(CONNECT_USER, args.source, heartbeats)
        cluster_label = {"strimzi.io/cluster": kafka.cluster_name}
        after_kafka = [args.kafka_resource] if args.kafka_resource is not None else []

        policies = network_policies(
            self,
            name,
            network.kafka_connect_policies(
                kafka, args.namespace, CONNECT_NAME, args.database_peer, args.monitoring_namespace
            ),
        )
        secret = kubernetes.core.v1.Secret(
            f"{name}-credentials",
            metadata=metadata(CREDENTIALS_SECRET, args.namespace),
            type="Opaque",
            string_data={PASSWORD_KEY: args.password},
            opts=child(self),
        )
        metrics = kubernetes.core.v1.ConfigMap(
            f"{name}-metrics-config",
            metadata=metadata(METRICS_CONFIG_MAP, args.namespace),
            data={METRICS_KEY: yaml.safe_dump(METRICS_RULES, sort_keys=False)},
            opts=child(self),
        )
        topics = [
            kubernetes.apiextensions.CustomResource(
                f"{name}-topic-{kubernetes_name(topic)}",
                api_version=API_VERSION,
                kind="KafkaTopic",
                metadata=metadata(kubernetes_name(topic), kafka.namespace, cluster_label, {WAIT_FOR: READY}),
                spec={
                    "topicName": topic,
                    "partitions": 1,
                    "replicas": kafka.replication_factor,
                    "config": {
                        "cleanup.policy": "delete",
                        "retention.ms": HEARTBEAT_RETENTION_MS,
                        "min.insync.replicas": kafka.min_insync_replicas,
                    },
                },
                opts=child(self, after_kafka),
            )
            for topic in heartbeats
        ]
        user = kubernetes.apiextensions.CustomResource(
            f"{name}-user-{CONNECT_USER}",
            api_version=API_VERSION,
            kind="KafkaUser",
            metadata=metadata(CONNECT_USER, args.namespace, cluster_label, {WAIT_FOR: READY}),
            spec=user_spec(self.user),
            opts=child(self, [*after_kafka, *topics]),
        )
        self.connect = kubernetes.apiextensions.CustomResource(
            f"{name}-connect",
            api_version=API_VERSION,
            kind="KafkaConnect",
            metadata=metadata(
                CONNECT_NAME, args.namespace, annotations={USE_CONNECTOR_RESOURCES: "true", WAIT_FOR: READY}
            ),
            spec=connect_spec(args.connect, kafka, args.source, self.user, args.ca_secret),
            opts=child(
                self,
                [*policies, secret, metrics, user],
                custom_timeouts=pulumi.CustomTimeouts(
                    create=CONNECT_READY_TIMEOUT, update=CONNECT_READY_TIMEOUT
                ),
            ),
        )
        self.connector = kubernetes.apiextensions.CustomResource(
            f"{name}-connector",
            api_version=API_VERSION,
            kind="KafkaConnector",
            metadata=metadata(
                args.source.connector_name,
                args.namespace,
                {"strimzi.io/cluster": CONNECT_NAME},
                {WAIT_FOR: READY},
            ),
            spec=cast(Any, connector_spec(self.config)),
            opts=child(self, [self.connect]),
        )
        kubernetes.apiextensions.CustomResource(
            f"{name}-podmonitor",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata=metadata(f"{CONNECT_NAME}-connect", args.namespace),
            spec={
                "selector": {
                    "matchLabels": {"strimzi.io/cluster": CONNECT_NAME, "strimzi.io/kind": "KafkaConnect"}
                },
                "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"}],
            },
            opts=child(self, [self.connect]),
        )
        self.register_outputs({"connect": CONNECT_NAME, "connector": args.source.connector_name})
