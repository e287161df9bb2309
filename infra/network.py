"""NetworkPolicies of the platform namespaces: deny everything, then allow only the flows the pipeline needs.

Each platform namespace (Kafka, the jobs, monitoring, the spark-operator) gets a default deny for ingress and
egress, egress to the cluster DNS for every pod, and the flows of the pods the platform runs there:

- kafka: the Strimzi operator and entity operator -> the Kubernetes API; the operator -> the Kafka pods
  (control plane 9090, replication 9091, Kafka agent 8443); the entity operator -> replication 9091; Kafka
  pods <-> Kafka pods (KRaft controllers 9090, replication 9091); the pipeline's clients in the jobs'
  namespace (streaming jobs, the lag exporter, load generators) -> the client listeners (9092, 9093);
  Prometheus -> the Kafka metrics port (9404). The peers mirror those of Strimzi's own generated policy.
- jobs: the deny and DNS only; each job and the lag exporter bring their own policies in their charts
  (charts/*/templates/networkpolicy.yaml), load generators get one from the KafkaCluster component.
- change data capture (`streamstack:cdc`): Kafka Connect in the jobs' namespace -> the client listeners and
  -> PostgreSQL (in-cluster pods or `cdc.database.external.cidrs`); the Strimzi operator and Connect itself ->
  Connect's REST API (8083); the in-cluster database's namespace admits Connect on 5432 and, with load
  generators, the application workload that writes the tables (jobs.producers.cdc_workload); nothing else.
- spark-operator: the controller -> the Kubernetes API (it submits drivers and watches their pods);
  Prometheus -> its metrics port. The mutating webhook is off, so nothing calls into the namespace.
- monitoring: the pods that watch Kubernetes -> its API (Prometheus' service discovery, the operator and the
  chart's admission-webhook jobs, Grafana's sidecars, kube-state-metrics); Prometheus -> the metrics ports of
  every namespace
  and of the nodes; Grafana -> Prometheus and Alertmanager; Prometheus -> the metrics ports of the monitoring
  pods; the API server -> the operator's admission webhook (10250); Alertmanager -> its notifiers
  (`alerting.notifierCidrs` on `alerting.notifierPorts`: Slack, PagerDuty, webhooks).

Pods on the host network (node-exporter, the kubelet) are outside NetworkPolicy; Prometheus reaches them
on the addresses of the stack setting `cluster.nodeCidrs`. The Kubernetes API is reached on its endpoint
addresses (NetworkPolicies see the endpoints, not the Service IP): only those of `cluster.apiServerCidrs`,
which are also where the API server calls the operator's webhook from. No rule names a catch-all address
block: with an empty setting there is no rule at all (an empty `to`/`from` would allow every address).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.config import KafkaConfig

NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every namespace
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}  # CoreDNS on kind, kubeadm and the managed clusters
DNS_PORT = 53
API_SERVER_PORTS = (443, 6443)  # 443 behind managed control planes, 6443 on kind and kubeadm

# Strimzi 1.2.0 (KafkaCluster.java): control plane, replication and Kafka agent ports; the Strimzi metrics
# reporter's port; the client listeners this stack defines (KafkaCluster component).
KAFKA_CONTROLPLANE_PORT = 9090
KAFKA_REPLICATION_PORT = 9091
KAFKA_AGENT_PORT = 8443
KAFKA_METRICS_PORT = 9404
STRIMZI_OPERATOR_POD_LABELS = {"name": "strimzi-cluster-operator", "strimzi.io/kind": "cluster-operator"}

# The `app.kubernetes.io/name` of the pods that are Kafka clients in the jobs' namespace: the streaming-job
# chart's driver and executors, the lag-exporter chart's pod, and load generators (jobs/producers).
STREAMING_JOB_APP = "streaming-job"
LAG_EXPORTER_APP = "lag-exporter"
LOAD_GENERATOR_APP = "load-generator"
LOAD_GENERATOR_POD_LABELS = {
    "app.kubernetes.io/name": LOAD_GENERATOR_APP,
    "app.kubernetes.io/part-of": "streamstack",
}
# Kafka Connect (change data capture, infra/components/kafka_connect.py): Strimzi's
# `app.kubernetes.io/name` of the pods of a KafkaConnect, which its pod template also sets explicitly.
KAFKA_CONNECT_APP = "kafka-connect"
KAFKA_CLIENT_APPS = (STREAMING_JOB_APP, LAG_EXPORTER_APP, LOAD_GENERATOR_APP, KAFKA_CONNECT_APP)
# The Connect REST API (Strimzi's operator manages connectors through it; workers forward to the leader) and
# PostgreSQL's port (the in-cluster database, infra/components/postgres.py).
KAFKA_CONNECT_REST_PORT = 8083
POSTGRES_PORT = 5432
POSTGRES_POD_LABELS = {"app.kubernetes.io/name": "postgres", "app.kubernetes.io/component": "cdc-database"}
# The lag exporter's pods (charts/lag-exporter's selector labels; the release is named after the app), which
# read the CDC replication slot from PostgreSQL.
LAG_EXPORTER_POD_LABELS = {
    "app.kubernetes.io/name": LAG_EXPORTER_APP,
    "app.kubernetes.io/instance": LAG_EXPORTER_APP,
}

# kube-prometheus-stack 88.5.3: labels the Prometheus Operator puts on the Prometheus and Alertmanager pods,
# the grafana and kube-state-metrics sub-charts' pod labels, the operator's pod label.
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}
ALERTMANAGER_POD_LABELS = {"app.kubernetes.io/name": "alertmanager"}
GRAFANA_POD_LABELS = {"app.kubernetes.io/name": "grafana"}
KUBE_STATE_METRICS_POD_LABELS = {"app.kubernetes.io/name": "kube-state-metrics"}
PROMETHEUS_OPERATOR_POD_LABELS = {"app.kubernetes.io/component": "prometheus-operator"}
# The pods of kube-prometheus-stack that call the Kubernetes API: by name (Prometheus' service discovery,
# Grafana's dashboard sidecar, kube-state-metrics) and by component (the operator, its admission-webhook
# certificate jobs, which carry app.kubernetes.io/component prometheus-operator-webhook).
API_CLIENT_APPS = ("prometheus", "grafana", "kube-state-metrics")
API_CLIENT_COMPONENTS = ("prometheus-operator", "prometheus-operator-webhook")
# Their policies (egress to the API server), each with the label and values that select its pods.
API_CLIENT_POLICIES = {
    "kube-api-clients": ("app.kubernetes.io/name", API_CLIENT_APPS),
    "prometheus-operator-kube-api": ("app.kubernetes.io/component", API_CLIENT_COMPONENTS),
}
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
ALERTMANAGER_MESH_PORT = 9094
GRAFANA_PORT = 3000
CONFIG_RELOADER_PORT = 8080
KUBE_STATE_METRICS_PORTS = (8080, 8081)
OPERATOR_WEBHOOK_PORT = 10250  # the operator's https port: admission webhook and metrics
# Ports Prometheus scrapes on pods (besides the jobs' and the exporter's own): Kafka, the spark-operator and
# kube-state-metrics/config reloaders (8080/8081), Grafana, Prometheus, Alertmanager, the operator, CoreDNS.
PLATFORM_SCRAPE_PORTS = (
    KAFKA_METRICS_PORT,
    *KUBE_STATE_METRICS_PORTS,
    GRAFANA_PORT,
    PROMETHEUS_PORT,
    ALERTMANAGER_PORT,
    OPERATOR_WEBHOOK_PORT,
    9153,  # CoreDNS
)
# Targets on the nodes' own addresses (cluster.nodeCidrs): the kubelet (and cAdvisor), node-exporter. The API
# server is scraped on its endpoint addresses (cluster.apiServerCidrs, the kube-api-clients policy).
NODE_SCRAPE_PORTS = (10250, 9100)

SPARK_OPERATOR_POD_LABELS = {
    "app.kubernetes.io/name": "spark-operator",
    "app.kubernetes.io/component": "controller",
}
SPARK_OPERATOR_METRICS_PORT = 8080


@dataclass(frozen=True)
class Policy:
    """One NetworkPolicy: `spec` is the Kubernetes NetworkPolicySpec."""

    name: str
    namespace: str
    spec: dict[str, Any]


@dataclass(frozen=True)
class Peers:
    """Where a workload's counterparts run, for the per-workload policies in our charts: the Kafka brokers
    (namespace, pod labels, client listener ports) and Prometheus."""

    kafka_namespace: str
    kafka_pod_labels: Mapping[str, str]
    kafka_ports: tuple[int, ...]
    monitoring_namespace: str
    api_server_cidrs: tuple[str, ...] = ()

    @classmethod
    def of(cls, kafka: KafkaConfig, monitoring_namespace: str, api_server_cidrs: Sequence[str] = ()) -> Peers:
        return cls(
            kafka.namespace,
            kafka_pod_labels(kafka),
            kafka_client_ports(kafka),
            monitoring_namespace,
            tuple(api_server_cidrs),
        )

    def chart_values(self, *, api_server: bool = False) -> dict[str, Any]:
        """The `networkPolicy` values of the streaming-job and lag-exporter charts; `api_server` for a
        workload that calls the Kubernetes API (a driver creates its executors)."""
        values = {
            "enabled": True,
            "kafka": {
                "namespace": self.kafka_namespace,
                "podLabels": dict(self.kafka_pod_labels),
                "ports": list(self.kafka_ports),
            },
            "dns": {"namespace": DNS_NAMESPACE, "podLabels": dict(DNS_POD_LABELS)},
            "prometheus": {"namespace": self.monitoring_namespace, "podLabels": dict(PROMETHEUS_POD_LABELS)},
        }
        if api_server:
            values["kubeApiServer"] = {"cidrs": list(self.api_server_cidrs), "ports": list(API_SERVER_PORTS)}
        return values


def kafka_pod_labels(kafka: KafkaConfig) -> dict[str, str]:
    """The broker and controller pods of the cluster (Strimzi's selector labels for them)."""
    return {
        "strimzi.io/cluster": kafka.cluster_name,
        "strimzi.io/kind": "Kafka",
        "strimzi.io/name": f"{kafka.cluster_name}-kafka",
    }


def entity_operator_pod_labels(kafka: KafkaConfig) -> dict[str, str]:
    return {
        "strimzi.io/cluster": kafka.cluster_name,
        "strimzi.io/name": f"{kafka.cluster_name}-entity-operator",
    }


def kafka_client_ports(kafka: KafkaConfig) -> tuple[int, int]:
    """The SCRAM listener (plain) and the SCRAM listener over TLS (KafkaCluster component)."""
    return (kafka.listener_port, kafka.listener_port + 1)


def _selector(labels: Mapping[str, str] | None) -> dict[str, Any]:
    return {"matchLabels": dict(labels)} if labels else {}


def label_in(key: str, values: Iterable[str]) -> dict[str, Any]:
    """A pod selector: the label `key` has one of `values`."""
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


def peer(namespace: str | None = None, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Pods with `labels` in `namespace` (the policy's own namespace when None; any pod when no labels)."""
    result: dict[str, Any] = {"podSelector": _selector(labels)}
    if namespace is not None:
        result["namespaceSelector"] = {"matchLabels": {NAMESPACE_LABEL: namespace}}
    return result


def any_namespace() -> dict[str, Any]:
    return {"namespaceSelector": {}}


def addresses(cidrs: Iterable[str]) -> list[dict[str, Any]]:
    return [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]


def ports(numbers: Iterable[int], protocols: Sequence[str] = ("TCP",)) -> list[dict[str, Any]]:
    return [
        {"port": number, "protocol": protocol} for number in sorted(set(numbers)) for protocol in protocols
    ]


def rule(peers: list[dict[str, Any]], port_numbers: Iterable[int], key: str) -> dict[str, Any]:
    return {key: peers, "ports": ports(port_numbers)}


def policy(
    name: str,
    namespace: str,
    pod_labels: Mapping[str, str] | None,
    *,
    ingress: list[dict[str, Any]] | None = None,
    egress: list[dict[str, Any]] | None = None,
    pod_selector: dict[str, Any] | None = None,
) -> Policy:
    """Allow rules for the pods with `pod_labels` (or `pod_selector`); only the directions given are listed
    in policyTypes."""
    selector = pod_selector if pod_selector is not None else _selector(pod_labels)
    spec: dict[str, Any] = {"podSelector": selector, "policyTypes": []}
    if ingress is not None:
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = ingress
    if egress is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = egress
    return Policy(name, namespace, spec)


def default_deny(namespace: str) -> Policy:
    """No pod of the namespace accepts or opens a connection unless another policy allows it."""
    return Policy("default-deny", namespace, {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})


def dns_egress(namespace: str) -> Policy:
    dns = {"to": [peer(DNS_NAMESPACE, DNS_POD_LABELS)], "ports": ports([DNS_PORT], ("UDP", "TCP"))}
    return policy("allow-dns", namespace, None, egress=[dns])


def address_rules(cidrs: Sequence[str], port_numbers: Iterable[int], key: str) -> list[dict[str, Any]]:
    """A rule to or from the address blocks `cidrs` on the ports; none without addresses (an empty `to` or
    `from` would allow every address)."""
    return [rule(addresses(cidrs), port_numbers, key)] if cidrs else []


def api_server_egress(api_server_cidrs: Sequence[str]) -> list[dict[str, Any]]:
    """Egress to the API server's endpoint addresses; none without them."""
    return address_rules(api_server_cidrs, API_SERVER_PORTS, "to")


def baseline(namespace: str) -> list[Policy]:
    """What every platform namespace starts from: deny all, allow DNS."""
    return [default_deny(namespace), dns_egress(namespace)]


def kafka_client_peers(clients_namespace: str) -> list[dict[str, Any]]:
    """Who may reach the client listeners: the pipeline's Kafka clients in their namespace. Our policy and
    the one Strimzi generates per listener (the listener's `networkPolicyPeers`) both use it: policies add
    up, so a listener without peers would be open to every namespace whatever ours says."""
    return [
        {
            "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: clients_namespace}},
            "podSelector": label_in("app.kubernetes.io/name", KAFKA_CLIENT_APPS),
        }
    ]


def kafka_policies(
    kafka: KafkaConfig, clients_namespace: str, monitoring_namespace: str, api_server_cidrs: Sequence[str]
) -> list[Policy]:
    namespace = kafka.namespace
    brokers = kafka_pod_labels(kafka)
    entity_operator = entity_operator_pod_labels(kafka)
    internal = (KAFKA_CONTROLPLANE_PORT, KAFKA_REPLICATION_PORT)
    return [
        *baseline(namespace),
        policy(
            "strimzi-cluster-operator",
            namespace,
            STRIMZI_OPERATOR_POD_LABELS,
            egress=[
                *api_server_egress(api_server_cidrs),
                rule([peer(labels=brokers)], [*internal, KAFKA_AGENT_PORT], "to"),
            ],
        ),
        # Not `<cluster>-entity-operator`: Strimzi generates a policy of that name (ingress to the operators'
        # health ports) and would patch ours into its own, dropping these egress rules.
        policy(
            f"{kafka.cluster_name}-entity-operator-egress",
            namespace,
            entity_operator,
            egress=[
                *api_server_egress(api_server_cidrs),
                rule([peer(labels=brokers)], [KAFKA_REPLICATION_PORT], "to"),
            ],
        ),
        policy(
            f"{kafka.cluster_name}-kafka",
            namespace,
            brokers,
            ingress=[
                rule([peer(labels=brokers)], internal, "from"),
                rule([peer(labels=STRIMZI_OPERATOR_POD_LABELS)], [*internal, KAFKA_AGENT_PORT], "from"),
                rule([peer(labels=entity_operator)], [KAFKA_REPLICATION_PORT], "from"),
                rule(kafka_client_peers(clients_namespace), kafka_client_ports(kafka), "from"),
                rule([peer(monitoring_namespace, PROMETHEUS_POD_LABELS)], [KAFKA_METRICS_PORT], "from"),
            ],
            egress=[rule([peer(labels=brokers)], internal, "to")],
        ),
    ]


def load_generator_policy(kafka: KafkaConfig, namespace: str) -> Policy:
    """Load generators (pods labelled LOAD_GENERATOR_POD_LABELS) only talk to the client listeners."""
    return policy(
        LOAD_GENERATOR_APP,
        namespace,
        LOAD_GENERATOR_POD_LABELS,
        ingress=[],
        egress=[rule([peer(kafka.namespace, kafka_pod_labels(kafka))], kafka_client_ports(kafka), "to")],
    )


def spark_operator_policies(
    namespace: str, monitoring_namespace: str, api_server_cidrs: Sequence[str]
) -> list[Policy]:
    return [
        *baseline(namespace),
        policy(
            "spark-operator-controller",
            namespace,
            SPARK_OPERATOR_POD_LABELS,
            ingress=[
                rule(
                    [peer(monitoring_namespace, PROMETHEUS_POD_LABELS)], [SPARK_OPERATOR_METRICS_PORT], "from"
                )
            ],
            egress=api_server_egress(api_server_cidrs),
        ),
    ]


def jobs_namespace_policies(namespace: str) -> list[Policy]:
    return baseline(namespace)


def monitoring_policies(
    namespace: str,
    workload_scrape_ports: Iterable[int],
    api_server_cidrs: Sequence[str],
    notifier_egress: tuple[Sequence[str], Sequence[int]] = ((), ()),
    node_cidrs: Sequence[str] = (),
) -> list[Policy]:
    """`workload_scrape_ports`: the metrics ports of the jobs and the exporter, which Prometheus scrapes;
    `notifier_egress`: (CIDRs, ports) the Alertmanager delivers notifications to (`alerting.notifierCidrs`,
    `alerting.notifierPorts`; none without CIDRs)."""
    notifier_cidrs, notifier_ports = notifier_egress
    notifiers = address_rules(notifier_cidrs, notifier_ports, "to")
    prometheus = peer(labels=PROMETHEUS_POD_LABELS)
    grafana = peer(labels=GRAFANA_POD_LABELS)
    alertmanager = peer(labels=ALERTMANAGER_POD_LABELS)
    return [
        *baseline(namespace),
        *(
            policy(
                name,
                namespace,
                None,
                pod_selector=label_in(key, values),
                egress=api_server_egress(api_server_cidrs),
            )
            for name, (key, values) in API_CLIENT_POLICIES.items()
        ),
        policy(
            "prometheus",
            namespace,
            PROMETHEUS_POD_LABELS,
            ingress=[
                rule([grafana], [PROMETHEUS_PORT], "from"),
                rule([prometheus], [PROMETHEUS_PORT, CONFIG_RELOADER_PORT], "from"),
            ],
            egress=[
                rule([any_namespace()], [*PLATFORM_SCRAPE_PORTS, *workload_scrape_ports], "to"),
                *address_rules(node_cidrs, NODE_SCRAPE_PORTS, "to"),
            ],
        ),
        policy(
            "alertmanager",
            namespace,
            ALERTMANAGER_POD_LABELS,
            ingress=[
                rule([prometheus], [ALERTMANAGER_PORT, CONFIG_RELOADER_PORT], "from"),
                rule([grafana], [ALERTMANAGER_PORT], "from"),
                {"from": [alertmanager], "ports": ports([ALERTMANAGER_MESH_PORT], ("TCP", "UDP"))},
            ],
            egress=[
                {"to": [alertmanager], "ports": ports([ALERTMANAGER_MESH_PORT], ("TCP", "UDP"))},
                *notifiers,
            ],
        ),
        policy(
            "grafana",
            namespace,
            GRAFANA_POD_LABELS,
            ingress=[rule([prometheus], [GRAFANA_PORT], "from")],
            egress=[
                rule([prometheus], [PROMETHEUS_PORT], "to"),
                rule([alertmanager], [ALERTMANAGER_PORT], "to"),
            ],
        ),
        policy(
            "kube-state-metrics",
            namespace,
            KUBE_STATE_METRICS_POD_LABELS,
            ingress=[rule([prometheus], KUBE_STATE_METRICS_PORTS, "from")],
        ),
        # The API server calls the admission webhook from its endpoint addresses; Prometheus scrapes the
        # same port.
        policy(
            "prometheus-operator",
            namespace,
            PROMETHEUS_OPERATOR_POD_LABELS,
            ingress=[
                *address_rules(api_server_cidrs, [OPERATOR_WEBHOOK_PORT], "from"),
                rule([prometheus], [OPERATOR_WEBHOOK_PORT], "from"),
            ],
        ),
    ]


def kafka_connect_pod_labels(connect_name: str) -> dict[str, str]:
    """The pods of the KafkaConnect `connect_name` (Strimzi's selector labels for them)."""
    return {
        "strimzi.io/cluster": connect_name,
        "strimzi.io/kind": "KafkaConnect",
        "strimzi.io/name": f"{connect_name}-connect",
    }


@dataclass(frozen=True)
class DatabasePeer:
    """Where Kafka Connect reaches PostgreSQL: the in-cluster pods (`namespace`) or address blocks
    (`cidrs`)."""

    port: int = POSTGRES_PORT
    namespace: str | None = None
    cidrs: tuple[str, ...] = ()

    def egress(self) -> list[dict[str, Any]]:
        if self.namespace is not None:
            return [rule([peer(self.namespace, POSTGRES_POD_LABELS)], [self.port], "to")]
        return address_rules(self.cidrs, [self.port], "to")

    def chart_values(self) -> dict[str, Any]:
        """The lag-exporter chart's `networkPolicy.postgres`: the same destination as Connect's egress."""
        return {
            "namespace": self.namespace or "",
            "podLabels": dict(POSTGRES_POD_LABELS) if self.namespace is not None else {},
            "cidrs": [] if self.namespace is not None else list(self.cidrs),
            "port": self.port,
        }


def kafka_connect_policies(
    kafka: KafkaConfig, namespace: str, connect_name: str, database: DatabasePeer, monitoring_namespace: str
) -> list[Policy]:
    """Kafka Connect's flows, beside the jobs' namespace's deny: Connect -> the Kafka client listeners and ->
    PostgreSQL; Connect <-> Connect and the Strimzi operator -> Connect on the REST API (the operator's egress
    in the Kafka namespace too); Prometheus -> Connect's metrics port (Connect's and Debezium's JMX
    metrics). The brokers already admit Connect (KAFKA_CLIENT_APPS). An in-cluster database's namespace
    admits only Connect (and dev's workload) on PostgreSQL's port (`postgres_policies`).

    Not named `<connect>-connect`: Strimzi generates a policy of that name (ingress to the REST API and the
    metrics port) and would patch ours into its own."""
    connect = kafka_connect_pod_labels(connect_name)
    operator = peer(kafka.namespace, STRIMZI_OPERATOR_POD_LABELS)
    return [
        policy(
            f"{connect_name}-connect-flows",
            namespace,
            connect,
            ingress=[
                rule([operator, peer(labels=connect)], [KAFKA_CONNECT_REST_PORT], "from"),
                rule([peer(monitoring_namespace, PROMETHEUS_POD_LABELS)], [KAFKA_METRICS_PORT], "from"),
            ],
            egress=[
                rule([peer(kafka.namespace, kafka_pod_labels(kafka))], kafka_client_ports(kafka), "to"),
                rule([peer(labels=connect)], [KAFKA_CONNECT_REST_PORT], "to"),
                *database.egress(),
            ],
        ),
        policy(
            f"strimzi-cluster-operator-to-{connect_name}-connect",
            kafka.namespace,
            STRIMZI_OPERATOR_POD_LABELS,
            egress=[rule([peer(namespace, connect)], [KAFKA_CONNECT_REST_PORT], "to")],
        ),
    ]


def postgres_policies(
    namespace: str,
    connect_namespace: str,
    connect_name: str,
    workload: bool = False,
    exporter: bool = False,
) -> list[Policy]:
    """The in-cluster database's namespace: deny all, DNS, and only Kafka Connect -> PostgreSQL; with
    `workload` (dev's load generators), also the application workload that writes the tables
    (jobs.producers.cdc_workload, run as a load generator in Connect's namespace); with `exporter`, the lag
    exporter of Connect's namespace, which reads the connector's replication slot."""
    clients = [peer(connect_namespace, kafka_connect_pod_labels(connect_name))]
    if workload:
        clients.append(peer(connect_namespace, LOAD_GENERATOR_POD_LABELS))
    if exporter:
        clients.append(peer(connect_namespace, LAG_EXPORTER_POD_LABELS))
    return [
        *baseline(namespace),
        policy(
            "postgres",
            namespace,
            POSTGRES_POD_LABELS,
            ingress=[rule(clients, [POSTGRES_PORT], "from")],
            egress=[],
        ),
    ]


def workload_database_policy(namespace: str, database_namespace: str) -> Policy:
    """Load generators (the dev application workload) -> the in-cluster PostgreSQL, beside their Kafka
    egress (`load_generator_policy`): policies add up."""
    return policy(
        f"{LOAD_GENERATOR_APP}-to-postgres",
        namespace,
        LOAD_GENERATOR_POD_LABELS,
        egress=[rule([peer(database_namespace, POSTGRES_POD_LABELS)], [POSTGRES_PORT], "to")],
    )
