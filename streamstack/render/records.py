"""What a render produces: the records of Helm releases, local charts and their objects, and the resource
types the mock engine treats specially."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT
from streamstack.render.project import _kubernetes_version

__all__ = [
    "CLUSTER_CA_SECRET_SUFFIX",
    "CRD_TYPE",
    "HELM_CHART_TYPE",
    "HELM_RELEASE_TYPE",
    "HELM_TEMPLATE_TIMEOUT_S",
    "REMOTE_COMPONENT_TYPES",
    "RENDER_MARKER",
    "RESOURCE_POLICY_ANNOTATION",
    "SECRET_PLACEHOLDER",
    "SECRET_TYPE",
    "UNKNOWN_PLACEHOLDER",
    "ChartObject",
    "ChartRenderError",
    "HelmRelease",
    "LocalChart",
    "ProgramError",
    "Registration",
    "RenderedStack",
]

HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"


HELM_CHART_TYPE = "kubernetes:helm.sh/v4:Chart"


CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


SECRET_TYPE = "kubernetes:core/v1:Secret"


# Strimzi's `<cluster>-cluster-ca-cert`, which the program reads (Secret.get) to copy the CA to its clients.
CLUSTER_CA_SECRET_SUFFIX = "-cluster-ca-cert"


# Kubernetes components implemented by the provider: under mocks they register but create nothing (a
# helm.v4.Chart of a local chart directory is rendered here with helm instead).
REMOTE_COMPONENT_TYPES = frozenset(
    {
        HELM_CHART_TYPE,
        "kubernetes:yaml/v2:ConfigFile",
        "kubernetes:yaml/v2:ConfigGroup",
        "kubernetes:kustomize/v2:Directory",
    }
)


HELM_TEMPLATE_TIMEOUT_S = 120


RESOURCE_POLICY_ANNOTATION = "helm.sh/resource-policy"


SECRET_PLACEHOLDER = "[secret]"


UNKNOWN_PLACEHOLDER = "[unknown until deployed]"


RENDER_MARKER = ".streamstack-render"


class ProgramError(StreamstackError):
    """The Pulumi program failed (a guard rail, a bad config value, a bug); the message is the program's."""


@dataclass(frozen=True)
class HelmRelease:
    """A `helm.v3.Release` as Helm would install it: values are the chart-level values after merging
    `valueYamlFiles` under `values`."""

    resource_name: str
    release_name: str
    chart: str
    version: str | None
    repository: str | None
    namespace: str | None
    values: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def chart_name(self) -> str:
        """`strimzi-kafka-operator` for `oci://quay.io/strimzi-helm/strimzi-kafka-operator` too."""
        return self.chart.rstrip("/").rsplit("/", 1)[-1]

    def record(self) -> dict[str, Any]:
        return {
            "release": self.release_name,
            "chart": self.chart,
            "version": self.version,
            "repository": self.repository,
            "namespace": self.namespace,
            "pulumiResource": self.resource_name,
            "options": self.options,
        }


@dataclass(frozen=True)
class ChartObject:
    """One object of a local chart as Pulumi would register it: its manifest, its Pulumi type and name, and
    the resource options the Chart resource and the program's transforms give it. `retain_on_delete`: the
    object outlives its install (`helm.sh/resource-policy: keep`, which a helm.v4.Chart turns into
    retainOnDelete and `helm uninstall` honours for a Release, or a transform)."""

    manifest: dict[str, Any]
    resource_type: str
    resource_name: str
    retain_on_delete: bool = False
    protect: bool = False


@dataclass(frozen=True)
class LocalChart:
    """A chart installed from a directory of this machine, rendered with helm: `values` are the ones the
    program passed (helm merges them over the chart's values.yaml)."""

    resource_type: str
    resource_name: str
    release_name: str
    chart_dir: Path
    namespace: str
    values: dict[str, Any]
    objects: tuple[ChartObject, ...]

    @property
    def chart_name(self) -> str:
        return self.chart_dir.name

    def record(self) -> dict[str, Any]:
        chart = self.chart_dir
        with contextlib.suppress(ValueError):
            chart = chart.relative_to(REPO_ROOT)
        return {
            "release": self.release_name,
            "chart": str(chart),
            "namespace": self.namespace,
            "pulumiResource": self.resource_name,
            "pulumiType": self.resource_type,
            "objects": [
                {
                    "kind": item.manifest["kind"],
                    "name": item.manifest["metadata"]["name"],
                    "retainOnDelete": item.retain_on_delete,
                    "protect": item.protect,
                }
                for item in self.objects
            ],
        }


@dataclass(frozen=True)
class Registration:
    """One resource the program registered (components and providers included); `transforms` are the
    resource transforms in its options (Python callables, as the mock monitor resolves them)."""

    type: str
    name: str
    custom: bool
    parent: str
    inputs: dict[str, Any]
    transforms: tuple[Any, ...] = ()


@dataclass(frozen=True)
class RenderedStack:
    stack: str
    config: dict[str, str]
    manifests: list[dict[str, Any]]
    helm_releases: list[HelmRelease]
    outputs: dict[str, Any]
    registrations: list[Registration]
    unrendered: list[str]
    local_charts: list[LocalChart] = field(default_factory=list)

    @property
    def kubernetes_version(self) -> str:
        """The Kubernetes version the stack targets (`streamstack:cluster` -> `kubernetesVersion`), else the
        validator's default."""
        return _kubernetes_version(self.config)

    def chart_objects(self) -> list[ChartObject]:
        return [item for chart in self.local_charts for item in chart.objects]

    def find(self, kind: str, name: str | None = None) -> list[dict[str, Any]]:
        return [
            manifest
            for manifest in self.manifests
            if manifest["kind"] == kind and (name is None or manifest["metadata"].get("name") == name)
        ]


class ChartRenderError(StreamstackError):
    """`helm template` refused the chart's values (schema, the chart's own checks) or failed."""
