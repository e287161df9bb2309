"""Rendering our charts with the real helm, and the pods Spark starts from a SparkApplication."""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from contracts.pipeline import DEAD_LETTER_FLAG, load_pipeline
from streamstack.paths import REPO_ROOT
from streamstack.render.validate import DEFAULT_KUBERNETES_VERSION

CHARTS_DIR = REPO_ROOT / "charts"
KUBE_VERSION = f"{DEFAULT_KUBERNETES_VERSION}.0"
HELM_TIMEOUT_S = 60
# The namespace each chart is installed into in the stack.
NAMESPACES = {"streaming-job": "streaming", "lag-exporter": "monitoring"}
RELEASE = "ci"


@dataclass(frozen=True)
class Scenario:
    """A chart with its default values, or with one of its ci/*.yaml values files on top."""

    chart: str
    values_file: Path | None

    @property
    def id(self) -> str:
        return f"{self.chart}:{self.values_file.stem if self.values_file else 'defaults'}"

    @property
    def chart_dir(self) -> Path:
        return CHARTS_DIR / self.chart

    def values_args(self) -> list[str]:
        return ["--values", str(self.values_file)] if self.values_file else []


def scenarios() -> list[Scenario]:
    found = []
    for chart in sorted(NAMESPACES):
        found.append(Scenario(chart, None))
        found += [Scenario(chart, path) for path in sorted((CHARTS_DIR / chart / "ci").glob("*.yaml"))]
    return found


def run_helm(helm: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False
    )


def template(helm: Path, chart: str, extra: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """`helm template` of a chart into its namespace, for the Kubernetes version the stack targets."""
    return run_helm(
        helm,
        [
            "template",
            RELEASE,
            str(CHARTS_DIR / chart),
            "--namespace",
            NAMESPACES[chart],
            "--kube-version",
            KUBE_VERSION,
            *extra,
        ],
    )


def pipeline_arguments(module: str) -> list[str]:
    """helm flags giving the job of `module` its topics and settings from pipeline.yaml, as the stack does
    (a job has none of its own)."""
    pipeline = load_pipeline()
    (job,) = [job for job in pipeline.jobs if job.module == module]
    arguments = [DEAD_LETTER_FLAG, pipeline.dead_letter_topic, *job.arguments()]
    return ["--set-json", f"job.extraArguments={json.dumps(arguments)}"]


def render(helm: Path, scenario: Scenario, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    result = template(helm, scenario.chart, [*scenario.values_args(), *extra])
    assert result.returncode == 0, f"helm template {scenario.id} failed:\n{result.stderr}"
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def of_kind(manifests: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [manifest for manifest in manifests if manifest["kind"] == kind]


def one(manifests: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(manifests, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


_SPARK_VOLUME = re.compile(
    r"^spark\.kubernetes\.(driver|executor)\.volumes\.(persistentVolumeClaim|emptyDir)\.([^.]+)\.(.+)$"
)
_SPARK_ENV = re.compile(r"^spark\.(kubernetes\.driverEnv|executorEnv)\.(.+)$")
_SPARK_SECRET_ENV = re.compile(r"^spark\.kubernetes\.(driver|executor)\.secretKeyRef\.(.+)$")
_SPARK_SECRET_VOLUME = re.compile(r"^spark\.kubernetes\.(driver|executor)\.secrets\.(.+)$")
_SPARK_SIZE = re.compile(r"^(\d+)([kmgt]?)$", re.IGNORECASE)
# Spark on Kubernetes adds this much memory to a non-JVM (here: Python) pod's heap (spark.kubernetes.
# memoryOverheadFactor's default for PySpark), at least 384 MiB.
PYSPARK_OVERHEAD_FACTOR = 0.4
MIN_OVERHEAD_MIB = 384


def _mebibytes(size: str) -> int:
    match = _SPARK_SIZE.match(size)
    assert match, f"not a Spark size: {size!r}"
    scale = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}[match.group(2).lower()]
    return math.ceil(int(match.group(1)) * scale)


def spark_pods(application: dict[str, Any]) -> list[dict[str, Any]]:
    """The driver and one executor pod as Spark on Kubernetes builds them from the SparkApplication: the
    role's pod template, plus the image, resources and the volumes given as spark.kubernetes.*.volumes.*
    conf (spark-operator passes the rest through as spark-submit --conf). Used to put the pods' security
    settings through the same checks as any Deployment, since nothing checks a pod template inside a
    custom resource."""
    spec = application["spec"]
    metadata = application["metadata"]
    volumes: dict[str, dict[str, dict[str, Any]]] = {"driver": {}, "executor": {}}
    env: dict[str, list[dict[str, Any]]] = {"driver": [], "executor": []}
    for key, value in sorted(spec.get("sparkConf", {}).items()):
        if match := _SPARK_VOLUME.match(key):
            role, volume_type, name, setting = match.groups()
            entry = volumes[role].setdefault(name, {"type": volume_type, "settings": {}})
            entry["settings"][setting] = value
        elif match := _SPARK_ENV.match(key):
            role = "driver" if match.group(1) == "kubernetes.driverEnv" else "executor"
            env[role].append({"name": match.group(2), "value": value})
        elif match := _SPARK_SECRET_VOLUME.match(key):
            role, secret = match.groups()
            volumes[role][secret] = {"type": "secret", "settings": {"mount.path": value}}
        elif match := _SPARK_SECRET_ENV.match(key):
            secret, _, secret_key = value.partition(":")
            env[match.group(1)].append(
                {"name": match.group(2), "valueFrom": {"secretKeyRef": {"name": secret, "key": secret_key}}}
            )
    pods = []
    for role in ("driver", "executor"):
        part = spec[role]
        template = part["template"]
        memory_mib = _mebibytes(part["memory"])
        memory = f"{memory_mib + max(MIN_OVERHEAD_MIB, math.ceil(memory_mib * PYSPARK_OVERHEAD_FACTOR))}Mi"
        container = dict(template["spec"]["containers"][0])
        container.update(
            image=spec["image"],
            imagePullPolicy=spec["imagePullPolicy"],
            resources={
                "requests": {"cpu": part["coreRequest"], "memory": memory},
                "limits": {"cpu": part["coreLimit"], "memory": memory},
            },
            env=env[role],
            volumeMounts=[
                {"name": name, "mountPath": entry["settings"]["mount.path"]}
                for name, entry in sorted(volumes[role].items())
            ],
        )
        pod_volumes = []
        for name, entry in sorted(volumes[role].items()):
            settings = entry["settings"]
            if entry["type"] == "secret":
                pod_volumes.append({"name": name, "secret": {"secretName": name}})
            elif entry["type"] == "persistentVolumeClaim":
                pod_volumes.append(
                    {"name": name, "persistentVolumeClaim": {"claimName": settings["options.claimName"]}}
                )
            else:
                pod_volumes.append({"name": name, "emptyDir": {"sizeLimit": settings["options.sizeLimit"]}})
        pod_spec = {
            **template["spec"],
            "containers": [container],
            "volumes": pod_volumes,
            "restartPolicy": "Never",
        }
        if role == "driver":
            pod_spec["serviceAccountName"] = part["serviceAccount"]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{metadata['name']}-{role}",
                    "namespace": metadata["namespace"],
                    "labels": {**template["metadata"]["labels"], "spark-role": role},
                    "annotations": template["metadata"].get("annotations", {}),
                },
                "spec": pod_spec,
            }
        )
    return pods
