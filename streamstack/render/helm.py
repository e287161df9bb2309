"""Local charts (ours, in charts/) rendered with the real helm, since they render nothing under mocks; the
resource options Pulumi would give their objects."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import rpc

from streamstack import runtimes
from streamstack.render.output import _MANIFEST_KEY_ORDER
from streamstack.render.records import (
    HELM_CHART_TYPE,
    HELM_TEMPLATE_TIMEOUT_S,
    RESOURCE_POLICY_ANNOTATION,
    SECRET_PLACEHOLDER,
    UNKNOWN_PLACEHOLDER,
    ChartObject,
    ChartRenderError,
    HelmRelease,
    LocalChart,
    ProgramError,
    Registration,
)


def _local_chart_dir(registration: Registration, program: Path) -> Path | None:
    """The chart directory a Chart/Release installs from, when it is one on this machine (not a chart of a
    repository or an OCI registry). A relative path is relative to the program directory, the working
    directory Pulumi runs the program in."""
    inputs = registration.inputs
    chart = inputs.get("chart")
    if not isinstance(chart, str) or not chart or chart.startswith("oci://"):
        return None
    if (inputs.get("repositoryOpts") or {}).get("repo"):
        return None
    path = Path(chart) if Path(chart).is_absolute() else program / chart
    return path.resolve() if (path / "Chart.yaml").is_file() else None


def render_local_chart(
    registration: Registration,
    chart_dir: Path,
    kubernetes_version: str,
    loop: asyncio.AbstractEventLoop | None = None,
) -> LocalChart:
    """`helm template` of the registration's chart with its values and namespace, each object with the
    options Pulumi would register it with. A chart that refuses its values raises ProgramError."""
    inputs = _plain(registration.inputs)
    values: dict[str, Any] = {}
    for values_file in registration.inputs.get("valueYamlFiles") or []:
        values = _deep_merge(values, _asset_yaml(values_file))
    values = _deep_merge(values, inputs.get("values") or {})
    is_chart = registration.type == HELM_CHART_TYPE
    # A Chart's release is named after the resource; a Release without a name is autonamed.
    default_release = registration.name if is_chart else _autoname(registration.name, registration.type)
    release = str(inputs.get("name") or default_release)
    namespace = str(inputs.get("namespace") or "default")
    try:
        documents = helm_template(chart_dir, release, namespace, values, kubernetes_version)
    except ChartRenderError as error:
        raise ProgramError(
            f"{registration.type} {registration.name}: chart {chart_dir.name} refuses its values: {error}"
        ) from None
    # helm.v4.Chart names its objects `<resourcePrefix, default the Chart's name>:<namespace>/<name>`. A
    # Release's objects are Helm's, not Pulumi resources: no transform reaches them, and only Helm's own
    # `keep` policy applies (on `helm uninstall`).
    prefix = str(inputs.get("resourcePrefix", registration.name))
    transforms = registration.transforms if is_chart else ()
    objects = []
    for document in documents:
        metadata = document.setdefault("metadata", {})
        if not metadata.get("namespace") and _is_namespaced(document):
            metadata["namespace"] = namespace
        object_name = (
            f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]
        )
        resource_name = f"{prefix}:{object_name}" if prefix else object_name
        objects.append(_chart_object(document, resource_name, transforms, loop))
    return LocalChart(
        resource_type=registration.type,
        resource_name=registration.name,
        release_name=release,
        chart_dir=chart_dir,
        namespace=namespace,
        values=values,
        objects=tuple(objects),
    )


_CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
)


def _is_namespaced(document: Mapping[str, Any]) -> bool:
    return document.get("kind") not in _CLUSTER_SCOPED_KINDS


def pulumi_type(manifest: Mapping[str, Any]) -> str:
    """The Pulumi type of a Kubernetes object: `v1` Service -> `kubernetes:core/v1:Service`."""
    api_version = str(manifest["apiVersion"])
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{manifest['kind']}"


def _chart_object(
    manifest: dict[str, Any],
    resource_name: str,
    transforms: tuple[Any, ...],
    loop: asyncio.AbstractEventLoop | None,
) -> ChartObject:
    """What the engine would register: `helm.sh/resource-policy: keep` becomes retainOnDelete (the Chart
    resource's own rule), then every transform of the Chart's options runs on the object, in order."""
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    options = pulumi.ResourceOptions(retain_on_delete=annotations.get(RESOURCE_POLICY_ANNOTATION) == "keep")
    props: Any = manifest
    resource_type = pulumi_type(manifest)
    for transform in transforms:
        result = transform(pulumi.ResourceTransformArgs(True, resource_type, resource_name, props, options))
        if inspect.isawaitable(result):
            result = loop.run_until_complete(result) if loop else asyncio.run(_awaited(result))
        if result is not None:
            props, options = result.props, result.opts
    return ChartObject(
        manifest=dict(props),
        resource_type=resource_type,
        resource_name=resource_name,
        retain_on_delete=bool(options.retain_on_delete),
        protect=bool(options.protect),
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def helm_template(
    chart_dir: Path,
    release: str,
    namespace: str,
    values: Mapping[str, Any],
    kubernetes_version: str,
) -> list[dict[str, Any]]:
    """The objects `helm template` renders (the pinned helm of `streamstack setup`); cached per chart
    content, release, namespace, values and Kubernetes version."""
    digest = hashlib.sha256()
    for path in sorted(chart_dir.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(chart_dir)).encode() + b"\0" + path.read_bytes())
    rendered = _cached_helm_template(
        str(chart_dir),
        digest.hexdigest(),
        release,
        namespace,
        json.dumps(values, sort_keys=True),
        kubernetes_version,
    )
    documents: list[dict[str, Any]] = json.loads(rendered)  # a fresh copy: callers may change the objects
    return documents


@functools.cache
def _cached_helm_template(
    chart_dir: str,
    _chart_digest: str,
    release: str,
    namespace: str,
    values_json: str,
    kubernetes_version: str,
) -> str:
    """helm's objects as JSON; `_chart_digest` (the chart's files) makes an edited chart a new entry."""
    helm = runtimes.locate_go_tools()["helm"]
    version = kubernetes_version if kubernetes_version.count(".") >= 2 else f"{kubernetes_version}.0"
    with tempfile.TemporaryDirectory(prefix="streamstack-values-") as scratch:
        values_file = Path(scratch) / "values.json"  # JSON is YAML: no re-quoting of any value
        values_file.write_text(values_json)
        try:
            result = subprocess.run(
                [
                    str(helm),
                    "template",
                    release,
                    str(chart_dir),
                    "--namespace",
                    namespace,
                    "--kube-version",
                    version,
                    "--values",
                    str(values_file),
                ],
                capture_output=True,
                text=True,
                timeout=HELM_TEMPLATE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ChartRenderError(
                f"helm template {chart_dir} took over {HELM_TEMPLATE_TIMEOUT_S} s"
            ) from None
    if result.returncode != 0:
        raise ChartRenderError(result.stderr.strip())
    documents = [document for document in yaml.safe_load_all(result.stdout) if document]
    return json.dumps(documents)


def _manifest(registration: Registration) -> dict[str, Any]:
    inputs = {key: value for key, value in registration.inputs.items() if not key.startswith("__")}
    body = _plain(inputs)
    metadata = dict(body.get("metadata") or {})
    metadata.setdefault("name", _autoname(registration.name, registration.type))
    body["metadata"] = metadata
    if body.get("kind") == "Secret":
        for field_name in ("data", "stringData"):
            if isinstance(body.get(field_name), dict):
                body[field_name] = dict.fromkeys(body[field_name], SECRET_PLACEHOLDER)
    ordered = {key: body[key] for key in _MANIFEST_KEY_ORDER if key in body}
    ordered.update({key: value for key, value in body.items() if key not in ordered})
    return ordered


def _helm_release(registration: Registration) -> HelmRelease:
    inputs = _plain(registration.inputs)
    values: dict[str, Any] = {}
    for values_file in registration.inputs.get("valueYamlFiles") or []:
        values = _deep_merge(values, _asset_yaml(values_file))
    values = _deep_merge(values, inputs.get("values") or {})
    repository = (inputs.get("repositoryOpts") or {}).get("repo")
    # `compat` is the SDK's own marker, not a Helm setting.
    skipped = {
        "chart",
        "version",
        "repositoryOpts",
        "namespace",
        "name",
        "values",
        "valueYamlFiles",
        "compat",
    }
    return HelmRelease(
        resource_name=registration.name,
        release_name=str(inputs.get("name") or _autoname(registration.name, registration.type)),
        chart=str(inputs.get("chart", "")),
        version=inputs.get("version"),
        repository=repository,
        namespace=inputs.get("namespace"),
        values=values,
        options={key: value for key, value in inputs.items() if key not in skipped},
    )


def _asset_yaml(asset: Any) -> dict[str, Any]:
    if isinstance(asset, Mapping) and asset.get(rpc._special_sig_key) == rpc._special_asset_sig:
        if "text" in asset:
            text = str(asset["text"])
        elif "path" in asset:
            text = Path(str(asset["path"])).read_text()
        else:
            raise ProgramError(f"a Helm values file that is neither text nor a path: {asset}")
        loaded = yaml.safe_load(text) or {}
        return dict(_plain(loaded))
    raise ProgramError(f"a Helm valueYamlFiles entry that is not an asset: {asset!r}")


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def _plain(value: Any) -> Any:
    """Wire values as plain YAML-able data: whole floats back to ints, secrets and unknowns as
    placeholders."""
    if isinstance(value, Mapping):
        signature = value.get(rpc._special_sig_key)
        if signature == rpc._special_secret_sig:
            return _redacted(value.get("value"))
        if signature is not None:
            return f"[{signature} value]"
        return {str(key): _plain(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_plain(child) for child in value]
    if value == rpc.UNKNOWN:
        return UNKNOWN_PLACEHOLDER
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _redacted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _redacted(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_redacted(child) for child in value]
    if isinstance(value, str):
        return SECRET_PLACEHOLDER
    return _plain(value)


def _autoname(name: str, resource_type: str) -> str:
    """Pulumi names an object without metadata.name `<name>-<random suffix>`; a stable suffix here."""
    return f"{name}-{hashlib.sha256(f'{resource_type}::{name}'.encode()).hexdigest()[:8]}"
