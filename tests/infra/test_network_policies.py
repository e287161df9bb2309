"""The stack's NetworkPolicies, evaluated: every platform namespace denies by default, and the flows the
pipeline needs, and only those, are allowed.

Each stack is rendered (`streamstack render`: the platform policies of the components plus the jobs' and
the exporter's chart policies) and a small evaluator applies Kubernetes NetworkPolicy semantics to pods with
the labels they really carry: the jobs' and the exporter's from the rendered charts, the others as their
operators and charts set them (cited below, written out here rather than taken from infra/network.py, so a
wrong selector there fails).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from streamstack.render import RenderedStack, render_stack
from tests.infra.conftest import load_config

PLATFORM_NAMESPACES = ("kafka", "streaming", "monitoring", "spark-operator")
# The API server's endpoint address and a node's address in each stack: on kind (dev) the one node, the
# control plane, on Docker's `kind` network; in prod addresses inside its configured ranges.
API_SERVER_IPS = {"dev": "172.18.0.2", "prod": "10.0.0.5"}
NODE_IPS = {"dev": "172.18.0.2", "prod": "10.0.17.20"}
INTERNET_IP = "93.184.216.34"
OTHER_PRIVATE_IP = "172.18.0.5"  # another container on kind's Docker network, e.g. a second kind cluster


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace and labels) or, with namespace None, an address outside the pod network."""

    name: str
    namespace: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str = "10.244.0.10"


def api_server(stack: RenderedStack) -> Endpoint:
    return Endpoint("kube-apiserver", None, ip=API_SERVER_IPS[stack.stack])


def node(stack: RenderedStack) -> Endpoint:
    return Endpoint("node", None, ip=NODE_IPS[stack.stack])


# Labels set by the operators and upstream charts (not by this repository):
# Strimzi 1.2.0 KafkaCluster.java (strimziSelectorLabels + pool labels) and the entity operator's name label;
KAFKA_BROKER = Endpoint(
    "kafka-broker",
    "kafka",
    {
        "strimzi.io/cluster": "streamstack",
        "strimzi.io/kind": "Kafka",
        "strimzi.io/name": "streamstack-kafka",
        "strimzi.io/pool-name": "dual-role",
        "strimzi.io/broker-role": "true",
        "strimzi.io/controller-role": "true",
    },
)
ENTITY_OPERATOR = Endpoint(
    "entity-operator",
    "kafka",
    {
        "strimzi.io/cluster": "streamstack",
        "strimzi.io/kind": "Kafka",
        "strimzi.io/name": "streamstack-entity-operator",
    },
)
# the strimzi-kafka-operator chart's Deployment template (060-Deployment-strimzi-cluster-operator.yaml);
STRIMZI_OPERATOR = Endpoint(
    "strimzi-operator", "kafka", {"name": "strimzi-cluster-operator", "strimzi.io/kind": "cluster-operator"}
)
# spark-operator 2.5.2's controller selector labels (spark-operator.controller.selectorLabels);
SPARK_OPERATOR = Endpoint(
    "spark-operator",
    "spark-operator",
    {
        "app.kubernetes.io/name": "spark-operator",
        "app.kubernetes.io/instance": "spark-operator",
        "app.kubernetes.io/component": "controller",
    },
)
# kube-prometheus-stack 88.5.3: the Prometheus Operator's labels on Prometheus and Alertmanager pods, the
# chart's prometheus-operator labels, the grafana and kube-state-metrics sub-charts' selector labels;
PROMETHEUS = Endpoint(
    "prometheus",
    "monitoring",
    {
        "app.kubernetes.io/name": "prometheus",
        "app.kubernetes.io/instance": "kube-prometheus-stack-prometheus",
        "prometheus": "kube-prometheus-stack-prometheus",
    },
)
ALERTMANAGER = Endpoint(
    "alertmanager",
    "monitoring",
    {"app.kubernetes.io/name": "alertmanager", "alertmanager": "kube-prometheus-stack-alertmanager"},
)
GRAFANA = Endpoint(
    "grafana",
    "monitoring",
    {"app.kubernetes.io/name": "grafana", "app.kubernetes.io/instance": "kube-prometheus-stack"},
)
KUBE_STATE_METRICS = Endpoint(
    "kube-state-metrics",
    "monitoring",
    {"app.kubernetes.io/name": "kube-state-metrics", "app.kubernetes.io/instance": "kube-prometheus-stack"},
)
PROMETHEUS_OPERATOR = Endpoint(
    "prometheus-operator",
    "monitoring",
    {
        "app": "kube-prometheus-stack-operator",
        "app.kubernetes.io/name": "kube-prometheus-stack-prometheus-operator",
        "app.kubernetes.io/component": "prometheus-operator",
        "release": "kube-prometheus-stack",
    },
)
# CoreDNS on kind and kubeadm.
COREDNS = Endpoint("coredns", "kube-system", {"k8s-app": "kube-dns"})
# The load generators the kind workflow starts (.github/workflows/kind.yaml; see tests/test_workflow.py).
LOAD_GENERATOR = Endpoint(
    "load-generator",
    "streaming",
    {"app.kubernetes.io/name": "load-generator", "app.kubernetes.io/part-of": "streamstack"},
)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions must all hold; an empty selector selects all."""
    if selector is None:
        return True
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        holds = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not holds:
            return False
    return True


def peer_matches(item: Mapping[str, Any], policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in item:
        address = ipaddress.ip_address(other.ip)
        block = item["ipBlock"]
        excepted = any(address in ipaddress.ip_network(cidr) for cidr in block.get("except") or [])
        return address in ipaddress.ip_network(block["cidr"]) and not excepted
    if other.namespace is None:
        return False  # pod and namespace selectors only ever match pods
    namespace_selector = item.get("namespaceSelector")
    if namespace_selector is None:
        namespace_ok = other.namespace == policy_namespace
    else:
        namespace_ok = selects(namespace_selector, {"kubernetes.io/metadata.name": other.namespace})
    return namespace_ok and selects(item.get("podSelector"), other.labels)


def port_matches(rule_ports: Sequence[Mapping[str, Any]] | None, port: int, protocol: str) -> bool:
    if not rule_ports:
        return True
    return any(item.get("port") == port and item.get("protocol", "TCP") == protocol for item in rule_ports)


def direction_allows(
    policies: Sequence[Mapping[str, Any]],
    subject: Endpoint,
    other: Endpoint,
    port: int,
    protocol: str,
    *,
    egress: bool,
) -> bool:
    if subject.namespace is None:
        return True  # outside the pod network: no NetworkPolicy applies
    direction, rules_key, peers_key = ("Egress", "egress", "to") if egress else ("Ingress", "ingress", "from")
    selecting = [
        policy
        for policy in policies
        if policy["metadata"]["namespace"] == subject.namespace
        and selects(policy["spec"]["podSelector"], subject.labels)
        and direction in policy["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            peer_ok = not peers or any(
                peer_matches(item, policy["metadata"]["namespace"], other) for item in peers
            )
            if peer_ok and port_matches(rule.get("ports"), port, protocol):
                return True
    return False


# What Strimzi 1.2.0's cluster operator generates (cluster-operator/.../model/KafkaCluster.java and
# EntityOperator.java, `generateNetworkPolicy`; NetworkPolicyUtils.java): ports and names.
STRIMZI_CONTROLPLANE_PORT, STRIMZI_REPLICATION_PORT, STRIMZI_AGENT_PORT = 9090, 9091, 8443
STRIMZI_METRICS_PORT, STRIMZI_JMX_PORT = 9404, 9999
STRIMZI_TOPIC_OPERATOR_HEALTH_PORT, STRIMZI_USER_OPERATOR_HEALTH_PORT = 8080, 8081


def strimzi_generated_policies(stack: RenderedStack) -> list[dict[str, Any]]:
    """The NetworkPolicies Strimzi's cluster operator creates for each Kafka (with its default
    STRIMZI_NETWORK_POLICY_GENERATION=true), as KafkaCluster.generateNetworkPolicy and
    EntityOperator.generateNetworkPolicy build them from the Kafka CR. Policies add up, so they count beside
    ours.

    `<cluster>-network-policy-kafka` selects the cluster's pods (strimziSelectorLabels: cluster, name, kind)
    and admits: the control plane (9090) from the cluster's pods and the cluster operator; replication (9091)
    from the operator, the cluster's pods, the entity operator, Kafka Exporter and Cruise Control; the Kafka
    agent (8443) from the operator; each listener's port from its `networkPolicyPeers`, which Strimzi copies
    as they are (`withFrom(peers)`: none, or an empty list, is every source); the metrics port (9404, with
    any `metricsConfig`) and JMX (9999, with `jmxOptions`) from every source. The operator peer has no
    namespace selector when it runs in the Kafka's namespace (clusterOperatorNamespaceSelector), as here.
    `<cluster>-entity-operator` selects the entity operator and admits its health ports from every source."""
    policies: list[dict[str, Any]] = []
    operator = {"podSelector": {"matchLabels": {"strimzi.io/kind": "cluster-operator"}}}
    assert STRIMZI_OPERATOR.labels["strimzi.io/kind"] == "cluster-operator"

    def named(name: str) -> dict[str, Any]:
        return {"podSelector": {"matchLabels": {"strimzi.io/name": name}}}

    def ingress_rule(port: int, peers: list[dict[str, Any]] | None) -> dict[str, Any]:
        rule: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"}]}
        if peers is not None:
            rule["from"] = peers
        return rule

    def generated(name: str, namespace: str, selector: dict[str, str], rules: list[dict[str, Any]]) -> None:
        policies.append(
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"podSelector": {"matchLabels": selector}, "ingress": rules},
            }
        )

    for kafka in stack.find("Kafka"):
        cluster, namespace = kafka["metadata"]["name"], kafka["metadata"]["namespace"]
        assert namespace == STRIMZI_OPERATOR.namespace, "the operator's peer would need a namespace selector"
        spec = kafka["spec"]["kafka"]
        selector = {
            "strimzi.io/cluster": cluster,
            "strimzi.io/name": f"{cluster}-kafka",
            "strimzi.io/kind": "Kafka",
        }
        brokers = {"podSelector": {"matchLabels": selector}}
        rules = [
            ingress_rule(STRIMZI_CONTROLPLANE_PORT, [brokers, operator]),
            ingress_rule(
                STRIMZI_REPLICATION_PORT,
                [
                    operator,
                    brokers,
                    named(f"{cluster}-entity-operator"),
                    named(f"{cluster}-kafka-exporter"),
                    named(f"{cluster}-cruise-control"),
                ],
            ),
            ingress_rule(STRIMZI_AGENT_PORT, [operator]),
            *(
                ingress_rule(listener["port"], listener.get("networkPolicyPeers"))
                for listener in spec["listeners"]
            ),
        ]
        if spec.get("metricsConfig"):
            rules.append(ingress_rule(STRIMZI_METRICS_PORT, []))
        if spec.get("jmxOptions") is not None:
            rules.append(ingress_rule(STRIMZI_JMX_PORT, []))
        generated(f"{cluster}-network-policy-kafka", namespace, selector, rules)
        entity_operator = kafka["spec"].get("entityOperator")
        if entity_operator is not None:
            health = [
                ingress_rule(port, [])
                for key, port in (
                    ("topicOperator", STRIMZI_TOPIC_OPERATOR_HEALTH_PORT),
                    ("userOperator", STRIMZI_USER_OPERATOR_HEALTH_PORT),
                )
                if entity_operator.get(key) is not None
            ]
            eo_selector = {
                "strimzi.io/cluster": cluster,
                "strimzi.io/name": f"{cluster}-entity-operator",
                "strimzi.io/kind": "Kafka",
            }
            generated(f"{cluster}-entity-operator", namespace, eo_selector, health)
    return policies


def allowed(
    stack: RenderedStack, source: Endpoint, target: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    policies = [*stack.find("NetworkPolicy"), *strimzi_generated_policies(stack)]
    return direction_allows(policies, source, target, port, protocol, egress=True) and direction_allows(
        policies, target, source, port, protocol, egress=False
    )


def spark_pods(stack: RenderedStack, job: str) -> tuple[Endpoint, Endpoint]:
    """The driver and an executor of a job, labelled as Spark labels them: the chart's pod template labels
    plus spark-role."""
    (application,) = stack.find("SparkApplication", job)
    namespace = application["metadata"]["namespace"]
    pods: list[Endpoint] = []
    for role in ("driver", "executor"):
        labels = {**application["spec"][role]["template"]["metadata"]["labels"], "spark-role": role}
        pods.append(Endpoint(f"{job}-{role}", namespace, labels, ip=f"10.244.1.{len(pods) + 1}"))
    return pods[0], pods[1]


def exporter_pod(stack: RenderedStack) -> Endpoint:
    (deployment,) = stack.find("Deployment", "lag-exporter")
    return Endpoint(
        "lag-exporter",
        deployment["metadata"]["namespace"],
        deployment["spec"]["template"]["metadata"]["labels"],
    )


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack(request: pytest.FixtureRequest) -> RenderedStack:
    return render_stack(request.param)


def test_every_platform_namespace_denies_all_traffic_by_default(stack: RenderedStack) -> None:
    for namespace in PLATFORM_NAMESPACES:
        denies = [
            policy
            for policy in stack.find("NetworkPolicy")
            if policy["metadata"]["namespace"] == namespace
            and policy["spec"]["podSelector"] == {}
            and sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
            and not policy["spec"].get("ingress")
            and not policy["spec"].get("egress")
        ]
        assert len(denies) == 1, namespace
        stranger = Endpoint("stranger", namespace, {"app": "debug-shell"})
        assert not allowed(stack, stranger, KAFKA_BROKER, 9092)
        assert not allowed(stack, stranger, api_server(stack), 6443)
        assert not allowed(stack, PROMETHEUS, stranger, 8080)
        # DNS works everywhere.
        assert allowed(stack, stranger, COREDNS, 53, "UDP") and allowed(stack, stranger, COREDNS, 53, "TCP")


def test_the_pipelines_clients_reach_the_kafka_listeners_and_nothing_internal(stack: RenderedStack) -> None:
    clients = [exporter_pod(stack)]
    for job in stack.outputs["jobs"]:
        clients += spark_pods(stack, job)
    if stack.stack == "dev":
        clients.append(LOAD_GENERATOR)
    for client in clients:
        for port in (9092, 9093):
            assert allowed(stack, client, KAFKA_BROKER, port), (client.name, port)
        for internal in (9090, 9091, 8443):
            assert not allowed(stack, client, KAFKA_BROKER, internal), (client.name, internal)
        assert allowed(stack, client, COREDNS, 53, "UDP")
    # Pods elsewhere do not reach the listeners, not even with a client's labels (Strimzi's own policy
    # included), and Kafka does not call the clients.
    assert strimzi_generated_policies(stack)
    for outsider in (
        Endpoint("outsider", "default", LOAD_GENERATOR.labels),
        Endpoint("other-team", "analytics", {"app": "kafka-client"}),
        Endpoint("stranger", "streaming", {"app": "debug-shell"}),
    ):
        for port in (9092, 9093):
            assert not allowed(stack, outsider, KAFKA_BROKER, port), (outsider.name, port)
    driver, executor = spark_pods(stack, stack.outputs["jobs"][0])
    assert not allowed(stack, KAFKA_BROKER, driver, 9400)
    # Within a job, driver and executors talk on the ports Spark picks.
    assert allowed(stack, executor, driver, 7078) and allowed(stack, driver, executor, 7079)


def test_strimzi_runs_its_cluster(stack: RenderedStack) -> None:
    for port in (9090, 9091):
        assert allowed(stack, KAFKA_BROKER, KAFKA_BROKER, port)  # controllers, replication
    for port in (9090, 9091, 8443):
        assert allowed(stack, STRIMZI_OPERATOR, KAFKA_BROKER, port)
    assert allowed(stack, ENTITY_OPERATOR, KAFKA_BROKER, 9091)
    assert not allowed(stack, ENTITY_OPERATOR, KAFKA_BROKER, 8443)
    for operator in (STRIMZI_OPERATOR, ENTITY_OPERATOR):
        for port in (6443, 443):
            assert allowed(stack, operator, api_server(stack), port), (operator.name, port)
    assert not allowed(stack, KAFKA_BROKER, api_server(stack), 6443)


def test_only_pods_that_drive_kubernetes_reach_the_api(stack: RenderedStack) -> None:
    driver, executor = spark_pods(stack, stack.outputs["jobs"][0])
    callers = [driver, SPARK_OPERATOR, PROMETHEUS_OPERATOR, PROMETHEUS, GRAFANA, KUBE_STATE_METRICS]
    for caller in callers:
        assert allowed(stack, caller, api_server(stack), 6443), caller.name
    for other in (executor, exporter_pod(stack), LOAD_GENERATOR):
        assert not allowed(stack, other, api_server(stack), 6443), other.name
    assert not allowed(stack, ALERTMANAGER, api_server(stack), 6443)
    # The chart's admission-webhook certificate jobs patch the webhook configuration through the API.
    webhook_job = Endpoint(
        "admission-create",
        "monitoring",
        {
            "app": "kube-prometheus-stack-admission-create",
            "app.kubernetes.io/component": "prometheus-operator-webhook",
        },
    )
    assert allowed(stack, webhook_job, api_server(stack), 443)
    # The API server calls the Prometheus Operator's admission webhook.
    assert allowed(stack, api_server(stack), PROMETHEUS_OPERATOR, 10250)


def test_prometheus_scrapes_every_metrics_port_and_grafana_queries_it(stack: RenderedStack) -> None:
    targets: list[tuple[Endpoint, int]] = [
        (exporter_pod(stack), 9308),
        (KAFKA_BROKER, 9404),
        (SPARK_OPERATOR, 8080),
        (KUBE_STATE_METRICS, 8080),
        (GRAFANA, 3000),
        (ALERTMANAGER, 9093),
        (PROMETHEUS, 9090),
        (PROMETHEUS_OPERATOR, 10250),
        (COREDNS, 9153),
        (node(stack), 10250),  # kubelet and cAdvisor
        (node(stack), 9100),  # node-exporter (host network)
        (api_server(stack), 6443),
    ]
    for job in stack.outputs["jobs"]:
        (application,) = stack.find("SparkApplication", job)
        (container,) = application["spec"]["driver"]["template"]["spec"]["containers"]
        (metrics,) = [port["containerPort"] for port in container["ports"] if port["name"] == "metrics"]
        targets.append((spark_pods(stack, job)[0], metrics))
    for target, port in targets:
        assert allowed(stack, PROMETHEUS, target, port), (target.name, port)
    # Only the metrics port: not the brokers' listeners, not the executors.
    assert not allowed(stack, PROMETHEUS, KAFKA_BROKER, 9092)
    assert not allowed(stack, PROMETHEUS, spark_pods(stack, stack.outputs["jobs"][0])[1], 9400)
    assert allowed(stack, GRAFANA, PROMETHEUS, 9090) and allowed(stack, GRAFANA, ALERTMANAGER, 9093)
    assert allowed(stack, PROMETHEUS, ALERTMANAGER, 9093)
    assert not allowed(stack, GRAFANA, KAFKA_BROKER, 9092)
    # Nobody in the jobs' namespace reaches Prometheus or Grafana.
    driver = spark_pods(stack, stack.outputs["jobs"][0])[0]
    assert not allowed(stack, driver, PROMETHEUS, 9090) and not allowed(stack, driver, GRAFANA, 3000)


def address_blocks(policies: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """Every ipBlock of the policies: (policy name, egress or ingress, CIDR, the rule's ports)."""
    return [
        (policy["metadata"]["name"], direction, item["ipBlock"]["cidr"], ports)
        for policy in policies
        for direction, peers_key in (("egress", "to"), ("ingress", "from"))
        for rule in policy["spec"].get(direction) or []
        for ports in [tuple(sorted({port["port"] for port in rule.get("ports") or []}))]
        for item in rule.get(peers_key) or []
        if "ipBlock" in item
    ]


def test_api_egress_reaches_only_the_configured_addresses(stack: RenderedStack) -> None:
    """Drivers and operators reach the API on the stack's `cluster.apiServerCidrs` and nowhere else on its
    ports; Prometheus reaches the nodes on `cluster.nodeCidrs` only; the API server, and nothing else from
    outside the pod network, calls the operator's webhook. Every rule on the API ports lists exactly the
    configured CIDRs."""
    cluster = load_config(stack.stack).cluster
    assert cluster.api_server_cidrs and cluster.node_cidrs
    driver, _ = spark_pods(stack, stack.outputs["jobs"][0])
    internet = Endpoint("internet", None, ip=INTERNET_IP)
    neighbour = Endpoint("neighbour", None, ip=OTHER_PRIVATE_IP)
    callers = (driver, STRIMZI_OPERATOR, ENTITY_OPERATOR, SPARK_OPERATOR, PROMETHEUS_OPERATOR, PROMETHEUS)
    for caller in (*callers, GRAFANA, KUBE_STATE_METRICS):
        assert allowed(stack, caller, api_server(stack), 6443), caller.name
        for port in (443, 6443, 10250, 9100):
            for outside in (internet, neighbour):
                assert not allowed(stack, caller, outside, port), (caller.name, outside.name, port)
    for port in (10250, 9100):
        assert allowed(stack, PROMETHEUS, node(stack), port)
    assert allowed(stack, api_server(stack), PROMETHEUS_OPERATOR, 10250)
    assert not allowed(stack, internet, PROMETHEUS_OPERATOR, 10250)
    blocks = address_blocks(stack.find("NetworkPolicy"))
    api_rules = [(name, cidr) for name, direction, cidr, ports in blocks if ports == (443, 6443)]
    by_policy: dict[str, list[str]] = {}
    for name, cidr in api_rules:
        by_policy.setdefault(name, []).append(cidr)
    assert by_policy
    for name, cidrs in by_policy.items():
        assert cidrs == list(cluster.api_server_cidrs), name
    node_rules = [cidr for _, direction, cidr, ports in blocks if ports == (9100, 10250)]
    assert node_rules == list(cluster.node_cidrs)


def test_no_policy_opens_a_port_to_every_address(stack: RenderedStack) -> None:
    """No rendered NetworkPolicy (the platform's and the charts') names 0.0.0.0/0, ::/0 or any other block
    of every address, in either direction. The one exception is Alertmanager's egress to its notifiers
    (`alerting.notifierCidrs`): Slack and PagerDuty are on the internet and have no fixed addresses."""
    catch_alls = [
        block
        for block in address_blocks(stack.find("NetworkPolicy"))
        if ipaddress.ip_network(block[2]).prefixlen == 0
        and not (block[0] == "alertmanager" and block[1] == "egress")
    ]
    assert catch_alls == []


def test_the_listeners_admit_only_our_client_allowlist(stack: RenderedStack) -> None:
    """Each listener's `networkPolicyPeers` (Strimzi's generated policy) is the client rule of our own Kafka
    policy, one allowlist; and no policy of ours has the name of one Strimzi generates in its namespace (the
    operator would patch ours into its own: `<cluster>-entity-operator` is Strimzi's)."""
    (kafka,) = stack.find("Kafka")
    cluster = kafka["metadata"]["name"]
    listeners = kafka["spec"]["kafka"]["listeners"]
    (ours,) = [
        policy
        for policy in stack.find("NetworkPolicy", f"{cluster}-kafka")
        if policy["metadata"]["namespace"] == kafka["metadata"]["namespace"]
    ]
    (client_rule,) = [
        rule
        for rule in ours["spec"]["ingress"]
        if {port["port"] for port in rule["ports"]} == {listener["port"] for listener in listeners}
    ]
    for listener in listeners:
        assert listener["networkPolicyPeers"] == client_rule["from"], listener["name"]
    generated = {
        (p["metadata"]["namespace"], p["metadata"]["name"]) for p in strimzi_generated_policies(stack)
    }
    rendered = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in stack.find("NetworkPolicy")}
    assert generated & rendered == set()
    # The entity operator keeps its egress with Strimzi's policy beside ours.
    assert allowed(stack, ENTITY_OPERATOR, KAFKA_BROKER, 9091)
    assert allowed(stack, ENTITY_OPERATOR, api_server(stack), 6443)
