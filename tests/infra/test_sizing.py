"""What the dev stack asks of its one kind node, computed from what `streamstack render` produces, and the
timeouts `pulumi up` gives a cold node that pulls every image on first use.

Requests (what the scheduler reserves; limits do not count), per pod the stack runs:
- our charts' workloads in the rendered manifests (Deployments, StatefulSets, DaemonSets, Jobs): the pod
  template's containers (init containers by Kubernetes' rule), times the replicas (a DaemonSet's: the nodes);
- every SparkApplication's driver and executors. spark-operator 2.5.2 hands spark-submit the application's
  sparkConf, then driver/executor `cores` as spark.{driver,executor}.cores, `coreRequest` as
  spark.kubernetes.{driver,executor}.request.cores, `memory` as spark.{driver,executor}.memory,
  `memoryOverhead` as spark.{driver,executor}.memoryOverhead (kubeflow/spark-operator
  internal/controller/sparkapplication/submission.go). Spark 4.3.0 turns that conf into pod resources in its
  BasicDriverFeatureStep and BasicExecutorFeatureStep, which run here as they are: pyspark ships the
  spark-kubernetes jar, reached through a py4j gateway. Memory is heap plus overhead: the configured
  memoryOverhead where the stack sets one (`streamstack:jobDefaults.driver/executor.memoryOverhead`), which
  replaces Spark's rule; otherwise max(factor x heap, 384 MiB): spark.{driver,executor}.minMemoryOverhead,
  384m since 4.0.0 (docs/configuration.md), and factor 0.4 for a PySpark application unless set
  (spark.kubernetes.memoryOverheadFactor, "0.10 for JVM-based jobs and 0.40 for non-JVM jobs",
  docs/running-on-kubernetes.md), which the driver passes on to its executors;
- Strimzi's pods, from the KafkaNodePool and Kafka resources: each pool's replicas times its resources, and
  the entity operator's topic and user operators with the resources the Kafka resource gives them (Strimzi
  adds none: cluster-operator model/EntityTopicOperator.java takes `topicOperatorSpec.getResources()` as is);
  and Kafka Connect's, from the KafkaConnect resource: its replicas times its resources (one container; no
  init container without `rack`, no build pod without `build`);
- change data capture is part of the dev stack: it is rendered with the stack secret `cdcDatabasePassword`
  set (as the kind workflow sets it), so Kafka Connect and the in-cluster PostgreSQL StatefulSet count;
- the upstream charts, which `render` records as Helm releases without templating them (their archives are not
  reachable offline): each pod's requests from the values the stack passes over the chart's own defaults
  (../shared/upstream-values), plus what an operator adds: prometheus-operator gives Alertmanager a 200Mi
  memory request when it has none (pkg/alertmanager/statefulset.go), and kube-prometheus-stack passes
  `--config-reloader-*=0` when prometheusConfigReloader.resources is empty, so config reloaders request
  nothing. Keys a sub-chart's values.yaml defines but the parent's does not list (grafana.resources,
  grafana.sidecar.resources, kube-state-metrics.resources, prometheus-node-exporter.resources) are `{}` in
  those charts at the versions kube-prometheus-stack 88.5.3 pins.

README.md states the total; the test keeps it true. Pods without requests (listed by the test) still use
memory, so the total has to leave room on the node for them and for kind's own control plane.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import yaml

from streamstack.paths import REPO_ROOT
from streamstack.render import RenderedStack, render_stack
from streamstack.render.validate import CHART_VALUES_FILES, shared_dir
from streamstack.runtimes import find_java
from tests.infra.conftest import Stack, run_program

GIB = Decimal(2**30)
MIB = Decimal(2**20)
# A GitHub-hosted ubuntu-24.04 runner (public repositories): 4 cores and 16 GiB, shared with kind's control
# plane, Docker and the runner itself, and with the pods that request nothing.
MAX_CPU_REQUESTS = Decimal("3.5")
# The dev stack as the kind workflow deploys it: with the CDC database password set (a Pulumi secret; its
# value never reaches a manifest), so change data capture is in it.
CDC_PASSWORD = {"cdcDatabasePassword": {"secure": "v1:Zm9yLXNpemluZzpub3QtYS1yZWFsLWtleQ=="}}
MAX_MEMORY_REQUESTS = 12 * GIB
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "kind.yaml"
README = REPO_ROOT / "README.md"
KAFKA = "kubernetes:kafka.strimzi.io/v1:Kafka"
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
# What a cold kind node needs, with room (seconds): every image pulled on first use while everything else
# starts on the same four cores. kube-prometheus-stack pulls about ten images (operator, admission-webhook
# jobs, Prometheus, Alertmanager, config reloader, Grafana and its sidecars, kube-state-metrics,
# node-exporter); Strimzi's operator image is large; spark-operator is one small image.
RELEASE_TIMEOUTS = {"kube-prometheus-stack": 900, "strimzi-kafka-operator": 900, "spark-operator": 600}
# The Kafka resource is Ready once its broker image is pulled, the KRaft node formatted and started and the
# entity operator runs; a SparkApplication is RUNNING once spark-operator has run spark-submit for it (a JVM
# in the operator's pod, five at a time here) and the driver pod runs.
KAFKA_READY_TIMEOUT_S = 900
SPARK_RUNNING_TIMEOUT_S = 600


# --- quantities --------------------------------------------------------------------------------------------

_MEMORY_UNITS = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "m": Decimal("0.001"),
    "": Decimal(1),
}
_QUANTITY = re.compile(r"^([0-9.]+)([A-Za-z]*)$")


def memory_bytes(quantity: object) -> Decimal:
    match = _QUANTITY.match(str(quantity))
    assert match and match.group(2) in _MEMORY_UNITS, f"not a memory quantity: {quantity!r}"
    return Decimal(match.group(1)) * _MEMORY_UNITS[match.group(2)]


def cpu_cores(quantity: object) -> Decimal:
    match = _QUANTITY.match(str(quantity))
    assert match and match.group(2) in ("", "m"), f"not a CPU quantity: {quantity!r}"
    return Decimal(match.group(1)) / (1000 if match.group(2) == "m" else 1)


@dataclass(frozen=True)
class Requests:
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)

    @classmethod
    def of(cls, resources: Mapping[str, Any] | None) -> Requests:
        """A container's requests; Kubernetes takes a limit without a request as the request."""
        resources = resources or {}
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return cls(
            cpu_cores(requests["cpu"]) if "cpu" in requests else Decimal(0),
            memory_bytes(requests["memory"]) if "memory" in requests else Decimal(0),
        )

    def __add__(self, other: Requests) -> Requests:
        return Requests(self.cpu + other.cpu, self.memory + other.memory)

    def times(self, count: int) -> Requests:
        return Requests(self.cpu * count, self.memory * count)

    @property
    def empty(self) -> bool:
        return self.cpu == 0 and self.memory == 0

    def __str__(self) -> str:
        return f"{self.cpu * 1000:>6.0f}m {self.memory / MIB:>7.0f}Mi"


def total(requests: Sequence[Requests]) -> Requests:
    result = Requests()
    for item in requests:
        result += item
    return result


@dataclass(frozen=True)
class Pods:
    """`count` pods of one kind, each requesting `each`."""

    source: str
    name: str
    count: int
    each: Requests

    @property
    def requests(self) -> Requests:
        return self.each.times(self.count)


def pod_requests(pod_spec: Mapping[str, Any]) -> Requests:
    """Kubernetes' effective pod request: the containers' sum (sidecar init containers included), or the
    largest ordinary init container where that is larger, per resource."""
    init = pod_spec.get("initContainers") or []
    sidecars = [container for container in init if container.get("restartPolicy") == "Always"]
    regular = total([Requests.of(c.get("resources")) for c in [*pod_spec.get("containers", []), *sidecars]])
    ordinary = [Requests.of(c.get("resources")) for c in init if c.get("restartPolicy") != "Always"]
    return Requests(
        max([regular.cpu, *(item.cpu for item in ordinary)]),
        max([regular.memory, *(item.memory for item in ordinary)]),
    )


# --- our charts' workloads ----------------------------------------------------------------------------------

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
# Kinds whose pods this file does not model yet: rendering one fails the sizing instead of leaving it out.
UNMODELLED_POD_KINDS = {
    "Pod",
    "ReplicaSet",
    "CronJob",
    "ScheduledSparkApplication",
    "KafkaBridge",
    "KafkaMirrorMaker2",
    "Prometheus",
    "Alertmanager",
    "ThanosRuler",
}


def workload_pods(stack: RenderedStack, nodes: int) -> list[Pods]:
    pods = []
    for manifest in stack.manifests:
        if manifest["kind"] not in WORKLOAD_KINDS:
            continue
        spec = manifest["spec"]
        count = nodes if manifest["kind"] == "DaemonSet" else int(spec.get("replicas", 1))
        if manifest["kind"] == "Job":
            count = int(spec.get("parallelism", 1))
        name = (
            f"{manifest['kind']} {manifest['metadata'].get('namespace', '')}/{manifest['metadata']['name']}"
        )
        pods.append(Pods("our charts", name, count, pod_requests(spec["template"]["spec"])))
    return pods


# --- Spark, through Spark's own Kubernetes code -------------------------------------------------------------


def submit_conf(application: Mapping[str, Any]) -> dict[str, str]:
    """The conf spark-operator 2.5.2 passes to spark-submit for what sizes the pods (submission.go): the
    application's sparkConf first, then the driver's and executors' fields, which win."""
    spec = application["spec"]
    conf = {
        "spark.master": "k8s://https://kubernetes.default.svc",
        "spark.submit.deployMode": spec.get("mode", "cluster"),
        "spark.kubernetes.namespace": application["metadata"]["namespace"],
        "spark.kubernetes.container.image": spec["image"],
    }
    if spec.get("memoryOverheadFactor"):
        conf["spark.kubernetes.memoryOverheadFactor"] = str(spec["memoryOverheadFactor"])
    conf.update({key: str(value) for key, value in (spec.get("sparkConf") or {}).items()})
    fields = {
        "cores": "spark.{role}.cores",
        "coreRequest": "spark.kubernetes.{role}.request.cores",
        "coreLimit": "spark.kubernetes.{role}.limit.cores",
        "memory": "spark.{role}.memory",
        "memoryOverhead": "spark.{role}.memoryOverhead",
    }
    for role in ("driver", "executor"):
        for field_name, key in fields.items():
            if field_name in spec[role]:
                conf[key.format(role=role)] = str(spec[role][field_name])
    if "instances" in spec["executor"]:
        conf["spark.executor.instances"] = str(spec["executor"]["instances"])
    return conf


class SparkKubernetes:
    """Spark 4.3.0's BasicDriverFeatureStep and BasicExecutorFeatureStep (the code spark-submit runs to make
    the driver's pod, and the driver to make its executors'), called in a JVM through pyspark's gateway."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.jvm = gateway.jvm

    def _scala_object(self, package: Any, name: str) -> Any:
        return getattr(getattr(package, f"{name}$"), "MODULE$")

    def _resources(self, pod: Any) -> Requests:
        requests = pod.container().getResources().getRequests()
        return Requests(cpu_cores(requests["cpu"].toString()), memory_bytes(requests["memory"].toString()))

    def pods(self, application: Mapping[str, Any]) -> tuple[Requests, Requests, int]:
        """(driver pod, one executor pod, executors) as Spark makes them for this SparkApplication."""
        jvm = self.jvm
        spec = application["spec"]
        assert not (spec.get("dynamicAllocation") or {}).get("enabled"), "dynamic allocation: not modelled"
        conf = jvm.org.apache.spark.SparkConf(False)
        for key, value in submit_conf(application).items():
            conf.set(key, value)
        submit = jvm.org.apache.spark.deploy.k8s.submit
        main_file = spec.get("mainApplicationFile") or "local:///opt/app.py"
        if spec["type"] == "Python":
            resource = submit.PythonMainAppResource(main_file)
        elif spec["type"] in ("Scala", "Java"):
            resource = submit.JavaMainAppResource(jvm.scala.Option.apply(main_file))
        else:
            raise AssertionError(f"SparkApplication type {spec['type']}: not modelled")
        none = jvm.scala.Option.empty()
        k8s = jvm.org.apache.spark.deploy.k8s
        driver_conf = k8s.KubernetesConf.createDriverConf(
            conf, "spark-sizing", resource, "main", self.gateway.new_array(jvm.java.lang.String, 0), none
        )
        driver_step = k8s.features.BasicDriverFeatureStep(driver_conf)
        driver = driver_step.configurePod(k8s.SparkPod.initialPod())
        # What the driver adds to its own conf (the overhead factor it settled on, among others), as the
        # executors' conf inherits it.
        added = driver_step.getAdditionalPodSystemProperties().iterator()
        while added.hasNext():
            pair = added.next()
            conf.set(pair._1(), pair._2())
        # The default profile is cached JVM-wide on first use: made afresh from this application's conf, or
        # every application's executors would be sized like the first one's.
        profile = self._scala_object(jvm.org.apache.spark.resource, "ResourceProfile").reInitDefaultProfile(
            conf
        )
        security = jvm.org.apache.spark.SecurityManager(
            conf, none, self._scala_object(jvm.org.apache.spark.internal.config, "package").AUTH_SECRET_FILE()
        )
        executor_conf = k8s.KubernetesConf.createExecutorConf(conf, "1", "spark-sizing", none, profile.id())
        executor = k8s.features.BasicExecutorFeatureStep(executor_conf, security, profile).configurePod(
            k8s.SparkPod.initialPod()
        )
        instances = int(conf.get("spark.executor.instances", "1"))
        return self._resources(driver), self._resources(executor), instances


@pytest.fixture(scope="module")
def spark_kubernetes() -> Iterator[SparkKubernetes]:
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415 - starts nothing at import

    java_home = str(find_java().parent.parent)
    with (
        pytest.MonkeyPatch.context() as patch,
        tempfile.TemporaryFile() as log,
    ):
        patch.setenv("JAVA_HOME", java_home)
        patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        patch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            popen_kwargs={"stdout": log, "stderr": log}
        )
        process: subprocess.Popen[bytes] = gateway.proc
        try:
            yield SparkKubernetes(gateway)
        finally:
            with contextlib.suppress(Exception):
                gateway.shutdown()
            if process.stdin:
                process.stdin.close()  # the gateway JVM exits when its stdin closes
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def spark_pods(stack: RenderedStack, spark: SparkKubernetes) -> list[Pods]:
    pods = []
    for application in stack.find("SparkApplication"):
        name = f"{application['metadata']['namespace']}/{application['metadata']['name']}"
        driver, executor, instances = spark.pods(application)
        pods += [
            Pods("SparkApplications", f"{name} driver", 1, driver),
            Pods("SparkApplications", f"{name} executors", instances, executor),
        ]
    return pods


# --- Strimzi ------------------------------------------------------------------------------------------------


def strimzi_pods(stack: RenderedStack) -> list[Pods]:
    pods = [
        Pods(
            "Strimzi",
            f"KafkaNodePool {pool['metadata']['name']}",
            int(pool["spec"]["replicas"]),
            Requests.of(pool["spec"].get("resources")),
        )
        for pool in stack.find("KafkaNodePool")
    ]
    for kafka in stack.find("Kafka"):
        spec = kafka["spec"]
        for component in ("cruiseControl", "kafkaExporter"):
            assert component not in spec, f"Kafka {component}: its pod is not modelled here yet"
        operators = spec.get("entityOperator") or {}
        containers = [
            {"resources": operators[part].get("resources")} for part in operators if part.endswith("Operator")
        ]
        if containers:
            pods.append(
                Pods(
                    "Strimzi",
                    f"{kafka['metadata']['name']}-entity-operator",
                    1,
                    pod_requests({"containers": containers}),
                )
            )
    for connect in stack.find("KafkaConnect"):
        spec = connect["spec"]
        for field in ("rack", "build"):
            assert field not in spec, f"KafkaConnect {field}: its extra container or pod is not modelled here"
        pods.append(
            Pods(
                "Strimzi",
                f"KafkaConnect {connect['metadata']['name']}",
                int(spec.get("replicas", 3)),  # Strimzi's default
                Requests.of(spec.get("resources")),
            )
        )
    return pods


# --- upstream charts ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpstreamPod:
    """A pod an upstream chart (or the operator it installs) runs: its containers' `resources` as values
    paths; `default_memory` what the operator requests for the first container when those values have none."""

    chart: str
    name: str
    resources: tuple[str, ...]
    enabled: str | None = None
    replicas: str | None = None
    per_node: bool = False
    default_memory: str | None = None


UPSTREAM_PODS = (
    UpstreamPod("strimzi-kafka-operator", "strimzi-cluster-operator", ("resources",), replicas="replicas"),
    UpstreamPod(
        "spark-operator",
        "spark-operator-controller",
        ("controller.resources",),
        replicas="controller.replicas",
    ),
    UpstreamPod(
        "spark-operator",
        "spark-operator-webhook",
        ("webhook.resources",),
        enabled="webhook.enable",
        replicas="webhook.replicas",
    ),
    UpstreamPod(
        "kube-prometheus-stack",
        "prometheus-operator",
        ("prometheusOperator.resources",),
        "prometheusOperator.enabled",
    ),
    UpstreamPod(
        "kube-prometheus-stack",
        "prometheus",
        ("prometheus.prometheusSpec.resources", "prometheusOperator.prometheusConfigReloader.resources"),
        "prometheus.enabled",
        "prometheus.prometheusSpec.replicas",
    ),
    UpstreamPod(
        "kube-prometheus-stack",
        "alertmanager",
        ("alertmanager.alertmanagerSpec.resources", "prometheusOperator.prometheusConfigReloader.resources"),
        "alertmanager.enabled",
        "alertmanager.alertmanagerSpec.replicas",
        default_memory="200Mi",
    ),
    UpstreamPod(
        "kube-prometheus-stack",
        "grafana",
        ("grafana.resources", "grafana.sidecar.resources", "grafana.sidecar.resources"),
        "grafana.enabled",
    ),
    UpstreamPod(
        "kube-prometheus-stack",
        "kube-state-metrics",
        ("kube-state-metrics.resources",),
        "kubeStateMetrics.enabled",
    ),
    UpstreamPod(
        "kube-prometheus-stack",
        "prometheus-node-exporter",
        ("prometheus-node-exporter.resources",),
        "nodeExporter.enabled",
        per_node=True,
    ),
)


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of a release's values over the chart's."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def lookup(values: Mapping[str, Any], path: str, default: Any) -> Any:
    current: Any = values
    for key in path.split("."):
        if not isinstance(current, Mapping) or key not in current:
            return default
        current = current[key]
    return current


def upstream_pods(stack: RenderedStack, nodes: int) -> list[Pods]:
    charts = {release.chart_name: release for release in stack.helm_releases}
    modelled = {pod.chart for pod in UPSTREAM_PODS}
    assert set(charts) <= modelled, f"Helm releases without a sizing model: {sorted(set(charts) - modelled)}"
    pods = []
    for pod in UPSTREAM_PODS:
        if pod.chart not in charts:
            continue
        defaults = yaml.safe_load(
            (shared_dir() / "upstream-values" / CHART_VALUES_FILES[pod.chart]).read_text()
        )
        values = merged(defaults, charts[pod.chart].values)
        if pod.enabled and not lookup(values, pod.enabled, True):
            continue
        containers = [Requests.of(lookup(values, path, {})) for path in pod.resources]
        if pod.default_memory and containers[0].memory == 0:
            containers[0] = Requests(containers[0].cpu, memory_bytes(pod.default_memory))
        count = nodes if pod.per_node else int(lookup(values, pod.replicas, 1) if pod.replicas else 1)
        pods.append(Pods(f"{pod.chart} (Helm)", pod.name, count, total(containers)))
    return pods


# --- the dev stack ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_stack() -> RenderedStack:
    return render_stack("dev", overrides=CDC_PASSWORD)


@pytest.fixture(scope="module")
def dev_pods(dev_stack: RenderedStack, spark_kubernetes: SparkKubernetes) -> list[Pods]:
    kinds = {manifest["kind"] for manifest in dev_stack.manifests}
    assert not kinds & UNMODELLED_POD_KINDS, f"pods of {sorted(kinds & UNMODELLED_POD_KINDS)} are not sized"
    nodes = int(yaml.safe_load(dev_stack.config["streamstack:cluster"])["nodes"])
    return [
        *workload_pods(dev_stack, nodes),
        *spark_pods(dev_stack, spark_kubernetes),
        *strimzi_pods(dev_stack),
        *upstream_pods(dev_stack, nodes),
    ]


def test_a_configured_memory_overhead_replaces_sparks_default(
    dev_stack: RenderedStack, spark_kubernetes: SparkKubernetes
) -> None:
    """Through spark-operator's conf and Spark's own feature steps, memoryOverhead sizes the pods whether it
    is above or below the 384 MiB minimum; without it, the minimum applies."""
    application = dev_stack.find("SparkApplication")[0]
    spec = application["spec"]
    for overhead, expected in (("200m", 480 + 200), ("1g", 480 + 1024), (None, 480 + 384)):
        roles = {}
        for role in ("driver", "executor"):
            roles[role] = {key: value for key, value in spec[role].items() if key != "memoryOverhead"}
            roles[role]["memory"] = "480m"
            if overhead:
                roles[role]["memoryOverhead"] = overhead
        driver, executor, _ = spark_kubernetes.pods({**application, "spec": {**spec, **roles}})
        assert (driver.memory, executor.memory) == (expected * MIB, expected * MIB), overhead


def breakdown(pods: Sequence[Pods]) -> str:
    lines = [f"{item.count:>2} x {item.each}  {item.source}: {item.name}" for item in pods]
    return "\n".join([*lines, f"total {total([item.requests for item in pods])}"])


def spark_mebibytes(size: str) -> int:
    """A Spark memory size (`512m`, `2g`: binary units, MiB when bare) in MiB."""
    match = re.fullmatch(r"(\d+)([kmgt]?)b?", size.lower())
    assert match, f"not a Spark memory size: {size!r}"
    scale = {
        "k": Decimal(1) / 1024,
        "m": Decimal(1),
        "": Decimal(1),
        "g": Decimal(1024),
        "t": Decimal(1024**2),
    }
    return int(Decimal(match.group(1)) * scale[match.group(2)])


def test_every_spark_pod_asks_for_its_heap_plus_sparks_overhead(
    dev_stack: RenderedStack, spark_kubernetes: SparkKubernetes
) -> None:
    """Spark's own code agrees with its documentation: a PySpark pod requests heap + the application's
    memoryOverhead where it sets one, heap + max(0.4 x heap, 384 MiB) otherwise, and the CPU request
    spark-operator passes on (coreRequest)."""
    applications = dev_stack.find("SparkApplication")
    assert applications
    for application in applications:
        driver, executor, instances = spark_kubernetes.pods(application)
        spec = application["spec"]
        assert spec["type"] == "Python"
        assert instances == spec["executor"]["instances"]
        for role, pod in (("driver", driver), ("executor", executor)):
            heap = spark_mebibytes(spec[role]["memory"])
            configured = spec[role].get("memoryOverhead")
            overhead = spark_mebibytes(configured) if configured else max(int(0.4 * heap), 384)
            assert pod.memory == (heap + overhead) * MIB, role
            assert pod.cpu == cpu_cores(spec[role]["coreRequest"]), role


def test_the_dev_stack_fits_a_four_core_sixteen_gib_runner(dev_pods: list[Pods]) -> None:
    requested = total([item.requests for item in dev_pods])
    report = breakdown(dev_pods)
    print(report, file=sys.stderr)
    assert requested.cpu <= MAX_CPU_REQUESTS, report
    assert requested.memory <= MAX_MEMORY_REQUESTS, report
    # Every Spark pod and Kafka broker is counted: the total is not an empty sum.
    assert {item.source for item in dev_pods} >= {"our charts", "SparkApplications", "Strimzi"}


def test_change_data_capture_counts_in_the_dev_budget(dev_stack: RenderedStack, dev_pods: list[Pods]) -> None:
    """Kafka Connect and the in-cluster PostgreSQL are among the pods the total adds up, each asking for
    memory, and Connect's limit holds its fixed heap plus what the JVM measurably holds beside it."""
    from infra.config.cdc import CONNECT_NON_HEAP, jvm_size_bytes  # noqa: PLC0415 - the stack's own rule

    by_name = {item.name: item for item in dev_pods}
    connect = by_name["KafkaConnect cdc"]
    database = by_name["StatefulSet postgres/postgres"]
    assert (connect.count, database.count) == (1, 1)
    assert connect.each.memory > 0 and connect.each.cpu > 0, connect
    assert database.each.memory > 0 and database.each.cpu > 0, database
    (resource,) = dev_stack.find("KafkaConnect")
    options = resource["spec"]["jvmOptions"]
    assert options["-Xms"] == options["-Xmx"]
    limit = memory_bytes(resource["spec"]["resources"]["limits"]["memory"])
    assert connect.each.memory <= limit
    assert limit >= jvm_size_bytes(options["-Xmx"]) + CONNECT_NON_HEAP


def test_readme_states_the_computed_total(dev_pods: list[Pods]) -> None:
    requested = total([item.requests for item in dev_pods])
    unrequested = sorted(item.name for item in dev_pods if item.each.empty)
    stated = f"{requested.cpu:.1f} CPUs and {requested.memory / GIB:.1f} GiB of memory"
    section = README.read_text().split("## On a laptop with Docker and kind", 1)[1].split("```", 1)[0]
    prose = " ".join(section.split())
    assert stated in prose, f"README.md should say {stated!r}\n{breakdown(dev_pods)}"
    spark = {item.each.memory for item in dev_pods if item.source == "SparkApplications"}
    assert len(spark) == 1 and f"Spark pods of {next(iter(spark)) / MIB:.0f} MiB" in prose, spark
    # The pods that request nothing are named there too, so nobody reads the total as everything.
    for name in ("Grafana", "kube-state-metrics", "node-exporter"):
        assert name in section
    assert {"grafana", "kube-state-metrics", "prometheus-node-exporter"} <= set(unrequested)


# --- timeouts -----------------------------------------------------------------------------------------------


def seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(amount) * units[unit] for amount, unit in re.findall(r"(\d+)([smh])", duration))


def test_releases_and_custom_resources_wait_long_enough_for_a_cold_node(
    mocked: Callable[[str], Stack], dev_stack: RenderedStack
) -> None:
    stack = run_program(mocked, "dev")
    workflow_minutes = yaml.safe_load(WORKFLOW.read_text())["jobs"]["kind"]["timeout-minutes"]
    releases = {
        resource.inputs["chart"].rsplit("/", 1)[-1]: resource for resource in stack.of_kind("Release")
    }
    assert set(releases) == set(RELEASE_TIMEOUTS)
    for chart, needed in RELEASE_TIMEOUTS.items():
        timeout = releases[chart].inputs.get("timeout")  # helm.v3.Release: 300 s when unset
        assert timeout is not None and needed <= timeout < workflow_minutes * 60, (chart, timeout)

    ((request, _),) = [value for key, value in stack.monitor.requests.items() if key[0] == KAFKA]
    for operation in ("create", "update"):
        timeout_s = seconds(getattr(request.customTimeouts, operation))
        assert KAFKA_READY_TIMEOUT_S <= timeout_s < workflow_minutes * 60, (operation, timeout_s)

    applications = dev_stack.find("SparkApplication")
    assert applications
    for application in applications:
        annotations = application["metadata"]["annotations"]
        assert annotations["pulumi.com/waitFor"].endswith("=RUNNING")
        assert SPARK_RUNNING_TIMEOUT_S <= int(annotations[TIMEOUT_ANNOTATION]) < workflow_minutes * 60
