"""The whole program (infra/__main__.py) on Pulumi.dev.yaml and Pulumi.prod.yaml under mocks: everything is
built, on the one explicit provider, in dependency order, wired together, with the promised outputs; and a
guard rail stops the program before any resource exists. The jobs' and the exporter's objects come from our
charts, rendered with helm from the values the program passes (Stack.chart_objects)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError
from streamstack.render import HELM_CHART_TYPE
from tests.infra.conftest import Objects, Recorded, Stack, load_config, run_program, stack_sections

STACKS = ("dev", "prod")
# What each job reads and writes, from the jobs' runbooks (jobs/<job>/main.py docstrings): user-view reads
# back its own output topic to write only the difference.
JOB_TOPICS = {
    "clickstream-windows": ({"page-views"}, {"page-views-per-url", "page-view-windows", "page-views-late"}),
    "sessionization": ({"page-views"}, {"user-sessions"}),
    "view-bursts": ({"page-views", "view-bursts"}, {"view-bursts", "view-burst-alerts", "page-views-late"}),
    "ad-attribution": ({"ad-impressions", "ad-clicks"}, {"ad-attributions"}),
    "user-enrichment": ({"page-views", "users"}, {"page-views-enriched"}),
    "user-view": ({"users", "orders", "user-view"}, {"user-view"}),
    "order-state": ({"order-events"}, {"order-state"}),
}


def component(stack: Stack, typ: str, name: str) -> Recorded:
    matches = [r for r in stack.resources() if r.typ == typ and r.name == name]
    assert len(matches) == 1, f"{typ} {name}: {len(matches)} found"
    return matches[0]


def children(stack: Stack, parent: Recorded) -> set[str]:
    """The URNs of the Kubernetes objects and chart installs a component made."""
    found = {
        r.urn for r in stack.resources() if (r.custom or r.typ == HELM_CHART_TYPE) and r.parent == parent.urn
    }
    assert found, f"{parent.name} made nothing"
    return found


def chart_objects(stack: Stack, stack_name: str) -> Objects:
    return stack.chart_objects(load_config(stack_name).cluster.kubernetes_version)


def parsed_job(application: dict[str, Any], module: str) -> Any:
    return importlib.import_module(f"jobs.{module}.main").parse_args(application["spec"]["arguments"])


@pytest.mark.parametrize("stack_name", STACKS)
def test_program_builds_every_component_of_the_stack(mocked: Callable[[str], Stack], stack_name: str) -> None:
    stack = run_program(mocked, stack_name)
    config = load_config(stack_name)
    kinds = [resource.kind for resource in stack.resources() if resource.custom]
    chart_kinds = [item.manifest["kind"] for item in chart_objects(stack, stack_name).objects]
    # The jobs' and the exporter's objects come only from the charts.
    assert not {"SparkApplication", "PersistentVolumeClaim", "ServiceMonitor", "Deployment"} & set(kinds)
    assert (
        chart_kinds.count("SparkApplication")
        == chart_kinds.count("PersistentVolumeClaim")
        == len(config.jobs)
    )
    assert chart_kinds.count("PodMonitor") == len(config.jobs)  # each driver
    assert chart_kinds.count("ServiceMonitor") == chart_kinds.count("Deployment") == 1  # the lag exporter
    charts = sorted(Path(chart.inputs["chart"]).name for chart in stack.charts())
    assert charts == sorted(["lag-exporter", *["streaming-job"] * len(config.jobs)])
    assert kinds.count("KafkaTopic") == len(config.topics)
    # A user per job, the exporter's, and in dev the load generators'.
    assert kinds.count("KafkaUser") == len(config.jobs) + 1 + (stack_name == "dev")
    assert kinds.count("KafkaNodePool") == len(config.kafka.node_pools)
    assert kinds.count("Kafka") == 1
    assert kinds.count("PodMonitor") == 1  # the brokers
    releases = {r.inputs["chart"].rsplit("/", 1)[-1]: r.inputs["version"] for r in stack.of_kind("Release")}
    assert releases == {
        "strimzi-kafka-operator": "1.2.0",
        "spark-operator": "2.5.2",
        "kube-prometheus-stack": "88.5.3",
    }
    components = {r.typ for r in stack.resources() if not r.custom}
    assert components >= {
        "streamstack:kafka:KafkaCluster",
        "streamstack:spark:SparkPlatform",
        "streamstack:monitoring:Monitoring",
        "streamstack:jobs:StreamingJob",
        "streamstack:monitoring:LagExporter",
    }


@pytest.mark.parametrize("stack_name", STACKS)
def test_every_kubernetes_object_goes_through_the_explicit_provider(
    mocked: Callable[[str], Stack], stack_name: str
) -> None:
    stack = run_program(mocked, stack_name)
    provider = component(stack, "pulumi:providers:kubernetes", "kubernetes")
    assert provider.inputs.get("context") == stack_sections(stack_name)["cluster"].get("kubeconfigContext")
    objects = [
        r
        for r in stack.resources()
        if (r.custom or r.typ == HELM_CHART_TYPE) and r.typ.startswith("kubernetes:")
    ]
    assert len([r for r in objects if r.typ == HELM_CHART_TYPE]) == len(load_config(stack_name).jobs) + 1
    assert {r.provider.rsplit("::", 1)[0] for r in objects} == {provider.urn}


def test_components_are_created_in_dependency_order(mocked: Callable[[str], Stack]) -> None:
    stack = run_program(mocked, "dev")
    monitoring = component(stack, "streamstack:monitoring:Monitoring", "monitoring")
    spark = component(stack, "streamstack:spark:SparkPlatform", "spark")
    kafka = component(stack, "streamstack:kafka:KafkaCluster", "kafka")
    exporter = component(stack, "streamstack:monitoring:LagExporter", "lag-exporter")
    jobs = [r for r in stack.resources() if r.typ == "streamstack:jobs:StreamingJob"]
    # depends_on a component waits for every resource in it (the SDK expands it into its children).
    assert children(stack, monitoring) <= set(spark.dependencies)
    assert children(stack, monitoring) | children(stack, spark) <= set(kafka.dependencies)
    for job in jobs:
        assert children(stack, spark) | children(stack, kafka) <= set(job.dependencies)
    assert children(stack, kafka).union(*(children(stack, job) for job in jobs)) <= set(exporter.dependencies)
    # Inside the components: the namespace's NetworkPolicies and the operator before its resources, Kafka
    # before topics and users, the claim before the application that mounts it (the chart's depends-on
    # annotation, which helm.v4.Chart follows).
    (strimzi,) = [r for r in stack.of_kind("Release") if r.inputs["name"] == "strimzi"]
    kafka_policies = {p.urn for p in stack.of_kind("NetworkPolicy") if p.metadata["namespace"] == "kafka"}
    assert kafka_policies and kafka_policies <= set(strimzi.dependencies)
    broker = stack.named("Kafka", "streamstack")
    assert strimzi.urn in broker.dependencies
    assert all(broker.urn in topic.dependencies for topic in stack.of_kind("KafkaTopic"))
    assert all(broker.urn in user.dependencies for user in stack.of_kind("KafkaUser"))
    objects = chart_objects(stack, "dev")
    for item in objects.of_kind("SparkApplication"):
        application = item.manifest
        claim = objects.manifest("PersistentVolumeClaim", f"{application['metadata']['name']}-checkpoints")
        assert application["metadata"]["annotations"]["config.kubernetes.io/depends-on"] == (
            f"/namespaces/{claim['metadata']['namespace']}/PersistentVolumeClaim/{claim['metadata']['name']}"
        )


@pytest.mark.parametrize("stack_name", STACKS)
def test_each_jobs_kafka_user_allows_exactly_its_topics_and_groups(
    mocked: Callable[[str], Stack], stack_name: str
) -> None:
    stack = run_program(mocked, stack_name)
    config = load_config(stack_name)
    objects = chart_objects(stack, stack_name)
    for job in config.jobs:
        application = objects.manifest("SparkApplication", job.name)
        parsed = parsed_job(application, job.module)
        topics_in_arguments = {*parsed.topics_by_flag().values(), parsed.streaming.dead_letter_topic}
        acls = stack.named("KafkaUser", job.name).spec["authorization"]["acls"]
        topic_acls = {
            acl["resource"]["name"]: set(acl["operations"])
            for acl in acls
            if acl["resource"]["type"] == "topic"
        }
        assert all(
            acl["resource"]["patternType"] == "literal" for acl in acls if acl["resource"]["type"] == "topic"
        )
        assert set(topic_acls) == topics_in_arguments
        reads, writes = JOB_TOPICS[job.name]
        assert {topic for topic, ops in topic_acls.items() if "Read" in ops} == reads
        assert {topic for topic, ops in topic_acls.items() if "Write" in ops} == writes | {"dead-letters"}
        groups = {
            (acl["resource"]["name"], acl["resource"]["patternType"])
            for acl in acls
            if acl["resource"]["type"] == "group"
        }
        shadow = f"{parsed.streaming.shadow_group_prefix}{job.name}"
        assert groups == {
            (shadow, "prefix"),
            ("spark-kafka-source-", "prefix"),
            ("spark-kafka-relation-", "prefix"),
        }
        assert not [acl for acl in acls if acl["resource"]["type"] not in ("topic", "group")]


def test_secrets_referenced_by_pods_are_kafka_user_secrets_in_their_namespace(
    mocked: Callable[[str], Stack],
) -> None:
    stack = run_program(mocked, "dev")
    objects = chart_objects(stack, "dev")
    users = {(user.metadata["namespace"], user.metadata["name"]) for user in stack.of_kind("KafkaUser")}
    references = 0
    for item in objects.of_kind("SparkApplication"):
        application = item.manifest
        namespace = application["metadata"]["namespace"]
        for key, value in application["spec"]["sparkConf"].items():
            if ".secretKeyRef." in key:
                secret, _, field = value.partition(":")
                assert (namespace, secret) == (namespace, application["metadata"]["name"])
                assert (namespace, secret) in users and field == "sasl.jaas.config"
                references += 1
    assert references == 2 * len(load_config("dev").jobs)  # driver and executors of each job
    deployment = objects.manifest("Deployment", "lag-exporter")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    secret_refs = [env["valueFrom"]["secretKeyRef"] for env in container["env"] if "valueFrom" in env]
    assert secret_refs == [{"name": "lag-exporter", "key": "sasl.jaas.config"}]
    assert (deployment["metadata"]["namespace"], "lag-exporter") in users
    (strimzi,) = [r for r in stack.of_kind("Release") if r.inputs["name"] == "strimzi"]
    assert {namespace for namespace, _ in users} <= set(strimzi.inputs["values"]["watchNamespaces"])


def test_exporter_mounts_exactly_the_claims_the_jobs_create(mocked: Callable[[str], Stack]) -> None:
    stack = run_program(mocked, "dev")
    objects = chart_objects(stack, "dev")
    claims = {claim.manifest["metadata"]["name"] for claim in objects.of_kind("PersistentVolumeClaim")}
    volumes = objects.manifest("Deployment", "lag-exporter")["spec"]["template"]["spec"]["volumes"]
    mounted = {
        volume["persistentVolumeClaim"]["claimName"]
        for volume in volumes
        if "persistentVolumeClaim" in volume
    }
    assert mounted == claims


@pytest.mark.parametrize("stack_name", STACKS)
def test_outputs_give_the_bootstrap_address_and_exact_kubectl_commands(
    mocked: Callable[[str], Stack], stack_name: str
) -> None:
    stack = run_program(mocked, stack_name)
    outputs = stack.exports
    kafka = stack.named("Kafka", "streamstack")
    # The clients' listener: SCRAM over TLS in prod, the plain SCRAM one in dev (`kafka.clientTls`).
    tls = stack_name == "prod"
    (listener,) = [item for item in kafka.spec["kafka"]["listeners"] if item["tls"] is tls]
    assert listener["authentication"] == {"type": "scram-sha-512"}
    assert outputs["kafkaBootstrapServers"] == f"streamstack-kafka-bootstrap.kafka.svc:{listener['port']:.0f}"
    assert outputs["kafkaSecurity"].startswith("SASL_SSL + " if tls else "SASL_PLAINTEXT + ")
    assert outputs["kubectlJobs"] == "kubectl get sparkapplications -n streaming"
    assert outputs["kubectlTopics"] == "kubectl get kafkatopics -n kafka"
    assert (
        outputs["grafanaPortForward"]
        == "kubectl port-forward -n monitoring svc/kube-prometheus-stack-grafana 3000:80"
    )
    assert outputs["jobs"] == [job.name for job in load_config(stack_name).jobs]
    # The commands point where the objects are.
    applications = chart_objects(stack, stack_name).of_kind("SparkApplication")
    namespaces = {item.manifest["metadata"]["namespace"] for item in applications}
    assert namespaces == {outputs["kubectlJobs"].rsplit(" ", 1)[-1]} == {outputs["jobsNamespace"]}
    topic_namespaces = {topic.metadata["namespace"] for topic in stack.of_kind("KafkaTopic")}
    assert topic_namespaces == {outputs["kubectlTopics"].rsplit(" ", 1)[-1]}
    release = next(r for r in stack.of_kind("Release") if r.inputs["chart"] == "kube-prometheus-stack")
    assert (
        f"-n {release.inputs['namespace']} svc/{release.inputs['values']['fullnameOverride']}-grafana "
        in (outputs["grafanaPortForward"])
    )
    if stack_name == "dev":
        generator = stack.named("KafkaUser", outputs["loadGeneratorSecret"])
        assert generator.metadata["namespace"] == outputs["jobsNamespace"]
        written = {acl["resource"].get("name") for acl in generator.spec["authorization"]["acls"]}
        assert set(outputs["loadGeneratorTopics"]) == written - {None}
        policy = stack.named("NetworkPolicy", "load-generator")
        assert policy.spec["podSelector"]["matchLabels"] == outputs["loadGeneratorPodLabels"]
    else:
        assert "loadGeneratorSecret" not in outputs


@pytest.mark.parametrize(
    ("section", "change", "setting"),
    [
        ("kafka", {"version": "3.9.0"}, "streamstack:kafka.version"),
        (
            "spark",
            {"image": "registry.example.com/streamstack/jobs:0.1.0-spark4.2.0"},
            "streamstack:spark.image",
        ),
        ("kafka", {"replicationFactor": 4}, "streamstack:kafka.replicationFactor"),
        (
            "jobDefaults",
            {"checkpoint": {"accessMode": "ReadWriteOnce"}},
            "streamstack:jobDefaults.checkpoint.accessMode",
        ),
    ],
)
def test_a_guard_rail_stops_the_program_before_any_resource(
    mocked: Callable[[str], Stack], section: str, change: dict[str, Any], setting: str
) -> None:
    sections = stack_sections("prod")
    sections[section] = {**sections[section], **change}
    with pytest.raises(ConfigError, match=f"^{re.escape(setting)}:"):
        run_program(mocked, "prod", sections)
