"""KafkaCluster: the Strimzi operator (Helm), a KRaft `Kafka` with its `KafkaNodePool`s, broker metrics for
Prometheus, the pipeline's `KafkaTopic`s and a `KafkaUser` per client.

Listeners are internal and authenticated with SCRAM-SHA-512 (`scram` on 9092 without TLS inside the cluster
network, `tls` on 9093 with it) and authorization is Kafka's `simple` ACL authorizer, so a client can only
touch what its KafkaUser allows. Users live in the jobs' namespace (the User Operator watches it) so that
Strimzi writes each user's Secret where the job and exporter pods can reference it. `pulumi up` waits until
the Kafka, every topic and every user is Ready (`pulumi.com/waitFor: condition=Ready`).

The Kafka namespace denies all traffic but the flows Kafka needs (infra/network.py: operators <-> Kafka pods,
brokers <-> controllers, the pipeline's clients -> the listeners, Prometheus -> metrics), created before the
operator so no pod starts without them. With a load generator, its user may only write the pipeline's input
topics, and pods labelled as load generators in the users' namespace may only reach the listeners.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as kubernetes

from infra import network
from infra.components.common import READY, WAIT_FOR, child, metadata, network_policies, platform_namespace
from infra.components.crds import custom_resource_definitions, load_crds
from infra.config import ConfigError, KafkaConfig, NodePool, TopicConfig, require_topic_fits, setting
from infra.kafka_access import COMMIT_LOG_TOPIC, KafkaUserSpec

STRIMZI_CHART = "oci://quay.io/strimzi-helm/strimzi-kafka-operator"
STRIMZI_CHART_NAME = "strimzi-kafka-operator"
API_VERSION = "kafka.strimzi.io/v1"
SCRAM_LISTENER = "scram"
METRICS_PORT_NAME = "tcp-prometheus"  # Strimzi's name for the metrics port of every Kafka pod
# What a cold node needs (every image pulled on first use; tests/infra/test_sizing.py): the operator's
# release (helm.v3.Release waits 300 s by default), and the Kafka resource's Ready (broker image pulled, KRaft
# node formatted and started, entity operator running).
OPERATOR_TIMEOUT_S = 900
KAFKA_READY_TIMEOUT = "15m"


@dataclass(frozen=True, kw_only=True)
class KafkaClusterArgs:
    kafka: KafkaConfig
    topics: tuple[TopicConfig, ...]
    users: tuple[KafkaUserSpec, ...]
    users_namespace: str
    monitoring_namespace: str
    # The load generators' user (write-only on the pipeline's inputs); None: no load generators.
    load_generator: KafkaUserSpec | None = None
    # The Kubernetes API server's endpoint addresses (cluster.apiServerCidrs): the operators' API egress.
    api_server_cidrs: tuple[str, ...] = ()

    @property
    def all_users(self) -> tuple[KafkaUserSpec, ...]:
        return (*self.users, self.load_generator) if self.load_generator else self.users

    def __post_init__(self) -> None:
        for topic in self.topics:
            require_topic_fits(topic, self.kafka.brokers)
        known = {topic.name for topic in self.topics} | {COMMIT_LOG_TOPIC}
        for user in self.all_users:
            unknown = sorted(topic for topic in user.topics_with("Describe") if topic not in known)
            if unknown:
                raise ConfigError(
                    f"{setting('topics')}: KafkaUser {user.name} needs topic {unknown[0]}, which the stack "
                    "does not create"
                )
        names = [user.name for user in self.all_users]
        if len(set(names)) != len(names):
            raise ConfigError(f"{setting('jobs')}: two Kafka clients share a name ({', '.join(names)})")


def kafka_spec(kafka: KafkaConfig, users_namespace: str) -> dict[str, Any]:
    authentication = {"type": "scram-sha-512"}
    return {
        "kafka": {
            "version": kafka.version,
            "metadataVersion": kafka.metadata_version,
            "listeners": [
                {
                    "name": SCRAM_LISTENER,
                    "port": kafka.listener_port,
                    "type": "internal",
                    "tls": False,
                    "authentication": authentication,
                    "networkPolicyPeers": network.kafka_client_peers(users_namespace),
                },
                {
                    "name": "tls",
                    "port": network.kafka_client_ports(kafka)[1],
                    "type": "internal",
                    "tls": True,
                    "authentication": authentication,
                    "networkPolicyPeers": network.kafka_client_peers(users_namespace),
                },
            ],
            "authorization": {"type": "simple"},
            "config": {
                "offsets.topic.replication.factor": kafka.replication_factor,
                "transaction.state.log.replication.factor": kafka.replication_factor,
                "transaction.state.log.min.isr": kafka.min_insync_replicas,
                "default.replication.factor": kafka.replication_factor,
                "min.insync.replicas": kafka.min_insync_replicas,
                # Topics are KafkaTopics; a typo in a client must not create one.
                "auto.create.topics.enable": False,
            },
            "metricsConfig": {"type": "strimziMetricsReporter"},
        },
        "entityOperator": {
            "topicOperator": {},
            "userOperator": {"watchedNamespace": users_namespace},
        },
    }


def node_pool_spec(pool_config: NodePool) -> dict[str, Any]:
    volume: dict[str, Any] = {
        "id": 0,
        "type": "persistent-claim",
        "size": pool_config.storage_size,
        "kraftMetadata": "shared",
        "deleteClaim": False,
    }
    if pool_config.storage_class:
        volume["class"] = pool_config.storage_class
    spec: dict[str, Any] = {
        "replicas": pool_config.replicas,
        "roles": list(pool_config.roles),
        "storage": {"type": "jbod", "volumes": [volume]},
    }
    resources = pool_config.resources.as_dict()
    if resources:
        spec["resources"] = resources
    return spec


def topic_spec(topic: TopicConfig) -> dict[str, Any]:
    return {
        "topicName": topic.name,
        "partitions": topic.partitions,
        "replicas": topic.replicas,
        "config": dict(topic.config),
    }


def user_spec(user: KafkaUserSpec) -> dict[str, Any]:
    return {
        "authentication": {"type": "scram-sha-512"},
        "authorization": {"type": "simple", "acls": [acl.as_dict() for acl in user.acls]},
    }


class KafkaCluster(pulumi.ComponentResource):
    """Strimzi 1.2.0 and a KRaft Kafka cluster with topics and users; ready when Kafka reports Ready."""

    namespace: pulumi.Output[str]
    bootstrap_servers: pulumi.Output[str]
    kafka: kubernetes.apiextensions.CustomResource
    topics: dict[str, kubernetes.apiextensions.CustomResource]
    users: dict[str, kubernetes.apiextensions.CustomResource]
    user_secrets: dict[str, str]

    def __init__(self, name: str, args: KafkaClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("streamstack:kafka:KafkaCluster", name, None, opts)
        kafka = args.kafka
        cluster_label = {"strimzi.io/cluster": kafka.cluster_name}

        kafka_namespace, policies = platform_namespace(
            self,
            name,
            kafka.namespace,
            network.kafka_policies(
                kafka, args.users_namespace, args.monitoring_namespace, args.api_server_cidrs
            ),
        )
        if args.load_generator is not None:
            network_policies(self, name, [network.load_generator_policy(kafka, args.users_namespace)])
        # Strimzi's CRDs of the pinned chart version (infra/components/crds.py); the release skips its own.
        crds = custom_resource_definitions(
            self,
            name,
            load_crds(
                STRIMZI_CHART_NAME, kafka.operator_chart_version, setting("kafka.operatorChartVersion")
            ),
        )
        operator = kubernetes.helm.v3.Release(
            f"{name}-strimzi",
            kubernetes.helm.v3.ReleaseArgs(
                name="strimzi",
                chart=STRIMZI_CHART,
                version=kafka.operator_chart_version,
                namespace=kafka_namespace.metadata.name,
                values={
                    # The operator (and so the User Operator it deploys) also manages the jobs' namespace.
                    "watchNamespaces": [args.users_namespace],
                    "defaultImageTag": kafka.operator_chart_version,
                    # Kafka, controller and entity-operator pods get security contexts that pass the
                    # namespace's Pod Security "restricted" level.
                    "extraEnvs": [{"name": "STRIMZI_POD_SECURITY_PROVIDER_CLASS", "value": "restricted"}],
                },
                cleanup_on_fail=True,
                timeout=OPERATOR_TIMEOUT_S,
                skip_crds=True,
            ),
            opts=child(self, [kafka_namespace, *policies, *crds]),
        )

        pools = [
            kubernetes.apiextensions.CustomResource(
                f"{name}-pool-{pool.name}",
                api_version=API_VERSION,
                kind="KafkaNodePool",
                metadata=metadata(pool.name, kafka.namespace, cluster_label),
                spec=node_pool_spec(pool),
                opts=child(self, [operator]),
            )
            for pool in kafka.node_pools
        ]
        self.kafka = kubernetes.apiextensions.CustomResource(
            f"{name}-kafka",
            api_version=API_VERSION,
            kind="Kafka",
            metadata=metadata(kafka.cluster_name, kafka.namespace, annotations={WAIT_FOR: READY}),
            spec=kafka_spec(kafka, args.users_namespace),
            opts=child(
                self,
                [operator, *pools],
                custom_timeouts=pulumi.CustomTimeouts(create=KAFKA_READY_TIMEOUT, update=KAFKA_READY_TIMEOUT),
            ),
        )
        kubernetes.apiextensions.CustomResource(
            f"{name}-metrics",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata=metadata(f"{kafka.cluster_name}-kafka", kafka.namespace),
            spec={
                "selector": {"matchLabels": {**cluster_label, "strimzi.io/kind": "Kafka"}},
                "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": "/metrics", "interval": "30s"}],
            },
            opts=child(self, [self.kafka]),
        )

        def awaited(
            kind: str, object_name: str, object_namespace: str, spec: dict[str, Any]
        ) -> kubernetes.apiextensions.CustomResource:
            """A KafkaTopic or KafkaUser: created once the Kafka exists, awaited until Ready."""
            return kubernetes.apiextensions.CustomResource(
                f"{name}-{kind.removeprefix('Kafka').lower()}-{object_name}",
                api_version=API_VERSION,
                kind=kind,
                metadata=metadata(object_name, object_namespace, cluster_label, {WAIT_FOR: READY}),
                spec=spec,
                opts=child(self, [self.kafka]),
            )

        self.topics = {
            topic.name: awaited("KafkaTopic", topic.name, kafka.namespace, topic_spec(topic))
            for topic in args.topics
        }
        self.users = {
            user.name: awaited("KafkaUser", user.name, args.users_namespace, user_spec(user))
            for user in args.all_users
        }
        self.user_secrets = {user.name: user.secret_name for user in args.all_users}
        self.namespace = kafka_namespace.metadata.name
        self.bootstrap_servers = pulumi.Output.from_input(kafka.bootstrap_servers)
        self.register_outputs(
            {
                "namespace": self.namespace,
                "bootstrap_servers": self.bootstrap_servers,
                "user_secrets": self.user_secrets,
            }
        )
