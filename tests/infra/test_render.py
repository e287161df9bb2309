"""`streamstack render`: the Pulumi program runs under mocks, its objects come back as manifests, and both
stacks' objects and Helm values pass the strict validator.

The first tests drive a small program of their own (written to tmp_path) to pin down the capture itself;
the last ones run the real program in infra/ for the dev and prod stacks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamstack.paths import REPO_ROOT
from streamstack.render import (
    SECRET_PLACEHOLDER,
    ProgramError,
    RenderedStack,
    load_project,
    manifest_filename,
    render_stack,
    to_yaml,
    validate_rendered,
    write_rendered,
)
from streamstack.render import validate as k8s_validation

CLI = [sys.executable, "-m", "streamstack.cli"]

PROGRAM = """
import json

import pulumi
import pulumi_kubernetes as k8s

import naming
from parts import Topic

config = pulumi.Config("streamstack")
namespace = config.require("namespace")
kafka = config.require_object("kafka")
if kafka["brokers"] < kafka["replicationFactor"]:
    raise ValueError(
        f"streamstack:kafka.replicationFactor {kafka['replicationFactor']} is above the broker count "
        f"{kafka['brokers']}"
    )

ns = k8s.core.v1.Namespace("namespace", metadata={"name": namespace})
k8s.core.v1.Secret(
    "exporter-credentials",
    metadata={"namespace": ns.metadata["name"]},
    string_data={"password": config.require_secret("exporterPassword")},
)
k8s.core.v1.ConfigMap(
    "settings",
    metadata={"name": naming.name("settings"), "namespace": namespace},
    data={
        "public": "visible",
        "token": config.require_secret("exporterPassword"),
        "dashboard.json": json.dumps({"title": "lag", "panels": []}, indent=2),
    },
)
k8s.apps.v1.Deployment(
    "exporter",
    metadata={"name": "lag-exporter", "namespace": namespace, "labels": {"app": "lag-exporter"}},
    spec={
        "replicas": config.require_int("exporterReplicas"),
        "selector": {"matchLabels": {"app": "lag-exporter"}},
        "template": {
            "metadata": {"labels": {"app": "lag-exporter"}},
            "spec": {
                "containers": [
                    {
                        "name": "exporter",
                        "image": "streamstack/lag-exporter:0.1.0",
                        "ports": [{"name": "metrics", "containerPort": 9308}],
                        "resources": {"requests": {"cpu": 0.25, "memory": "64Mi"}},
                    }
                ]
            },
        },
    },
)
cluster = k8s.apiextensions.CustomResource(
    "kafka",
    api_version="kafka.strimzi.io/v1",
    kind="Kafka",
    metadata={"name": "events", "namespace": namespace},
    spec={
        "kafka": {
            "version": kafka["version"],
            config.get("listenersField") or "listeners": [
                {"name": "plain", "port": 9092, "type": "internal", "tls": False}
            ],
            "config": {"default.replication.factor": kafka["replicationFactor"]},
        }
    },
)
Topic("clicks", namespace, kafka["replicationFactor"])
operator = k8s.helm.v3.Release(
    "strimzi",
    name="strimzi",
    chart="oci://quay.io/strimzi-helm/strimzi-kafka-operator",
    version="1.2.0",
    namespace=namespace,
    value_yaml_files=[pulumi.StringAsset("watchAnyNamespace: false\\nlogLevel: INFO\\n")],
    values={"watchNamespaces": [namespace], "logLevel": "DEBUG", **config.get_object("strimziValues", {})},
)
k8s.helm.v3.Release(
    "spark-operator",
    chart="spark-operator",
    version="2.5.2",
    repository_opts={"repo": "https://kubeflow.github.io/spark-operator"},
    namespace="spark-operator",
    values={"webhook": {"enable": False}, "spark": {"jobNamespaces": [namespace]}},
)
bootstrap = cluster.metadata.apply(lambda m: f"{m['name']}-kafka-bootstrap.{m['namespace']}:9092")
pulumi.export("kafkaBootstrap", bootstrap)
pulumi.export("kafkaApiVersion", cluster.api_version)
pulumi.export("operatorNamespace", operator.status.namespace)
pulumi.export("exporterPassword", config.require_secret("exporterPassword"))
pulumi.export("inspect", {"topics": f"kubectl get kafkatopics -n {namespace}", "replicas": kafka["brokers"]})
"""

NAMING = """
CALLS = []


def name(base):
    CALLS.append(base)  # module state: a second render must start from a fresh import
    return f"{base}-{len(CALLS)}"
"""


# A component whose annotations Pulumi resolves from the module's globals while registering its children,
# after the program's top level has run.
PARTS = """
from __future__ import annotations

import pulumi
import pulumi_kubernetes as kubernetes


class Topic(pulumi.ComponentResource):
    resource: kubernetes.apiextensions.CustomResource

    def __init__(self, name: str, namespace: str, replicas: int) -> None:
        super().__init__("test:kafka:Topic", name, None, None)
        self.resource = kubernetes.apiextensions.CustomResource(
            name,
            api_version="kafka.strimzi.io/v1",
            kind="KafkaTopic",
            metadata={"name": name, "namespace": namespace, "labels": {"strimzi.io/cluster": "events"}},
            spec={"partitions": 3, "replicas": replicas},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"resource": self.resource})
"""


def write_project(root: Path, program: str = PROGRAM) -> Path:
    (root / "prog").mkdir(parents=True)
    (root / "Pulumi.yaml").write_text(
        "name: streamstack\nruntime: python\nmain: prog/\n"
        "config:\n  streamstack:exporterReplicas:\n    default: 1\n"
    )
    (root / "prog" / "__main__.py").write_text(program)
    (root / "prog" / "naming.py").write_text(NAMING)
    (root / "prog" / "parts.py").write_text(PARTS)
    stack = {
        "streamstack:namespace": "demo",
        "streamstack:kafka": {"version": "4.3.1", "brokers": 1, "replicationFactor": 1},
        "streamstack:exporterPassword": {"secure": "v1:not-decryptable-here"},
    }
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": stack}))
    prod = {**stack, "streamstack:exporterReplicas": 2}
    prod["streamstack:kafka"] = {"version": "4.3.1", "brokers": 3, "replicationFactor": 3}
    (root / "Pulumi.prod.yaml").write_text(yaml.safe_dump({"config": prod}))
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project")


def only(rendered: RenderedStack, kind: str) -> dict[str, Any]:
    found = rendered.find(kind)
    assert len(found) == 1, [manifest["metadata"] for manifest in found]
    return found[0]


def test_every_kubernetes_object_of_the_program_comes_back_as_a_manifest(project: Path) -> None:
    rendered = render_stack("dev", project_dir=project)

    kinds = sorted((manifest["kind"], manifest["metadata"]["name"]) for manifest in rendered.manifests)
    assert kinds[0] == ("ConfigMap", "settings-1")
    assert [kind for kind, _ in kinds] == [
        "ConfigMap",
        "Deployment",
        "Kafka",
        "KafkaTopic",
        "Namespace",
        "Secret",
    ]
    deployment = only(rendered, "Deployment")
    assert list(deployment)[:4] == ["apiVersion", "kind", "metadata", "spec"]
    assert deployment["apiVersion"] == "apps/v1"
    assert deployment["spec"]["replicas"] == 1 and type(deployment["spec"]["replicas"]) is int
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9308}]
    assert type(container["ports"][0]["containerPort"]) is int
    assert container["resources"]["requests"]["cpu"] == 0.25
    kafka = only(rendered, "Kafka")
    assert kafka["spec"]["kafka"]["listeners"][0]["port"] == 9092
    assert kafka["spec"]["kafka"]["config"] == {"default.replication.factor": 1}
    secret = only(rendered, "Secret")
    assert secret["metadata"]["namespace"] == "demo"  # an Output of the Namespace, resolved
    assert secret["metadata"]["name"].startswith("exporter-credentials-")  # autonamed, as Pulumi would
    assert rendered.unrendered == []


def test_the_stack_file_project_defaults_and_overrides_make_the_config(project: Path) -> None:
    dev = render_stack("dev", project_dir=project)
    prod = render_stack("prod", project_dir=project)
    overridden = render_stack(
        "dev", project_dir=project, overrides={"exporterReplicas": 4, "namespace": "other"}
    )

    assert only(dev, "Deployment")["spec"]["replicas"] == 1  # Pulumi.yaml default
    assert only(prod, "Deployment")["spec"]["replicas"] == 2  # Pulumi.prod.yaml
    assert only(prod, "KafkaTopic")["spec"]["replicas"] == 3  # an object value from the stack file
    assert only(overridden, "Deployment")["spec"]["replicas"] == 4
    assert only(overridden, "Namespace")["metadata"]["name"] == "other"
    # each run imports the program's own modules afresh
    assert only(prod, "ConfigMap")["metadata"]["name"] == "settings-1"


def test_the_kubernetes_version_to_validate_against_comes_from_the_stack(project: Path) -> None:
    assert render_stack("dev", project_dir=project).kubernetes_version == "1.33"  # the default
    cluster = {"cluster": {"kubernetesVersion": "1.30"}}
    assert render_stack("dev", project_dir=project, overrides=cluster).kubernetes_version == "1.30"


def test_secrets_stay_out_of_manifests_and_outputs(project: Path) -> None:
    rendered = render_stack("dev", project_dir=project)

    assert only(rendered, "Secret")["stringData"] == {"password": SECRET_PLACEHOLDER}
    data = only(rendered, "ConfigMap")["data"]
    assert data["token"] == SECRET_PLACEHOLDER  # the secret leaf only, its neighbours stay readable
    assert data["public"] == "visible"
    assert rendered.outputs["exporterPassword"] == SECRET_PLACEHOLDER
    assert "not-decryptable-here" not in repr(rendered)
    assert "streamstack:exporterPassword" in rendered.config


def test_helm_releases_come_back_with_chart_version_repository_and_merged_values(project: Path) -> None:
    rendered = render_stack("dev", project_dir=project)

    strimzi, spark = sorted(rendered.helm_releases, key=lambda release: release.chart_name)[::-1]
    assert strimzi.chart_name == "strimzi-kafka-operator"
    assert (strimzi.release_name, strimzi.chart, strimzi.version, strimzi.repository, strimzi.namespace) == (
        "strimzi",
        "oci://quay.io/strimzi-helm/strimzi-kafka-operator",
        "1.2.0",
        None,
        "demo",
    )
    # valueYamlFiles first, values on top, as Helm merges them
    assert strimzi.values == {"watchAnyNamespace": False, "logLevel": "DEBUG", "watchNamespaces": ["demo"]}
    assert spark.chart_name == "spark-operator"
    assert spark.repository == "https://kubeflow.github.io/spark-operator"
    assert spark.release_name.startswith("spark-operator-")  # autonamed
    assert spark.values == {"webhook": {"enable": False}, "spark": {"jobNamespaces": ["demo"]}}


def test_stack_outputs_are_resolved(project: Path) -> None:
    outputs = render_stack("dev", project_dir=project).outputs

    assert outputs["kafkaBootstrap"] == "events-kafka-bootstrap.demo:9092"
    assert outputs["kafkaApiVersion"] == "kafka.strimzi.io/v1"
    assert outputs["operatorNamespace"] == "demo"
    assert outputs["inspect"] == {"topics": "kubectl get kafkatopics -n demo", "replicas": 1}
    assert type(outputs["inspect"]["replicas"]) is int


def test_a_guard_rail_fails_the_render_with_the_programs_message(project: Path) -> None:
    too_many_replicas = {"kafka": {"version": "4.3.1", "brokers": 1, "replicationFactor": 3}}

    with pytest.raises(ProgramError) as raised:
        render_stack("dev", project_dir=project, overrides=too_many_replicas)

    assert str(raised.value) == (
        "the Pulumi program for stack 'dev' failed: ValueError: "
        "streamstack:kafka.replicationFactor 3 is above "
        "the broker count 1"
    )
    assert render_stack("dev", project_dir=project).manifests  # nothing left behind for the next run


def test_an_error_inside_an_apply_fails_the_render(tmp_path: Path) -> None:
    program = PROGRAM + textwrap.dedent(
        """
        def check(name):
            raise ValueError(f"streamstack:namespace {name!r}: reserved")

        ns.metadata.apply(lambda m: check(m["name"]))
        """
    )
    project = write_project(tmp_path / "project", program)

    with pytest.raises(ProgramError, match=r"ValueError: streamstack:namespace 'demo': reserved"):
        render_stack("dev", project_dir=project)


def test_a_bug_in_the_program_is_reported_with_its_place(tmp_path: Path) -> None:
    program = PROGRAM + "pulumi.export('broken', cluster.no_such_attribute)\n"
    project = write_project(tmp_path / "project", program)
    line = program.count("\n")

    with pytest.raises(ProgramError) as raised:
        render_stack("dev", project_dir=project)

    assert str(raised.value).startswith("the Pulumi program for stack 'dev' failed: AttributeError: ")
    assert str(raised.value).endswith(f"(at prog/__main__.py:{line})")


def test_an_unknown_stack_is_a_clear_error(project: Path) -> None:
    with pytest.raises(Exception, match=r"no stack 'qa': .*Pulumi.qa.yaml not found \(stacks: dev, prod\)"):
        render_stack("qa", project_dir=project)


def test_validation_of_a_rendered_stack_names_each_bad_object_and_value(project: Path) -> None:
    overrides = {"listenersField": "listners", "strimziValues": {"watchAnyNamespaces": True}}
    rendered = render_stack("dev", project_dir=project, overrides=overrides)

    assert validate_rendered(render_stack("dev", project_dir=project)) == []
    assert validate_rendered(rendered) == [
        "Kafka demo/events: spec.kafka: 'listeners' is a required property",
        "Kafka demo/events: spec.kafka: unknown field(s) 'listners' (did you mean 'listeners'?)",
        "Helm release strimzi: strimzi-kafka-operator values: watchAnyNamespaces: the chart has no such key "
        "(did you mean 'watchAnyNamespace'?)",
    ]


LOCAL_CHART_PROGRAM = """
import pathlib

import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config("streamstack")


def protect_claims(args):
    if args.type_ != "kubernetes:core/v1:PersistentVolumeClaim":
        return None
    protect = pulumi.ResourceOptions(protect=True)
    return pulumi.ResourceTransformResult(args.props, pulumi.ResourceOptions.merge(args.opts, protect))


k8s.helm.v4.Chart(
    "app",
    chart=str(pathlib.Path(__file__).parent / "chart"),
    namespace="demo",
    values={"size": config.get("size") or "1Gi", "greeting": "hello"},
    opts=pulumi.ResourceOptions(transforms=[protect_claims]),
)
k8s.helm.v3.Release(
    "legacy",
    name="legacy",
    chart="./chart",
    namespace="demo",
    value_yaml_files=[pulumi.StringAsset("greeting: hi\\n")],
    values={"size": "2Gi"},
)
"""

LOCAL_CHART = {
    "Chart.yaml": "apiVersion: v2\nname: demo\nversion: 0.1.0\n",
    "values.yaml": "size: 1Gi\ngreeting: hello\n",
    "values.schema.json": json.dumps(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["size", "greeting"],
            "properties": {
                "size": {"type": "string", "pattern": "^[0-9]+Gi$"},
                "greeting": {"type": "string"},
            },
        }
    ),
    "templates/configmap.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        "  namespace: {{ .Release.Namespace }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n"
    ),
    "templates/pvc.yaml": (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {{ .Release.Name }}-data\n"
        "  annotations:\n    helm.sh/resource-policy: keep\nspec:\n  accessModes: [ReadWriteOnce]\n"
        "  resources:\n    requests:\n      storage: {{ .Values.size }}\n"
    ),
}


@pytest.fixture
def chart_project(tmp_path: Path) -> Path:
    root = write_project(tmp_path / "project", LOCAL_CHART_PROGRAM)
    for name, text in LOCAL_CHART.items():
        (root / "prog" / "chart" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "prog" / "chart" / name).write_text(text)
    return root


def test_a_local_chart_is_rendered_with_helm_and_its_objects_join_the_manifests(chart_project: Path) -> None:
    rendered = render_stack("dev", project_dir=chart_project)

    assert rendered.unrendered == [] and rendered.helm_releases == []
    names = sorted((manifest["kind"], manifest["metadata"]["name"]) for manifest in rendered.manifests)
    assert names == [
        ("ConfigMap", "app-greeting"),
        ("ConfigMap", "legacy-greeting"),
        ("PersistentVolumeClaim", "app-data"),
        ("PersistentVolumeClaim", "legacy-data"),
    ]
    charts = {chart.release_name: chart for chart in rendered.local_charts}
    assert charts["app"].chart_dir == (chart_project / "prog" / "chart").resolve()
    # A relative chart path is the program directory's, as for Pulumi; valueYamlFiles under values.
    assert charts["legacy"].chart_dir == charts["app"].chart_dir
    assert charts["legacy"].values == {"greeting": "hi", "size": "2Gi"}
    legacy_greeting = next(o for o in charts["legacy"].objects if o.manifest["kind"] == "ConfigMap").manifest
    assert legacy_greeting["data"] == {"greeting": "hi"}
    for chart in charts.values():
        assert {o.manifest["metadata"]["namespace"] for o in chart.objects} == {"demo"}
    options = {
        (chart.release_name, o.manifest["kind"]): (o.retain_on_delete, o.protect, o.resource_name)
        for chart in charts.values()
        for o in chart.objects
    }
    # helm.sh/resource-policy: keep -> retainOnDelete; the Chart's transform protects its claim only.
    assert options == {
        ("app", "ConfigMap"): (False, False, "app:demo/app-greeting"),
        ("app", "PersistentVolumeClaim"): (True, True, "app:demo/app-data"),
        ("legacy", "ConfigMap"): (False, False, "legacy:demo/legacy-greeting"),
        ("legacy", "PersistentVolumeClaim"): (True, False, "legacy:demo/legacy-data"),
    }
    assert validate_rendered(rendered) == []


def test_a_value_the_local_chart_refuses_fails_the_render_naming_the_chart(chart_project: Path) -> None:
    with pytest.raises(ProgramError) as raised:
        render_stack("dev", project_dir=chart_project, overrides={"size": "1TB"})

    message = str(raised.value)
    assert message.startswith("kubernetes:helm.sh/v4:Chart app: chart chart refuses its values: ")
    assert "/size" in message and "1TB" in message


def test_render_writes_each_local_chart_install_with_its_values(chart_project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_rendered(render_stack("dev", project_dir=chart_project), out)

    release = yaml.safe_load((out / "charts" / "app" / "release.yaml").read_text())
    assert (release["release"], release["namespace"], release["pulumiType"]) == (
        "app",
        "demo",
        "kubernetes:helm.sh/v4:Chart",
    )
    assert {"kind": "PersistentVolumeClaim", "name": "app-data", "retainOnDelete": True, "protect": True} in (
        release["objects"]
    )
    assert yaml.safe_load((out / "charts" / "app" / "values.yaml").read_text()) == {
        "size": "1Gi",
        "greeting": "hello",
    }
    assert (out / "manifests" / "persistentvolumeclaim-demo-app-data.yaml").is_file()


def streamstack(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def test_render_cli_writes_one_file_per_object_and_fails_on_invalid_ones(
    project: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    good = streamstack(
        "render", "--project-dir", str(project), "--stack", "dev", "--out", str(out), "--validate"
    )

    assert good.returncode == 0, good.stderr
    assert "6 objects, 2 Helm releases" in good.stdout and "all valid" in good.stdout
    files = sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file())
    secret_name = render_stack("dev", project_dir=project).find("Secret")[0]["metadata"]["name"]
    spark_release = next(path.name for path in (out / "helm").iterdir() if path.name != "strimzi")
    assert files == sorted(
        [
            ".streamstack-render",
            "helm/strimzi/release.yaml",
            "helm/strimzi/values.yaml",
            f"helm/{spark_release}/release.yaml",
            f"helm/{spark_release}/values.yaml",
            "manifests/configmap-demo-settings-1.yaml",
            "manifests/deployment-demo-lag-exporter.yaml",
            "manifests/kafka-demo-events.yaml",
            "manifests/kafkatopic-demo-clicks.yaml",
            "manifests/namespace-demo.yaml",
            f"manifests/secret-demo-{secret_name}.yaml",
            "outputs.yaml",
        ]
    )
    configmap_text = (out / "manifests" / "configmap-demo-settings-1.yaml").read_text()
    assert "dashboard.json: |" in configmap_text  # multi-line strings as blocks, readable in review
    written = [yaml.safe_load(path.read_text()) for path in sorted((out / "manifests").iterdir())]
    assert k8s_validation.validate_manifests(written) == []
    release = yaml.safe_load((out / "helm" / "strimzi" / "release.yaml").read_text())
    assert (
        release["chart"] == "oci://quay.io/strimzi-helm/strimzi-kafka-operator"
        and release["version"] == "1.2.0"
    )
    assert (
        yaml.safe_load((out / "outputs.yaml").read_text())["kafkaBootstrap"]
        == "events-kafka-bootstrap.demo:9092"
    )

    (project / "Pulumi.dev.yaml").write_text(
        (project / "Pulumi.dev.yaml").read_text() + "  streamstack:listenersField: listners\n"
    )
    bad = streamstack(
        "render", "--project-dir", str(project), "--stack", "dev", "--out", str(out), "--validate"
    )

    assert bad.returncode == 1
    assert "invalid: Kafka demo/events: spec.kafka: unknown field(s) 'listners'" in bad.stderr
    assert "2 errors" in bad.stdout


def test_render_cli_reports_a_program_error_in_one_line(project: Path, tmp_path: Path) -> None:
    (project / "Pulumi.dev.yaml").write_text(
        (project / "Pulumi.dev.yaml").read_text().replace("replicationFactor: 1", "replicationFactor: 2")
    )
    result = streamstack(
        "render", "--project-dir", str(project), "--stack", "dev", "--out", str(tmp_path / "o")
    )

    assert result.returncode == 1
    assert result.stderr.strip() == (
        "streamstack: error: the Pulumi program for stack 'dev' failed: ValueError: "
        "streamstack:kafka.replicationFactor 2 is above the broker count 1"
    )


def test_render_refuses_to_write_into_a_directory_it_did_not_write(project: Path, tmp_path: Path) -> None:
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")

    with pytest.raises(Exception, match="is not empty and was not written by `streamstack render`"):
        write_rendered(render_stack("dev", project_dir=project), occupied)
    assert (occupied / "notes.txt").read_text() == "mine"


# --- the real program in infra/ ------------------------------------------------------------------------

STACKS = ["dev", "prod"]
UPSTREAM_CHARTS = {
    "strimzi-kafka-operator": "1.2.0",
    "spark-operator": "2.5.2",
    "kube-prometheus-stack": "88.5.3",
}
EXPECTED_KINDS = {
    "CustomResourceDefinition",
    "Kafka",
    "KafkaNodePool",
    "KafkaTopic",
    "KafkaUser",
    "SparkApplication",
    "PodMonitor",
    "ServiceMonitor",
    "PrometheusRule",
    "Deployment",
    "NetworkPolicy",
    "PersistentVolumeClaim",
}


@pytest.fixture(scope="module", params=STACKS)
def real_stack(request: pytest.FixtureRequest) -> RenderedStack:
    project = load_project(REPO_ROOT)
    assert (project.program_dir / "__main__.py").is_file(), f"no Pulumi program in {project.program_dir}"
    return render_stack(request.param)


def test_every_object_of_the_stack_validates(real_stack: RenderedStack) -> None:
    kinds = {manifest["kind"] for manifest in real_stack.manifests}
    assert kinds >= EXPECTED_KINDS, sorted(kinds)
    errors = k8s_validation.validate_manifests(real_stack.manifests, real_stack.kubernetes_version)
    assert errors == [], "\n".join(errors)
    assert validate_rendered(real_stack) == []


def test_our_charts_are_rendered_with_helm_for_every_job_and_the_exporter(real_stack: RenderedStack) -> None:
    assert real_stack.unrendered == []
    installs = sorted((chart.chart_name, chart.release_name) for chart in real_stack.local_charts)
    jobs = real_stack.outputs["jobs"]
    assert installs == sorted([("lag-exporter", "lag-exporter"), *(("streaming-job", job) for job in jobs)])
    for chart in real_stack.local_charts:
        assert chart.chart_dir == REPO_ROOT / "charts" / chart.chart_name
        assert chart.resource_type == "kubernetes:helm.sh/v4:Chart"
        for item in chart.objects:
            assert item.manifest in real_stack.manifests
    # Our charts are not upstream releases: those are only the three pinned operators' charts.
    assert {release.chart_name for release in real_stack.helm_releases} == set(UPSTREAM_CHARTS)


def test_every_helm_release_uses_a_pinned_upstream_chart_with_known_values(real_stack: RenderedStack) -> None:
    charts = {release.chart_name: release for release in real_stack.helm_releases}
    assert {name: release.version for name, release in charts.items()} == UPSTREAM_CHARTS
    for name, release in charts.items():
        assert release.values, f"{name}: no values"
        assert k8s_validation.check_chart_values(name, release.values) == []


def test_render_cli_writes_the_dev_stack(tmp_path: Path) -> None:
    out = tmp_path / "dev"
    result = streamstack("render", "--stack", "dev", "--out", str(out), "--validate")

    assert result.returncode == 0, result.stdout + result.stderr
    rendered = render_stack("dev")
    manifests = sorted(path.name for path in (out / "manifests").iterdir())
    assert manifests == sorted(manifest_filename(manifest) for manifest in rendered.manifests)
    for release in rendered.helm_releases:
        assert (out / "helm" / release.release_name / "values.yaml").is_file()
        assert yaml.safe_load((out / "helm" / release.release_name / "release.yaml").read_text())[
            "version"
        ] == (release.version)
    assert yaml.safe_load((out / "outputs.yaml").read_text()) == rendered.outputs
    assert sorted(path.name for path in (out / "charts").iterdir()) == sorted(
        chart.release_name for chart in rendered.local_charts
    )


def test_rendered_yaml_is_the_same_bytes_whatever_order_the_engine_hands_keys_over() -> None:
    # The Pulumi engine's order of an object's keys changes between runs (protobuf maps); the files must not.
    first = {
        "spec": {"b": 1, "a": [{"y": 1, "x": 2}]},
        "metadata": {"name": "n"},
        "kind": "K",
        "apiVersion": "v1",
    }
    second = {
        "apiVersion": "v1",
        "kind": "K",
        "metadata": {"name": "n"},
        "spec": {"a": [{"x": 2, "y": 1}], "b": 1},
    }
    assert to_yaml(first) == to_yaml(second)
    assert to_yaml(first).splitlines()[:3] == ["apiVersion: v1", "kind: K", "metadata:"]
