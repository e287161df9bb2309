"""Change data capture in the cluster (issue 18, `streamstack:cdc`): the whole program on Pulumi.dev.yaml (an
in-cluster PostgreSQL) and Pulumi.prod.yaml (an external one), rendered as `streamstack render` does with the
secret `cdcDatabasePassword` set the way `pulumi config set --secret` stores it.

Every new object validates against its schema (the Strimzi CRDs 041/047 in ../shared/crds, kubernetes-validate
for the core kinds); the KafkaConnector's config is `debezium_connector_config(...)` of the catalogue; the
Connect KafkaUser's ACLs are exactly the needed set; the NetworkPolicies select the pods the stack runs; bad
settings fail naming the field."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.cdc import cdc_source, connect_worker_config, debezium_connector_config
from contracts.pipeline import load_pipeline
from infra import network
from infra.components import kafka_connect, postgres
from infra.config import ConfigError
from streamstack import runtimes
from streamstack.render import SECRET_PLACEHOLDER, RenderedStack, render_stack
from streamstack.render import validate as k8s_validation
from tests.charts.checkov import assert_clean, run_checkov
from tests.infra.conftest import Stack, load_config, run_program, stack_sections

PASSWORD_KEY = "cdcDatabasePassword"
CIPHERTEXT = {"secure": "v1:Zm9yLXRlc3Rpbmc6bm90LWEtcmVhbC1rZXk="}
FAKE_PASSWORD = "not-a-real-password-9f2c"
CDC_KINDS = {"KafkaConnect", "KafkaConnector", "KafkaUser", "KafkaTopic", "NetworkPolicy", "Secret"}


@pytest.fixture(scope="module")
def rendered() -> dict[str, RenderedStack]:
    return {stack: render_stack(stack, overrides={PASSWORD_KEY: CIPHERTEXT}) for stack in ("dev", "prod")}


def one(stack: RenderedStack, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    found = [
        manifest
        for manifest in stack.find(kind, name)
        if namespace is None or manifest["metadata"].get("namespace") == namespace
    ]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels / matchExpressions with In) against a pod's labels."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def admits(peer: dict[str, Any], namespace: str, labels: dict[str, str]) -> bool:
    """Whether a NetworkPolicy peer selects a pod with `labels` in `namespace` (the policy's own namespace
    is passed as `namespace` when the peer has no namespaceSelector)."""
    if "ipBlock" in peer:
        return False
    namespaces = peer.get("namespaceSelector")
    if namespaces is not None and not matches(namespaces, {network.NAMESPACE_LABEL: namespace}):
        return False
    return matches(peer.get("podSelector") or {}, labels)


def connect_pod_labels(stack: RenderedStack) -> dict[str, str]:
    """The labels of a Connect pod: Strimzi's selector labels plus the template's."""
    connect = one(stack, "KafkaConnect", kafka_connect.CONNECT_NAME)
    template = connect["spec"]["template"]["pod"]["metadata"]["labels"]
    return {**network.kafka_connect_pod_labels(kafka_connect.CONNECT_NAME), **template}


# --- schemas -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_every_object_of_the_stack_with_cdc_validates(
    rendered: dict[str, RenderedStack], stack_name: str
) -> None:
    stack = rendered[stack_name]
    kinds = {manifest["kind"] for manifest in stack.manifests}
    assert kinds >= CDC_KINDS | ({"StatefulSet", "Service", "Namespace"} if stack_name == "dev" else set())
    errors = k8s_validation.validate_manifests(stack.manifests, stack.kubernetes_version)
    assert errors == [], "\n".join(errors)
    # The validator is strict for custom resources: a misspelt field of the KafkaConnect fails.
    connect = one(stack, "KafkaConnect", kafka_connect.CONNECT_NAME)
    broken = {**connect, "spec": {**connect["spec"], "groupID": "x"}}
    assert any(
        "groupID" in error for error in k8s_validation.validate_manifest(broken, stack.kubernetes_version)
    )


# --- the connector: one description, contracts/cdc.py ------------------------------------------------------


@pytest.mark.parametrize(
    ("stack_name", "hostname"), [("dev", "postgres.postgres.svc"), ("prod", "orders-db.example.internal")]
)
def test_the_connector_is_the_contracts_config_with_the_password_from_a_mounted_secret(
    rendered: dict[str, RenderedStack], stack_name: str, hostname: str
) -> None:
    stack = rendered[stack_name]
    source = cdc_source()
    connector = one(stack, "KafkaConnector", source.connector_name)
    assert connector["metadata"]["labels"]["strimzi.io/cluster"] == kafka_connect.CONNECT_NAME
    reference = "${directory:/mnt/cdc-database-credentials:password}"
    expected = debezium_connector_config(
        source, hostname=hostname, port=5432, user="streamstack_cdc", password=reference
    )
    spec = connector["spec"]
    assert {
        "connector.class": spec["class"],
        "tasks.max": str(spec["tasksMax"]),
        **spec["config"],
    } == expected
    assert "connector.class" not in spec["config"] and "tasks.max" not in spec["config"]
    # The reference resolves to the file `password` of the Secret mounted at that path, and only there.
    connect = one(stack, "KafkaConnect", kafka_connect.CONNECT_NAME)
    assert connect["metadata"]["annotations"]["strimzi.io/use-connector-resources"] == "true"
    (volume,) = connect["spec"]["template"]["pod"]["volumes"]
    (mount,) = connect["spec"]["template"]["connectContainer"]["volumeMounts"]
    assert (mount["name"], mount["mountPath"], mount["readOnly"]) == (
        volume["name"],
        "/mnt/cdc-database-credentials",
        True,
    )
    worker = connect["spec"]["config"]
    assert worker["config.providers"] == "directory"
    assert worker["config.providers.directory.class"].endswith(".DirectoryConfigProvider")
    assert worker["config.providers.directory.param.allowed.paths"] == mount["mountPath"]
    secret = one(stack, "Secret", volume["secret"]["secretName"], connect["metadata"]["namespace"])
    assert set(secret["stringData"]) == {"password"}
    assert secret["stringData"]["password"] == SECRET_PLACEHOLDER  # the secret's value is never written
    # Connect's identity is the catalogue's too.
    spec = connect["spec"]
    assert (
        spec["groupId"],
        spec["configStorageTopic"],
        spec["offsetStorageTopic"],
        spec["statusStorageTopic"],
    ) == (
        source.connect.group_id,
        *source.connect.internal_topics,
    )
    assert spec["image"] == load_config(stack_name).cdc.connect.image  # type: ignore[union-attr]
    assert spec["authentication"]["passwordSecret"]["secretName"] == kafka_connect.CONNECT_USER
    assert ("tls" in spec) is (stack_name == "prod")  # prod's clients use the TLS listener and the cluster CA


def test_no_password_reaches_a_manifest_or_output(mocked: Callable[[str], Stack]) -> None:
    """With the secret set to a real value under mocks: it is only in the two Secrets, marked secret."""
    recorded = run_program(mocked, "dev", strings={PASSWORD_KEY: FAKE_PASSWORD}, secret_keys=[PASSWORD_KEY])
    holders = [
        str(resource.metadata.get("name"))
        for resource in recorded.resources()
        if resource.custom and FAKE_PASSWORD in repr(resource.inputs)
    ]
    assert sorted(holders) == ["cdc-database-credentials", "postgres-credentials"]
    assert FAKE_PASSWORD not in repr(recorded.exports)
    connector = recorded.named("KafkaConnector", cdc_source().connector_name)
    assert connector.spec["config"]["database.password"] == kafka_connect.password_reference()


# --- the Connect user's ACLs ------------------------------------------------------------------------------


def test_the_connect_user_may_do_exactly_what_connect_and_debezium_need(
    rendered: dict[str, RenderedStack],
) -> None:
    source = cdc_source()
    # Debezium's heartbeat topic, when the contract's connector config enables heartbeats (it does not now).
    config = kafka_connect.connector_config(source, hostname="h", port=5432, user="u")
    heartbeats = kafka_connect.heartbeat_topics(config)
    assert heartbeats == (
        ["__debezium-heartbeat.streamstack_postgres"] if "heartbeat.interval.ms" in config else []
    )
    for stack in rendered.values():
        user = one(stack, "KafkaUser", kafka_connect.CONNECT_USER)
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
        granted = {
            (
                acl["resource"]["type"],
                acl["resource"].get("name"),
                acl["resource"].get("patternType"),
                frozenset(acl["operations"]),
            )
            for acl in user["spec"]["authorization"]["acls"]
        }
        internal = frozenset({"Describe", "DescribeConfigs", "Read", "Write"})
        assert granted == {
            ("group", "streamstack-connect", "literal", frozenset({"Describe", "Read"})),
            ("topic", "connect-configs", "literal", internal),
            ("topic", "connect-offsets", "literal", internal),
            ("topic", "connect-status", "literal", internal),
            ("topic", "users", "literal", frozenset({"Describe", "Write"})),
            ("topic", "orders", "literal", frozenset({"Describe", "Write"})),
            *(("topic", topic, "literal", frozenset({"Describe", "Write"})) for topic in heartbeats),
        }
        assert {name for _, name, _, _ in granted} == {
            source.connect.group_id,
            *source.connect.internal_topics,
            *source.topics,
            *heartbeats,
        }
        # Every topic it touches is a KafkaTopic of the stack (the brokers create none): the heartbeat topic
        # under a Kubernetes-safe name.
        topics = {
            manifest["spec"].get("topicName", manifest["metadata"]["name"])
            for manifest in stack.find("KafkaTopic")
        }
        assert {name for kind, name, _, _ in granted if kind == "topic"} <= topics
        beats = [
            m for m in stack.find("KafkaTopic") if m["spec"].get("topicName", "").startswith("__debezium")
        ]
        assert [(m["spec"]["topicName"], m["spec"]["config"]["cleanup.policy"]) for m in beats] == [
            (topic, "delete") for topic in heartbeats
        ]
    # The heartbeat topic follows the connector config: with heartbeats, a topic under a Kubernetes-safe name.
    beating = {**config, "heartbeat.interval.ms": "10000"}
    assert kafka_connect.heartbeat_topics(beating) == ["__debezium-heartbeat.streamstack_postgres"]
    assert kafka_connect.heartbeat_topics({**beating, "topic.heartbeat.prefix": "beats"}) == [
        "beats.streamstack_postgres"
    ]
    assert kafka_connect.heartbeat_topics({**config, "heartbeat.interval.ms": "0"}) == []
    assert kafka_connect.kubernetes_name("__debezium-heartbeat.streamstack_postgres") == (
        "debezium-heartbeat.streamstack-postgres"
    )


# --- NetworkPolicies and pods -----------------------------------------------------------------------------


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_network_policies_let_connect_reach_kafka_and_postgres_and_nothing_else_reach_postgres(
    rendered: dict[str, RenderedStack], stack_name: str
) -> None:
    stack = rendered[stack_name]
    config = load_config(stack_name)
    jobs, kafka_ns = config.spark.jobs_namespace, config.kafka.namespace
    connect = connect_pod_labels(stack)
    brokers = network.kafka_pod_labels(config.kafka)
    flows = one(stack, "NetworkPolicy", "cdc-connect-flows", jobs)["spec"]
    assert matches(flows["podSelector"], connect)
    assert sorted(flows["policyTypes"]) == ["Egress", "Ingress"]

    def egress_ports(namespace: str, labels: dict[str, str]) -> set[int]:
        return {
            port["port"]
            for rule in flows["egress"]
            if any(admits(peer, namespace, labels) for peer in rule["to"])
            for port in rule["ports"]
        }

    assert egress_ports(kafka_ns, brokers) == set(network.kafka_client_ports(config.kafka))
    assert egress_ports(jobs, connect) == {8083}
    # Ingress: the Strimzi operator and the other workers, on the REST API only.
    operator = network.STRIMZI_OPERATOR_POD_LABELS
    admitted = {
        (namespace, port["port"])
        for rule in flows["ingress"]
        for namespace, labels in ((kafka_ns, operator), (jobs, connect))
        if any(admits(peer, namespace, labels) for peer in rule["from"])
        for port in rule["ports"]
    }
    assert admitted == {(kafka_ns, 8083), (jobs, 8083)}
    # ...and Prometheus on the metrics port only.
    prometheus = (config.monitoring.namespace, network.PROMETHEUS_POD_LABELS)
    scraped = {
        port["port"]
        for rule in flows["ingress"]
        if any(admits(peer, *prometheus) for peer in rule["from"])
        for port in rule["ports"]
    }
    assert scraped == {network.KAFKA_METRICS_PORT}
    # The operator's egress to Connect, in the Kafka namespace (which denies all by default).
    to_connect = one(stack, "NetworkPolicy", "strimzi-cluster-operator-to-cdc-connect", kafka_ns)["spec"]
    assert matches(to_connect["podSelector"], operator)
    (rule,) = to_connect["egress"]
    assert any(admits(peer, jobs, connect) for peer in rule["to"]) and rule["ports"][0]["port"] == 8083
    # The brokers admit Connect on the client listeners (our policy and Strimzi's listener peers).
    broker_policy = one(stack, "NetworkPolicy", f"{config.kafka.cluster_name}-kafka", kafka_ns)["spec"]
    assert any(
        admits(peer, jobs, connect)
        and {p["port"] for p in rule["ports"]} == set(network.kafka_client_ports(config.kafka))
        for rule in broker_policy["ingress"]
        for peer in rule["from"]
    )
    for listener in one(stack, "Kafka", config.kafka.cluster_name)["spec"]["kafka"]["listeners"]:
        assert any(admits(peer, jobs, connect) for peer in listener["networkPolicyPeers"])

    if stack_name == "prod":
        external = config.cdc.database.external
        assert external is not None
        blocks = [
            (peer["ipBlock"]["cidr"], port["port"])
            for rule in flows["egress"]
            for peer in rule["to"]
            if "ipBlock" in peer
            for port in rule["ports"]
        ]
        assert blocks == [("10.0.32.0/24", 5432)]
        assert not stack.find("StatefulSet", "postgres")
        return
    # dev: Connect -> the PostgreSQL pods, and the database's namespace admits Connect and nothing else.
    statefulset = one(stack, "StatefulSet", "postgres", "postgres")
    pod = statefulset["spec"]["template"]["metadata"]["labels"]
    assert egress_ports("postgres", pod) == {5432}
    assert matches(statefulset["spec"]["selector"], pod)
    service = one(stack, "Service", "postgres", "postgres")
    assert matches({"matchLabels": service["spec"]["selector"]}, pod)
    policies = [m for m in stack.find("NetworkPolicy") if m["metadata"]["namespace"] == "postgres"]
    assert {m["metadata"]["name"] for m in policies} == {"default-deny", "allow-dns", "postgres"}
    deny = one(stack, "NetworkPolicy", "default-deny", "postgres")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    ingress = [
        (peer, port["port"])
        for m in policies
        if matches(m["spec"]["podSelector"], pod)
        for rule in m["spec"].get("ingress", [])
        for peer in rule["from"]
        for port in rule["ports"]
    ]
    assert {port for _, port in ingress} == {5432}
    peers = [peer for peer, _ in ingress]
    # Connect, and the dev application workload (load generators: jobs.producers.cdc_workload writes the
    # tables); not the jobs or the exporter of the same namespace, not Connect elsewhere.
    workload = network.LOAD_GENERATOR_POD_LABELS
    assert any(admits(peer, jobs, connect) for peer in peers)
    assert any(admits(peer, jobs, workload) for peer in peers)
    for app in ("streaming-job", "lag-exporter"):
        assert not any(admits(peer, jobs, {"app.kubernetes.io/name": app}) for peer in peers)
    assert not any(admits(peer, "default", connect) or admits(peer, "default", workload) for peer in peers)
    # The workload's own egress to the database, beside its Kafka policy.
    to_database = one(stack, "NetworkPolicy", "load-generator-to-postgres", jobs)["spec"]
    assert matches(to_database["podSelector"], workload) and not matches(to_database["podSelector"], connect)
    (rule,) = to_database["egress"]
    assert [p["port"] for p in rule["ports"]] == [5432] and admits(rule["to"][0], "postgres", pod)


def test_postgres_and_connect_pods_are_restricted(rendered: dict[str, RenderedStack]) -> None:
    stack = rendered["dev"]
    namespace = one(stack, "Namespace", "postgres")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = one(stack, "StatefulSet", "postgres", "postgres")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 999
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    # The image is pinned; the server runs with logical decoding and a cap on the WAL a slot may hold.
    assert re.fullmatch(r"postgres:15\.\d+-bookworm(@sha256:[0-9a-f]{64})?", container["image"])
    args = dict(zip(container["args"][1::2], container["args"][::2], strict=True))
    assert set(args.values()) == {"-c"}
    assert {"wal_level=logical", "max_slot_wal_keep_size=1024MB"} <= set(args)
    env = {item["name"]: item for item in container["env"]}
    # The password is a file of the mounted Secret, never an environment variable.
    assert "POSTGRES_PASSWORD" not in env
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    path, _, key = env["POSTGRES_PASSWORD_FILE"]["value"].rpartition("/")
    (credentials,) = [name for name, mount in mounts.items() if mount["mountPath"] == path]
    assert mounts[credentials]["readOnly"] is True and key == "password"
    assert volumes[credentials]["secret"]["secretName"] == "postgres-credentials"
    assert set(one(stack, "Secret", "postgres-credentials", "postgres")["stringData"]) == {key}
    assert env["POSTGRES_DB"]["value"] == cdc_source().database
    for connect in (one(s, "KafkaConnect", kafka_connect.CONNECT_NAME) for s in rendered.values()):
        template = connect["spec"]["template"]
        assert template["pod"]["securityContext"]["runAsNonRoot"] is True
        container_security = template["connectContainer"]["securityContext"]
        assert container_security["allowPrivilegeEscalation"] is False
        assert container_security["capabilities"] == {"drop": ["ALL"]}
        assert container_security["readOnlyRootFilesystem"] is True


def test_prometheus_scrapes_connects_and_debeziums_metrics(rendered: dict[str, RenderedStack]) -> None:
    """The JMX exporter's rules (a ConfigMap the KafkaConnect names), and a PodMonitor on Strimzi's metrics
    port of the Connect pods."""
    for stack in rendered.values():
        connect = one(stack, "KafkaConnect", kafka_connect.CONNECT_NAME)
        namespace = connect["metadata"]["namespace"]
        reference = connect["spec"]["metricsConfig"]["valueFrom"]["configMapKeyRef"]
        assert connect["spec"]["metricsConfig"]["type"] == "jmxPrometheusExporter"
        rules = yaml.safe_load(
            one(stack, "ConfigMap", reference["name"], namespace)["data"][reference["key"]]
        )
        names = {rule["name"] for rule in rules["rules"]}
        assert {"kafka_connect_connector_status", "kafka_connect_connector_task_status"} <= names
        assert {"debezium_metrics_$4", "debezium_metrics_$5"} <= names
        # The patterns are Java regexes, unanchored, over the exporter's `domain<key=value, ...><>attribute`
        # form; these are re-compatible: one matches Debezium's streaming MBean (with a task key, as 3.x
        # registers it).
        bean = (
            "debezium.postgres<type=connector-metrics, context=streaming, server=streamstack_postgres, "
            "task=0>"
        )
        matched = [
            r for r in rules["rules"] if re.fullmatch(r["pattern"], f"{bean}<>MilliSecondsBehindSource")
        ]
        assert matched and matched[0]["labels"]["context"] == "$2"
        monitor = one(stack, "PodMonitor", f"{kafka_connect.CONNECT_NAME}-connect", namespace)
        assert matches(monitor["spec"]["selector"], connect_pod_labels(stack))
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "tcp-prometheus"
        worker = connect["spec"]["config"]
        # The settings every worker shares with the local one (changes of one row stay in order).
        assert {key: worker[key] for key in connect_worker_config()} == connect_worker_config()
        assert worker["producer.max.in.flight.requests.per.connection"] == "1"


@pytest.mark.slow
def test_checkov_passes_the_cdc_objects(rendered: dict[str, RenderedStack], tmp_path: Path) -> None:
    """checkov 3.3.30 on every object the CDC part adds to dev (the database's namespace, its policies,
    Secret, Service and StatefulSet, the KafkaConnect and KafkaConnector): no failed check, each accepted
    finding skipped with its reason on the object."""
    stack = rendered["dev"]
    objects = [
        manifest
        for manifest in stack.manifests
        if manifest["metadata"].get("namespace") == "postgres"
        or manifest["kind"] in ("KafkaConnect", "KafkaConnector")
        or (manifest["kind"] == "Namespace" and manifest["metadata"]["name"] == "postgres")
    ]
    (tmp_path / "cdc.yaml").write_text(yaml.safe_dump_all(objects))
    checkov = runtimes.ensure_checkov(log=lambda line: print(line, file=sys.stderr))
    report = run_checkov(checkov, ["--framework", "kubernetes", "--directory", str(tmp_path)])
    assert_clean(report)
    checked = {check["resource"] for check in report["results"]["passed_checks"]}
    assert "StatefulSet.postgres.postgres" in checked


def test_connect_waits_for_kafka_and_the_database(mocked: Callable[[str], Stack]) -> None:
    recorded = run_program(mocked, "dev", strings={PASSWORD_KEY: FAKE_PASSWORD}, secret_keys=[PASSWORD_KEY])
    broker = recorded.named("Kafka", load_config("dev").kafka.cluster_name)
    user = recorded.named("KafkaUser", kafka_connect.CONNECT_USER)
    assert broker.urn in user.dependencies
    (component,) = [r for r in recorded.resources() if r.typ == "streamstack:cdc:KafkaConnect"]
    statefulset = recorded.named("StatefulSet", "postgres")
    assert statefulset.urn in component.dependencies and broker.urn in component.dependencies
    connect = recorded.named("KafkaConnect", kafka_connect.CONNECT_NAME)
    connector = recorded.named("KafkaConnector", cdc_source().connector_name)
    assert connect.urn in connector.dependencies and user.urn in connect.dependencies
    assert recorded.exports["cdcConnector"].startswith("kubectl get kafkaconnector -n streaming ")
    # Where the application workload finds the database (libpq's PG* variables), the password by Secret.
    assert recorded.exports["cdcDatabase"] == {
        "host": "postgres.postgres.svc",
        "port": 5432,
        "database": cdc_source().database,
        "user": "streamstack_cdc",
        "passwordSecret": kafka_connect.CREDENTIALS_SECRET,
    }


# --- configuration ----------------------------------------------------------------------------------------


def test_without_the_password_the_stack_leaves_cdc_out(mocked: Callable[[str], Stack]) -> None:
    recorded = run_program(mocked, "dev")
    assert not recorded.of_kind("KafkaConnect") and not recorded.of_kind("StatefulSet")
    assert kafka_connect.CONNECT_USER not in {user.metadata["name"] for user in recorded.of_kind("KafkaUser")}


def test_a_plain_text_password_fails_naming_the_setting(mocked: Callable[[str], Stack]) -> None:
    with pytest.raises(ConfigError, match=f"^streamstack:{PASSWORD_KEY}: set in plain text"):
        run_program(mocked, "prod", strings={PASSWORD_KEY: FAKE_PASSWORD})


def connect(**change: Any) -> dict[str, Any]:
    cdc = stack_sections("prod")["cdc"]
    return {**cdc, "connect": {**cdc["connect"], **change}}


def external(**change: Any) -> dict[str, Any]:
    cdc = stack_sections("prod")["cdc"]
    return {**cdc, "database": {**cdc["database"], "external": {**cdc["database"]["external"], **change}}}


@pytest.mark.parametrize(
    ("cdc", "expected"),
    [
        (external(host=None), "streamstack:cdc.database.external.host: required"),
        (
            external(host="db .example"),
            "streamstack:cdc.database.external.host: 'db .example' does not match",
        ),
        (external(cidrs=None), "streamstack:cdc.database.external.cidrs: required"),
        (
            external(cidrs=["0.0.0.0/0"]),
            "streamstack:cdc.database.external.cidrs[0]: 0.0.0.0/0 is every address",
        ),
        (external(port=70000), "streamstack:cdc.database.external.port: 70000 is not a TCP port"),
        (external(walDiskSize=None), "streamstack:cdc.database.external.walDiskSize: required"),
        (external(walDiskSize="lots"), "streamstack:cdc.database.external.walDiskSize: 'lots'"),
        (external(password="hunter2"), "streamstack:cdc.database.external.password: unknown setting"),
        (
            {
                **stack_sections("prod")["cdc"],
                "database": {
                    "external": {"host": "db", "cidrs": ["10.0.0.0/24"], "walDiskSize": "1Ti"},
                    "inCluster": {"image": "postgres:15.14"},
                },
            },
            "streamstack:cdc.database: set exactly one of inCluster",
        ),
        (
            {**stack_sections("dev")["cdc"], "connect": {"image": "streamstack/connect:latest"}},
            "streamstack:cdc.connect.image: 'streamstack/connect:latest' needs a pinned tag",
        ),
        (
            {**stack_sections("dev")["cdc"], "database": {"inCluster": {"image": "postgres"}}},
            "streamstack:cdc.database.inCluster.image: 'postgres' needs a pinned tag",
        ),
        (
            {
                **stack_sections("dev")["cdc"],
                "database": {"inCluster": {"image": "postgres:15.14@sha256:abc"}},
            },
            "streamstack:cdc.database.inCluster.image: 'postgres:15.14@sha256:abc' has a digest",
        ),
        ({**stack_sections("prod")["cdc"], "connect": {}}, "streamstack:cdc.connect.image: required"),
        (
            connect(heap="256MB"),
            "streamstack:cdc.connect.heap: '256MB' is not a JVM size such as 256m or 1g",
        ),
        (  # prod's 2Gi limit holds a 1g heap, not a 1900m one
            connect(heap="1900m"),
            "streamstack:cdc.connect.resources.limits.memory: 2Gi is less than the heap (1900m) plus the "
            "224 MiB Kafka Connect holds beside it: at least 2124Mi",
        ),
        (
            connect(heap="256m", resources={"requests": {"memory": "512Mi"}, "limits": {"memory": "470Mi"}}),
            "streamstack:cdc.connect.resources.limits.memory: 470Mi is less than the heap (256m) plus the "
            "224 MiB Kafka Connect holds beside it: at least 480Mi",
        ),
        (
            connect(heap="256m", resources={"requests": {"memory": "512Mi"}}),
            "streamstack:cdc.connect.resources.limits.memory: required with streamstack:cdc.connect.heap: at "
            "least the heap plus 224 MiB (480Mi)",
        ),
    ],
)
def test_bad_cdc_settings_fail_naming_the_field(cdc: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config("prod", cdc=cdc)
    assert str(error.value).startswith(expected), error.value


def test_the_stacks_use_the_database_the_issue_asks_for() -> None:
    dev, prod = load_config("dev").cdc, load_config("prod").cdc
    assert dev.enabled and dev.database.in_cluster is not None and dev.database.external is None
    assert prod.enabled and prod.database.external is not None and prod.database.in_cluster is None
    # The Connect image tag names the Kafka version the stack runs.
    for stack in ("dev", "prod"):
        config = load_config(stack)
        assert config.cdc.connect is not None
        assert f"-kafka{config.kafka.version}-" in config.cdc.connect.image
    assert postgres.server_args(dev.database.in_cluster)[:2] == ["-c", "wal_level=logical"]


# --- sizing and the kind workflow ---------------------------------------------------------------------------


def test_connect_runs_with_the_configured_heap(rendered: dict[str, RenderedStack]) -> None:
    """dev fixes the heap (cdc.connect.heap) as -Xms and -Xmx, inside a memory limit that holds it and what
    the JVM measurably needs beside it, and requests no more than that limit; prod, with no heap set, leaves
    it to Strimzi (75% of the limit)."""
    from infra.config.cdc import CONNECT_NON_HEAP, jvm_size_bytes, memory_bytes  # noqa: PLC0415

    dev = load_config("dev").cdc.connect
    assert dev is not None and dev.heap is not None
    spec = one(rendered["dev"], "KafkaConnect", kafka_connect.CONNECT_NAME)["spec"]
    assert spec["jvmOptions"] == {"-Xms": dev.heap, "-Xmx": dev.heap}
    limit = memory_bytes(spec["resources"]["limits"]["memory"])
    assert limit >= jvm_size_bytes(dev.heap) + CONNECT_NON_HEAP
    assert memory_bytes(spec["resources"]["requests"]["memory"]) <= limit
    prod = one(rendered["prod"], "KafkaConnect", kafka_connect.CONNECT_NAME)["spec"]
    assert "jvmOptions" not in prod
    # The dev database asks for what it was measured to need, with a CPU limit (checkov's CKV_K8S_11).
    (statefulset,) = rendered["dev"].find("StatefulSet", "postgres")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == load_config("dev").cdc.database.in_cluster.resources.as_dict()  # type: ignore[union-attr]
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}


KIND_WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "kind.yaml"
README = Path(__file__).resolve().parents[2] / "README.md"


def kind_steps() -> dict[str, str]:
    workflow = yaml.safe_load(KIND_WORKFLOW.read_text())
    return {step.get("name", ""): step.get("run", "") for step in workflow["jobs"]["kind"]["steps"]}


def test_the_kind_workflow_runs_cdc() -> None:
    """The workflow builds and loads the Connect image the dev stack deploys, sets the password as a Pulumi
    secret made at run time (masked, on stdin: never in the repository, a log or a command line), creates the
    tables before the connector starts, waits for the KafkaConnect and KafkaConnector to be Ready and counts
    the records of the topic the CDC view job writes. README.md's kind block does the same."""
    workflow = yaml.safe_load(KIND_WORKFLOW.read_text())
    env, steps = workflow["env"], kind_steps()
    dev = load_config("dev").cdc
    assert dev.connect is not None and env["CONNECT_IMAGE"] == dev.connect.image
    build = steps["Build the images and load them into kind"]
    assert 'docker build --tag "$CONNECT_IMAGE" infra/connect' in build
    assert re.search(r'kind load docker-image [^\n]*"\$CONNECT_IMAGE"', build)
    up = steps["pulumi up --stack dev (local backend)"]
    secret = "printf '%s' \"$cdc_password\" | pulumi config set --stack dev --secret cdcDatabasePassword"
    assert 'cdc_password="$(openssl rand -hex 24)"' in up and secret in up
    assert up.index('echo "::add-mask::$cdc_password"') < up.index(secret) < up.index("pulumi up ")
    assert KIND_WORKFLOW.read_text().count(f"--secret {PASSWORD_KEY}") == 1  # set nowhere else
    # The tables exist before the connector's task starts: created in the background as soon as the
    # database pod is Ready, a step before `pulumi up` (which creates Connect after the database).
    names = list(steps)
    background = "Start the CDC application workload once PostgreSQL runs (in the background)"
    assert names.index(background) < names.index("pulumi up --stack dev (local backend)")
    assert "cdc_workload --schema-only" in steps[background]
    assert steps[background].index("--schema-only") < steps[background].index("--rate 20")
    assert env["POSTGRES_NAMESPACE"] == dev.database.in_cluster.namespace  # type: ignore[union-attr]
    assert env["POSTGRES_POD"] == f"{postgres.NAME}-0"
    ready = steps["CDC: Kafka Connect and the Debezium connector Ready, the application workload running"]
    for kind in ("kafkaconnect", "kafkaconnector"):
        assert f"--for=condition=Ready {kind} --all" in ready
    # The topic the check counts is the one the CDC view job writes, and that job joins the CDC tables.
    job = load_pipeline().job(env["CDC_VIEW_JOB"])
    assert env["CDC_VIEW_TOPIC"] in job.topics_of(job.writes)
    assert {table.topic for table in cdc_source().tables} <= set(job.topics_of(job.reads))
    check = steps[
        "CDC: the user-view topic gets records (PostgreSQL -> Debezium -> users, orders -> the job)"
    ]
    assert '"$CDC_VIEW_JOB-driver"' in check and '"$CDC_VIEW_TOPIC"' in check
    # With CDC, the synthetic changelog producer does not write the same topics.
    assert (
        'has("cdcDatabase")'
        in steps["Produce events (the stack's load-generator user, the producers from the jobs image)"]
    )
    readme = README.read_text().split("## On a laptop with Docker and kind", 1)[1].split("\n## ", 1)[0]
    for fragment in (
        f"docker build --tag {dev.connect.image} infra/connect",
        dev.connect.image + " --name streamstack",
        "pulumi config set --stack dev --secret cdcDatabasePassword < .streamstack/cdc-password",
        "cdc_workload --schema-only",
        "--for=condition=Ready kafkaconnect --all",
        "--for=condition=Ready kafkaconnector --all",
    ):
        assert fragment in readme, fragment
