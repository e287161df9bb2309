"""LagExporter on its own: it installs charts/lag-exporter, and what the chart renders from Pulumi's values is
a restricted Deployment whose settings the exporter parses, SASL credentials from the KafkaUser Secret,
read-only checkpoint mounts of exactly the jobs' claims, and a ServiceMonitor on the Service's port."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from contracts.kafka_security import jaas_config
from infra.components.lag_exporter import LagExporter, LagExporterArgs
from infra.config import ConfigError, LagExporterConfig
from infra.kafka_access import KafkaClient
from infra.network import Peers
from monitoring.lag_exporter.config import parse_args
from streamstack.paths import REPO_ROOT
from tests.infra.conftest import Objects, Stack, build, load_config

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
