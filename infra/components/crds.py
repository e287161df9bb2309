"""The upstream operators' CustomResourceDefinitions, as Pulumi resources of the component that installs the
operator (Helm never upgrades the CRDs of a chart's crds/ directory, so the releases skip theirs).

Each pinned chart version has its complete CRD set vendored in `infra/crds/<chart>-<version>/`, written by
`scripts/vendor_crds.py` from pinned, checksummed sources and described by the `source.json` beside the files
(the source, and each file's sha256). Bumping a chart version without vendoring its CRDs fails `pulumi
preview`, naming the setting; a vendored file that does not match its recorded sha256 fails it too.

How they are applied: pulumi-kubernetes v4 uses Server-Side Apply (the provider's default, which this stack
keeps), so no `last-applied-configuration` annotation is written and the 256 KiB annotation limit that
client-side apply hits with kube-prometheus-stack's CRDs (up to 800 KiB) does not apply; `pulumi.com/
patchForce` takes over the fields another manager holds (the CRDs Helm installed from crds/ before this
stack managed them: Pulumi upserts them). Deleting a CRD deletes every object of its kind, so each CRD is
`retain_on_delete`: `pulumi destroy`, or a CRD a new version drops, leaves it in the cluster.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_kubernetes as kubernetes
import yaml

from infra.components.common import PART_OF, child
from infra.config import CRDS_DIR, CRDS_SOURCE_FILE, ConfigError

SOURCE_FILE = CRDS_SOURCE_FILE
VENDOR_SCRIPT = "scripts/vendor_crds.py"
# On every CRD: the chart and version whose vendored set it comes from.
SOURCE_ANNOTATION = "streamstack/crds-of"
PATCH_FORCE = "pulumi.com/patchForce"

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CrdLoader(_Loader):  # type: ignore[misc]
    """YAML as the API server reads it: a plain `=` (an enum value of AlertmanagerConfig's matchers) is the
    string "=", not YAML 1.1's `value` tag that PyYAML knows no constructor for."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


@dataclass(frozen=True)
class CrdSet:
    """The vendored CRDs of one chart version, in file order."""

    chart: str
    version: str
    directory: Path
    documents: tuple[dict[str, Any], ...]

    @property
    def source(self) -> str:
        return f"{self.chart}-{self.version}"

    def names(self) -> list[str]:
        return [document["metadata"]["name"] for document in self.documents]


def load_crds(chart: str, version: str, setting_name: str, root: Path = CRDS_DIR) -> CrdSet:
    """The CRDs of `chart` `version` from `root`/<chart>-<version>/; ConfigError naming `setting_name` when
    they are not vendored or a file does not match `source.json`."""
    directory = root / f"{chart}-{version}"
    if not (directory / SOURCE_FILE).is_file():
        raise ConfigError(
            f"{setting_name}: no CRDs of {chart} {version} in {directory} (Helm does not upgrade CRDs, so "
            f"the stack installs them from there): add the version's source to {VENDOR_SCRIPT} and run it"
        )
    return _load(chart, version, setting_name, directory, f"run {VENDOR_SCRIPT}")


@functools.cache
def _load(chart: str, version: str, setting_name: str, directory: Path, hint: str) -> CrdSet:
    source = json.loads((directory / SOURCE_FILE).read_text(encoding="utf-8"))
    if (source.get("chart"), source.get("chartVersion")) != (chart, version):
        raise ConfigError(f"{setting_name}: {directory / SOURCE_FILE} is not of {chart} {version}: {hint}")
    expected: dict[str, str] = source.get("files") or {}
    present = sorted(path.name for path in directory.glob("*.yaml"))
    if present != sorted(expected):
        raise ConfigError(
            f"{setting_name}: the CRD files in {directory} ({', '.join(present)}) are not those "
            f"{SOURCE_FILE} lists ({', '.join(sorted(expected))}): {hint}"
        )
    documents: list[dict[str, Any]] = []
    for name in present:
        data = (directory / name).read_bytes()
        if hashlib.sha256(data).hexdigest() != expected[name]:
            raise ConfigError(
                f"{setting_name}: {directory / name} does not match its sha256 in {SOURCE_FILE}"
            )
        for document in yaml.load_all(data, Loader=_CrdLoader):
            if not document:
                continue
            if (document.get("apiVersion"), document.get("kind")) != (
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
            ):
                raise ConfigError(
                    f"{setting_name}: {directory / name} holds a {document.get('kind')}, not a CRD"
                )
            documents.append(document)
    return CrdSet(chart, version, directory, tuple(documents))


def custom_resource_definitions(
    parent: pulumi.Resource,
    logical_prefix: str,
    crds: CrdSet,
    depends_on: Sequence[pulumi.Resource] = (),
) -> list[kubernetes.apiextensions.v1.CustomResourceDefinition]:
    """One CustomResourceDefinition per vendored CRD: its upstream spec, labels and annotations, plus ours."""
    resources = []
    for document in crds.documents:
        upstream = document["metadata"]
        resources.append(
            kubernetes.apiextensions.v1.CustomResourceDefinition(
                f"{logical_prefix}-crd-{upstream['name']}",
                metadata=kubernetes.meta.v1.ObjectMetaArgs(
                    name=upstream["name"],
                    labels={**(upstream.get("labels") or {}), **PART_OF},
                    annotations={
                        **(upstream.get("annotations") or {}),
                        SOURCE_ANNOTATION: crds.source,
                        PATCH_FORCE: "true",
                    },
                ),
                # Kubernetes' own (camelCase) field names, which the SDK sends as they are.
                spec=cast(Any, document["spec"]),
                opts=child(parent, depends_on, retain_on_delete=True),
            )
        )
    return resources
