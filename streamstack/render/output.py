"""Validate a RenderedStack against the real schemas and write it as one YAML file per object."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from streamstack.errors import StreamstackError
from streamstack.render import validate as k8s_validation
from streamstack.render.records import RENDER_MARKER, RenderedStack

_MANIFEST_KEY_ORDER = ("apiVersion", "kind", "metadata")


def validate_rendered(rendered: RenderedStack, kubernetes_version: str | None = None) -> list[str]:
    """Every manifest against its schema, every Helm release's values against the chart's keys, no two
    objects with one identity, nothing that renders only on a real cluster."""
    version = kubernetes_version or rendered.kubernetes_version
    errors = k8s_validation.validate_manifests(rendered.manifests, version)
    for release in rendered.helm_releases:
        if release.chart_name not in k8s_validation.CHART_VALUES_FILES:
            errors.append(
                f"Helm release {release.release_name}: no upstream values known for {release.chart}"
            )
            continue
        errors += [
            f"Helm release {release.release_name}: {problem}"
            for problem in k8s_validation.check_chart_values(release.chart_name, release.values)
        ]
    seen: set[tuple[str, str, str, str]] = set()
    for manifest in rendered.manifests:
        identity = _identity(manifest)
        if identity in seen:
            errors.append(f"{k8s_validation.describe(manifest)}: defined more than once")
        seen.add(identity)
    errors += [
        f"{item}: renders nothing under mocks, so it cannot be checked" for item in rendered.unrendered
    ]
    return errors


def _identity(manifest: Mapping[str, Any]) -> tuple[str, str, str, str]:
    metadata = manifest.get("metadata") or {}
    return (
        str(manifest.get("apiVersion")),
        str(manifest.get("kind")),
        str(metadata.get("namespace", "")),
        str(metadata.get("name", "")),
    )


def manifest_filename(manifest: Mapping[str, Any]) -> str:
    metadata = manifest.get("metadata") or {}
    parts = [str(manifest["kind"]).lower(), metadata.get("namespace"), metadata.get("name")]
    return "-".join(str(part) for part in parts if part) + ".yaml"


def write_rendered(rendered: RenderedStack, out_dir: Path) -> list[Path]:
    """`manifests/<kind>-<namespace>-<name>.yaml` per object (those of local charts included),
    `helm/<release>/{release,values}.yaml` per upstream Helm release, `charts/<release>/{release,values}.yaml`
    per local chart install, `outputs.yaml`. A directory written before by this function is replaced; any
    other non-empty directory is refused."""
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / RENDER_MARKER).exists():
        raise StreamstackError(f"{out_dir} is not empty and was not written by `streamstack render`")
    for owned in ("manifests", "helm", "charts"):
        shutil.rmtree(out_dir / owned, ignore_errors=True)
    (out_dir / "manifests").mkdir(parents=True, exist_ok=True)
    (out_dir / RENDER_MARKER).write_text(f"stack {rendered.stack}\n")
    written: list[Path] = []
    for manifest in rendered.manifests:
        path = out_dir / "manifests" / manifest_filename(manifest)
        if path.exists():
            raise StreamstackError(f"two objects map to {path.name}: {k8s_validation.describe(manifest)}")
        path.write_text(to_yaml(manifest))
        written.append(path)
    for release in rendered.helm_releases:
        written += _write_release(out_dir / "helm" / release.release_name, release.record(), release.values)
    for chart in rendered.local_charts:
        written += _write_release(out_dir / "charts" / chart.release_name, chart.record(), chart.values)
    outputs_path = out_dir / "outputs.yaml"
    outputs_path.write_text(to_yaml(rendered.outputs))
    written.append(outputs_path)
    return written


def _write_release(directory: Path, record: Mapping[str, Any], values: Mapping[str, Any]) -> list[Path]:
    """`release.yaml` and `values.yaml` of one release, in a directory of its own."""
    directory.mkdir(parents=True, exist_ok=False)
    (directory / "release.yaml").write_text(to_yaml(record))
    (directory / "values.yaml").write_text(to_yaml(values))
    return [directory / "release.yaml", directory / "values.yaml"]


# libyaml's emitter when PyYAML has it: the upstream CRDs are megabytes, which the pure-Python emitter takes
# seconds per CRD to write (the two differ only in how they fold long quoted strings).
_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _BlockStyleDumper(_SafeDumper):  # type: ignore[misc]
    pass


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockStyleDumper.add_representer(str, _represent_str)


# Keys that read best first; every other key follows in alphabetical order.
_LEADING_KEYS = ("apiVersion", "kind", "metadata", "name", "namespace", "spec")


def _canonical(document: Any) -> Any:
    """The document with every mapping's keys in one fixed order: the Pulumi engine hands objects over in an
    order that changes from run to run, and a rendered stack must be comparable byte for byte."""
    if isinstance(document, Mapping):
        leading = [key for key in _LEADING_KEYS if key in document]
        rest = sorted((key for key in document if key not in _LEADING_KEYS), key=str)
        return {key: _canonical(document[key]) for key in [*leading, *rest]}
    if isinstance(document, list | tuple):
        return [_canonical(item) for item in document]
    return document


def to_yaml(document: Any) -> str:
    """YAML for people, the same bytes for the same objects: keys in a fixed order, multi-line strings
    (rules, dashboards) as blocks."""
    return yaml.dump(
        _canonical(document), Dumper=_BlockStyleDumper, sort_keys=False, allow_unicode=True, width=110
    )
