"""LagExporter on its own: it installs charts/lag-exporter, and what the chart renders from Pulumi's values is
a restricted Deployment whose settings the exporter parses, SASL credentials from the KafkaUser Secret,
read-only checkpoint mounts of exactly the jobs' claims, and a ServiceMonitor on the Service's port."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.cdc import cdc_source
from contracts.kafka_security import jaas_config
from infra.components import kafka_connect
from infra.components.lag_exporter import LagExporter, LagExporterArgs
from infra.config import ConfigError, LagExporterConfig
from infra.kafka_access import KafkaClient
from infra.network import Peers
from monitoring.lag_exporter.config import parse_args
from streamstack.paths import REPO_ROOT
from streamstack.render import SECRET_PLACEHOLDER, RenderedStack, render_stack
from streamstack.render import validate as k8s_validation
from tests.infra.conftest import Objects, Stack, build, load_config, run_program
from tests.infra.test_kafka_connect import CIPHERTEXT, FAKE_PASSWORD, admits, matches, one
from tests.infra.test_kafka_connect import PASSWORD_KEY as CDC_PASSWORD

BOOTSTRAP = "streamstack-kafka-bootstrap.kafka.svc:9092"


def exporter_args(stack: str, exporter: LagExporterConfig | None = None) -> LagExporterArgs:
    config = load_config(stack)
    return LagExporterArgs(
        exporter=exporter or config.lag_exporter,
        namespace="streaming",
        kafka=KafkaClient(bootstrap_servers=BOOTSTRAP, user_secret="lag-exporter"),
        shadow_group_prefix="streamstack-",
        jobs=config.jobs,
        cluster_nodes=config.cluster.nodes,
        peers=Peers.of(config.kafka, config.monitoring.namespace),
    )


def build_exporter(mocked: Callable[[str], Stack], stack: str = "dev") -> tuple[Stack, Objects]:
    recorder = mocked(stack)
    args = exporter_args(stack)
    build(lambda: LagExporter("lag-exporter", args))
    return recorder, recorder.chart_objects(load_config(stack).cluster.kubernetes_version)


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def environment(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment, with what Strimzi writes into a KafkaUser's Secret (the JAAS line of the
    user the Secret is named after) standing in for each secretKeyRef."""
    return {
        item["name"]: item["value"]
        if "value" in item
        else jaas_config(item["valueFrom"]["secretKeyRef"]["name"], "from-the-secret")
        for item in container["env"]
    }


def test_the_component_installs_our_chart(mocked: Callable[[str], Stack]) -> None:
    recorder, objects = build_exporter(mocked)
    (chart,) = recorder.charts()
    assert chart.inputs["chart"] == str(REPO_ROOT / "charts" / "lag-exporter")
    assert (chart.inputs["name"], chart.inputs["namespace"]) == ("lag-exporter", "streaming")
    assert [r for r in recorder.resources() if r.custom] == []
    assert sorted(item.manifest["kind"] for item in objects.objects) == [
        "Deployment",
        "NetworkPolicy",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]


def test_settings_and_environment_are_what_the_exporter_parses(mocked: Callable[[str], Stack]) -> None:
    _, objects = build_exporter(mocked)
    container = container_of(objects.manifest("Deployment", "lag-exporter"))
    jaas = next(item for item in container["env"] if item["name"] == "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG")
    assert jaas == {
        "name": "STREAMSTACK_KAFKA_SASL_JAAS_CONFIG",
        "valueFrom": {"secretKeyRef": {"name": "lag-exporter", "key": "sasl.jaas.config"}},
    }
    # Parse the exact arguments and environment with the exporter's own parser.
    parsed = parse_args(container.get("args", []), environment(container))
    exporter = load_config("dev").lag_exporter
    assert parsed.bootstrap_servers == BOOTSTRAP
    assert parsed.security.security_protocol == "SASL_PLAINTEXT"
    assert parsed.security.sasl_mechanism == "SCRAM-SHA-512"
    assert parsed.security.username == "lag-exporter"
    assert (parsed.listen_host, parsed.listen_port) == ("0.0.0.0", exporter.port)
    assert (parsed.refresh_interval, parsed.window) == (exporter.refresh_interval, exporter.window)
    assert parsed.is_shadow("streamstack-clickstream-windows")
    assert parsed.groups("streamstack-user-view") and not parsed.groups("console-consumer-1")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == parsed.listen_port


def test_dev_reads_every_jobs_checkpoint_from_a_read_only_mount(mocked: Callable[[str], Stack]) -> None:
    _, objects = build_exporter(mocked)
    deployment = objects.manifest("Deployment", "lag-exporter")
    container = container_of(deployment)
    checkpoints = {
        c.name: str(c.path) for c in parse_args(container["args"], environment(container)).checkpoints
    }
    claims = {
        volume["name"]: volume["persistentVolumeClaim"]
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in volume
    }
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    jobs = {job.name: job for job in load_config("dev").jobs}
    assert set(checkpoints) == set(jobs)
    for name, path in checkpoints.items():
        mount = mounts[path]
        assert mount["readOnly"] is True
        assert claims[mount["name"]] == {"claimName": jobs[name].checkpoint_claim, "readOnly": True}


def test_pod_is_restricted_with_the_configured_user_and_resources(mocked: Callable[[str], Stack]) -> None:
    _, objects = build_exporter(mocked)
    deployment = objects.manifest("Deployment", "lag-exporter")
    pod = deployment["spec"]["template"]["spec"]
    exporter = load_config("dev").lag_exporter
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == exporter.run_as_user
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = container_of(deployment)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # The stack's requests and memory limit; the chart's CPU limit where the stack sets none.
    resources = container["resources"]
    assert resources["requests"] == dict(exporter.resources.requests)
    assert resources["limits"]["memory"] == exporter.resources.limits["memory"]
    assert resources["limits"]["cpu"]


def test_service_monitor_scrapes_the_service_port_that_reaches_the_container(
    mocked: Callable[[str], Stack],
) -> None:
    _, objects = build_exporter(mocked)
    deployment = objects.manifest("Deployment", "lag-exporter")
    service = objects.manifest("Service", "lag-exporter")
    monitor = objects.manifest("ServiceMonitor", "lag-exporter")
    (endpoint,) = monitor["spec"]["endpoints"]
    service_ports = {port["name"]: port for port in service["spec"]["ports"]}
    container_ports = {port["name"] for port in container_of(deployment)["ports"]}
    assert service_ports[endpoint["port"]]["targetPort"] in container_ports
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_args_need_an_image() -> None:
    with pytest.raises(ConfigError, match=r"^streamstack:lagExporter\.image: required"):
        exporter_args("dev", LagExporterConfig(enabled=False))


# --- change data capture: the exporter reads the connector's replication slot (issue 18) --------------------
# The whole program on Pulumi.dev.yaml (in-cluster PostgreSQL) and Pulumi.prod.yaml (external), with the
# secret cdcDatabasePassword set as `pulumi config set --secret` stores it, rendered as `streamstack render`.


@pytest.fixture(scope="module")
def with_cdc() -> dict[str, RenderedStack]:
    return {stack: render_stack(stack, overrides={CDC_PASSWORD: CIPHERTEXT}) for stack in ("dev", "prod")}


def exporter_pod(stack: RenderedStack) -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = one(stack, "Deployment", "lag-exporter")
    return deployment["spec"]["template"], container_of(deployment)


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_with_cdc_the_exporter_reads_the_connectors_slot_with_connects_password_file(
    with_cdc: dict[str, RenderedStack], stack_name: str
) -> None:
    stack = with_cdc[stack_name]
    template, container = exporter_pod(stack)
    # The exporter's own parser on the exact arguments and environment (prod's CA file exists only in the
    # pod, and the parser checks it is there: it has nothing to do with the slot).
    env = {k: v for k, v in environment(container).items() if k != "STREAMSTACK_KAFKA_SSL_CA_FILE"}
    parsed = parse_args(container["args"], env).source
    assert parsed is not None
    # The same database, slot, address and login as the connector Kafka Connect runs.
    connector = one(stack, "KafkaConnector", cdc_source().connector_name)["spec"]["config"]
    assert (parsed.host, parsed.port, parsed.user, parsed.database, parsed.slot) == (
        connector["database.hostname"],
        int(connector["database.port"]),
        connector["database.user"],
        connector["database.dbname"],
        connector["slot.name"],
    )
    assert parsed.slot == cdc_source().slot_name
    # In-cluster: the database volume bounds the WAL; external: the size its settings state.
    database = load_config(stack_name).cdc.database
    expected_disk = 2 * 2**30 if database.in_cluster is not None else 500 * 2**30
    assert database.wal_disk_size == ("2Gi" if database.in_cluster is not None else "500Gi")
    assert parsed.wal_disk_bytes == expected_disk
    # The password only as a file of the Secret Connect mounts, read-only; never a flag or a variable.
    assert parsed.password_file is not None
    (mount,) = [m for m in container["volumeMounts"] if parsed.password_file.parent == Path(m["mountPath"])]
    assert mount["readOnly"] is True
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == mount["name"]]
    connect = one(stack, "KafkaConnect", kafka_connect.CONNECT_NAME)["spec"]["template"]["pod"]
    (connect_volume,) = connect["volumes"]
    assert volume["secret"]["secretName"] == connect_volume["secret"]["secretName"]
    assert volume["secret"]["items"] == [
        {"key": kafka_connect.PASSWORD_KEY, "path": parsed.password_file.name}
    ]
    assert not any("PASSWORD" in item["name"] and "value" in item for item in container["env"])
    assert not any(
        "password" in arg.lower() and arg != "--postgres-password-file" and "/" not in arg
        for arg in container["args"]
    )
    assert SECRET_PLACEHOLDER not in yaml.safe_dump(one(stack, "Deployment", "lag-exporter"))
    errors = k8s_validation.validate_manifests(
        [one(stack, "Deployment", "lag-exporter"), one(stack, "NetworkPolicy", "lag-exporter")],
        stack.kubernetes_version,
    )
    assert errors == [], "\n".join(errors)


@pytest.mark.parametrize("stack_name", ["dev", "prod"])
def test_with_cdc_the_policies_admit_exactly_exporter_to_postgres(
    with_cdc: dict[str, RenderedStack], stack_name: str
) -> None:
    stack = with_cdc[stack_name]
    config = load_config(stack_name)
    jobs = config.spark.jobs_namespace
    template, _ = exporter_pod(stack)
    exporter = template["metadata"]["labels"]
    egress = one(stack, "NetworkPolicy", "lag-exporter", jobs)["spec"]
    assert matches(egress["podSelector"], exporter)
    database = config.cdc.database
    if database.external is not None:
        blocks = [
            (peer["ipBlock"]["cidr"], port["port"])
            for rule in egress["egress"]
            for peer in rule["to"]
            if "ipBlock" in peer
            for port in rule["ports"]
        ]
        assert blocks == [(cidr, database.external.port) for cidr in database.external.cidrs]
        return
    assert database.in_cluster is not None
    namespace = database.in_cluster.namespace
    pod = one(stack, "StatefulSet", "postgres", namespace)["spec"]["template"]["metadata"]["labels"]

    def egress_ports(labels: dict[str, str]) -> set[int]:
        return {
            port["port"]
            for rule in egress["egress"]
            if any(admits(peer, namespace, labels) for peer in rule["to"])
            for port in rule["ports"]
        }

    assert egress_ports(pod) == {5432}
    assert egress_ports({"app.kubernetes.io/name": "something-else"}) == set()
    # The database's namespace admits the exporter of the jobs' namespace, on PostgreSQL's port only.
    ingress = [
        (peer, port["port"])
        for policy in stack.find("NetworkPolicy")
        if policy["metadata"]["namespace"] == namespace and matches(policy["spec"]["podSelector"], pod)
        for rule in policy["spec"].get("ingress", [])
        for peer in rule["from"]
        for port in rule["ports"]
    ]
    assert {port for peer, port in ingress if admits(peer, jobs, exporter)} == {5432}
    assert not any(admits(peer, "default", exporter) for peer, _ in ingress)
    assert not any(admits(peer, jobs, {"app.kubernetes.io/name": "streaming-job"}) for peer, _ in ingress)


def test_with_cdc_the_exporter_waits_for_connect_whose_component_creates_the_secret(
    mocked: Callable[[str], Stack],
) -> None:
    recorded = run_program(mocked, "dev", strings={CDC_PASSWORD: FAKE_PASSWORD}, secret_keys=[CDC_PASSWORD])
    (exporter,) = [r for r in recorded.resources() if r.typ == "streamstack:monitoring:LagExporter"]
    (connect,) = [r for r in recorded.resources() if r.typ == "streamstack:cdc:KafkaConnect"]
    # depends_on the component means on its children, the Secret the exporter mounts among them.
    secret = recorded.named("Secret", kafka_connect.CREDENTIALS_SECRET)
    assert secret.parent == connect.urn
    assert secret.urn in exporter.dependencies


def test_without_cdc_the_exporter_reads_no_slot() -> None:
    stack = render_stack("dev")  # no cdcDatabasePassword: CDC is left out
    assert not stack.find("KafkaConnect")
    template, container = exporter_pod(stack)
    assert parse_args(container["args"], environment(container)).source is None
    assert not any(arg.startswith("--postgres") for arg in container["args"])
    assert "postgres-credentials" not in {volume["name"] for volume in template["spec"]["volumes"]}
    egress = one(stack, "NetworkPolicy", "lag-exporter")["spec"]["egress"]
    assert 5432 not in {port["port"] for rule in egress for port in rule["ports"]}
