"""Validate Kubernetes manifests and Helm values against the real schemas, strictly.

- Core kinds: kubernetes-validate's strict schemas for the target Kubernetes version (every object has
  `additionalProperties: false`, so a misspelt field fails).
- Custom resources (Strimzi, spark-operator, Prometheus Operator): the `openAPIV3Schema` of the served
  version in the CRDs under `<repo>/../shared/crds` (or `$STREAMSTACK_SHARED_DIR/crds`), made strict the
  way the API server prunes: an object schema that lists `properties` accepts no other field unless it says
  `x-kubernetes-preserve-unknown-fields: true` or has its own `additionalProperties`. `metadata` is checked
  against the strict ObjectMeta schema, SparkApplication pod templates against PodTemplateSpec.
- A kind with no schema is an error, not a pass.
- Helm values: every key path must exist in the upstream chart's default values.yaml
  (`../shared/upstream-values`), except under maps the chart leaves open (see `check_chart_values`). In a
  section that configures a sub-chart, a key the parent's values.yaml does not list must be in the small
  allow-list SUBCHART_EXTRA_KEYS, each entry checked against the sub-chart's own values.yaml.

    errors = validate_manifests(manifests, kubernetes_version="1.33")
    errors += check_chart_values("kube-prometheus-stack", values)
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, cast

import jsonschema
import yaml
from referencing import Registry, Resource

from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT

DEFAULT_KUBERNETES_VERSION = "1.33"
SHARED_DIR_ENV = "STREAMSTACK_SHARED_DIR"
MAX_MESSAGE_CHARS = 300

# Charts whose values.yaml the checker knows: chart name -> file in upstream-values/.
CHART_VALUES_FILES = {
    "strimzi-kafka-operator": "strimzi-kafka-operator-1.2.0.values.yaml",
    "spark-operator": "spark-operator-2.5.2.values.yaml",
    "kube-prometheus-stack": "kube-prometheus-stack-88.5.3.values.yaml",
}
# Sections that configure a sub-chart (kube-prometheus-stack 88.5.3's Chart.yaml `dependencies`: grafana
# 12.11.1 from grafana-community/helm-charts, kube-state-metrics 8.4.0, prometheus-node-exporter 4.56.1,
# prometheus-windows-exporter 0.12.*). The parent's values.yaml lists only the keys it sets; keys it lists are
# checked like any other, and a key beyond them must be in SUBCHART_EXTRA_KEYS.
SUBCHART_SECTIONS = {
    "kube-prometheus-stack": frozenset(
        {"grafana", "kube-state-metrics", "prometheus-node-exporter", "prometheus-windows-exporter"}
    ),
}
# Sub-chart keys the parent's values.yaml does not list, each one verified in the sub-chart's values.yaml at
# the version the parent pins. Keep this small: add a key only when the stack sets it, with its source.
SUBCHART_EXTRA_KEYS = {
    "kube-prometheus-stack": frozenset(
        {
            # prometheus-node-exporter 4.56.1, charts/prometheus-node-exporter/values.yaml: `hostRootFsMount:
            # enabled: true` (prometheus-community/helm-charts, tag prometheus-node-exporter-4.56.1). Off on
            # kind, whose nodes are containers (FIELD_NOTES.md, kube-prometheus-stack).
            "prometheus-node-exporter.hostRootFsMount.enabled",
        }
    ),
}

_CORE_SCHEMA_ROOT = "kubernetes-json-schema"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_POD_TEMPLATE_SPEC = "io.k8s.api.core.v1.PodTemplateSpec"
# Kubernetes objects inside custom resources that their CRD leaves free-form
# (`x-kubernetes-preserve-unknown-fields`), checked here against the strict Kubernetes definition. Spark
# reads the pod templates with a client that drops unknown fields silently.
EMBEDDED_CORE_OBJECTS: Mapping[tuple[str, str], Mapping[tuple[str, ...], str]] = {
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"): {
        ("spec", "driver", "template"): _POD_TEMPLATE_SPEC,
        ("spec", "executor", "template"): _POD_TEMPLATE_SPEC,
    },
}


class ValidationSetupError(StreamstackError):
    """The schemas themselves are missing or unusable (not a problem in the manifest)."""


def shared_dir() -> Path:
    """`$STREAMSTACK_SHARED_DIR`, else `shared/` beside the repository."""
    configured = os.environ.get(SHARED_DIR_ENV)
    directory = Path(configured) if configured else REPO_ROOT.parent / "shared"
    if not directory.is_dir():
        raise ValidationSetupError(
            f"shared reference directory {directory} not found (it holds crds/ and upstream-values/; "
            f"set {SHARED_DIR_ENV} to its location)"
        )
    return directory


def describe(manifest: Mapping[str, Any]) -> str:
    """`Kind namespace/name` (or `Kind name`) for messages."""
    metadata = manifest.get("metadata") or {}
    name = metadata.get("name", "<no name>") if isinstance(metadata, Mapping) else "<no name>"
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return f"{manifest.get('kind', '<no kind>')} {namespace + '/' if namespace else ''}{name}"


def validate_manifests(
    manifests: Iterable[Mapping[str, Any]], kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[str]:
    """Every error of every manifest, each prefixed with the object it belongs to."""
    errors: list[str] = []
    for manifest in manifests:
        errors += validate_manifest(manifest, kubernetes_version)
    return errors


def validate_manifest(
    manifest: Mapping[str, Any], kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[str]:
    """All schema errors of one object as `Kind ns/name: field.path: message`; [] when it is valid."""
    where = describe(manifest)
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{where}: apiVersion and kind must both be set (got {api_version!r}, {kind!r})"]
    metadata = manifest.get("metadata")
    problems: list[str] = []
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        problems.append("metadata.name: missing")

    crd_validator = _crd_validators().get((api_version, kind))
    if crd_validator is not None:
        problems += _schema_errors(crd_validator, manifest)
        embedded = {("metadata",): _OBJECT_META, **EMBEDDED_CORE_OBJECTS.get((api_version, kind), {})}
        for path, definition in embedded.items():
            value = _lookup(manifest, path)
            if isinstance(value, Mapping):
                validator = _definition_validator(definition, _major_minor(kubernetes_version))
                problems += _schema_errors(validator, value, prefix=".".join(path))
    else:
        core_validator = _core_validator(api_version, kind, _major_minor(kubernetes_version))
        if core_validator is None:
            known = ", ".join(sorted(f"{k} ({v})" for v, k in _crd_validators()))
            return [
                f"{where}: no schema for apiVersion {api_version} kind {kind}: not a Kubernetes "
                f"{_major_minor(kubernetes_version)} kind and not one of the CRDs ({known})"
            ]
        problems += _schema_errors(core_validator, manifest)
    return [f"{where}: {problem}" for problem in problems]


def check_chart_values(chart: str, values: Mapping[str, Any]) -> list[str]:
    """Every key path in `values` must exist in the chart's default values.yaml.

    A key is allowed when its parent's default is an empty map (`podAnnotations: {}`, `nodeSelector: {}`)
    or not a map of known keys (`null`, a string, a list). In a sub-chart section (SUBCHART_SECTIONS) a key
    the parent does not list is allowed only when its path is in SUBCHART_EXTRA_KEYS (or leads to one); below
    an allow-listed key anything goes. Lists are not descended: their items are free-form.
    """
    if chart not in CHART_VALUES_FILES:
        raise ValidationSetupError(
            f"no upstream values for chart {chart!r}; known charts: {', '.join(sorted(CHART_VALUES_FILES))}"
        )
    defaults = _chart_defaults(chart)
    errors: list[str] = []
    subchart_sections = SUBCHART_SECTIONS.get(chart, frozenset())
    extra_keys = SUBCHART_EXTRA_KEYS.get(chart, frozenset())
    for key, value in values.items():
        if key not in defaults:
            errors.append(_unknown_key(chart, [str(key)], defaults))
        elif key in subchart_sections:
            errors += _check_subchart(chart, [str(key)], value, defaults[key], extra_keys)
        else:
            errors += _check_under(chart, [str(key)], value, defaults[key])
    return errors


_NOT_LISTED = object()


def _check_subchart(
    chart: str, path: list[str], value: Any, default: Any, extra_keys: frozenset[str]
) -> list[str]:
    """`default` is what the parent lists at `path`, or _NOT_LISTED below an allow-listed path's prefix."""
    if not isinstance(value, Mapping):
        return []
    if default is not _NOT_LISTED and not (isinstance(default, Mapping) and default):
        return []  # `{}`, null or a scalar in the parent: open, as everywhere else
    listed: Mapping[str, Any] = {} if default is _NOT_LISTED else cast(Mapping[str, Any], default)
    errors: list[str] = []
    for key, child in value.items():
        child_path = [*path, str(key)]
        dotted = ".".join(child_path)
        if dotted in extra_keys:
            continue
        if key in listed:
            errors += _check_subchart(chart, child_path, child, listed[key], extra_keys)
        elif any(entry.startswith(f"{dotted}.") for entry in extra_keys):
            errors += _check_subchart(chart, child_path, child, _NOT_LISTED, extra_keys)
        else:
            errors.append(_unlisted_subchart_key(chart, child_path, listed))
    return errors


def _unlisted_subchart_key(chart: str, path: list[str], siblings: Mapping[str, Any]) -> str:
    hint = _did_you_mean([path[-1]], [str(key) for key in siblings])
    return (
        f"{chart} values: {'.'.join(path)}: the parent chart's values.yaml does not list this key of the "
        f"{path[0]} sub-chart{hint}; if the sub-chart has it, add it to SUBCHART_EXTRA_KEYS in "
        "streamstack/render/validate.py with the sub-chart version and file that define it"
    )


def _check_under(chart: str, path: list[str], value: Any, default: Any) -> list[str]:
    if not isinstance(value, Mapping) or not isinstance(default, Mapping) or not default:
        return []
    errors: list[str] = []
    for key, child in value.items():
        child_path = [*path, str(key)]
        if key not in default:
            errors.append(_unknown_key(chart, child_path, default))
        else:
            errors += _check_under(chart, child_path, child, default[key])
    return errors


def _unknown_key(chart: str, path: list[str], siblings: Mapping[str, Any]) -> str:
    known = [str(key) for key in siblings]
    hint = _did_you_mean([path[-1]], known)
    if not hint:
        listed = ", ".join(sorted(known))
        if len(listed) > MAX_MESSAGE_CHARS:
            listed = listed[:MAX_MESSAGE_CHARS] + " ..."
        hint = f" (known here: {listed})"
    return f"{chart} values: {'.'.join(path)}: the chart has no such key{hint}"


def _did_you_mean(unknown: Sequence[str], known: Sequence[str]) -> str:
    suggestions = [match for key in unknown for match in difflib.get_close_matches(key, known, n=1)]
    return f" (did you mean {', '.join(map(repr, suggestions))}?)" if suggestions else ""


def _chart_defaults(chart: str) -> dict[str, Any]:
    return _chart_defaults_in(shared_dir(), chart)


@cache
def _chart_defaults_in(shared: Path, chart: str) -> dict[str, Any]:
    path = shared / "upstream-values" / CHART_VALUES_FILES[chart]
    if not path.is_file():
        raise ValidationSetupError(f"upstream values for {chart} not found: {path}")
    loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise ValidationSetupError(f"{path}: not a YAML map")
    return loaded


# --- schemas -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Located:
    path: str
    message: str


def _schema_errors(validator: jsonschema.protocols.Validator, instance: Any, prefix: str = "") -> list[str]:
    located = []
    for error in validator.iter_errors(instance):
        path = _json_path(error.absolute_path)
        full = f"{prefix}.{path}" if prefix and path else (prefix or path or "(root)")
        located.append(_Located(full, _short(error)))
    return [f"{item.path}: {item.message}" for item in sorted(located, key=lambda item: item.path)]


def _json_path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _short(error: jsonschema.ValidationError) -> str:
    message = str(error.message)
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = list((error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else [])
        unexpected = [str(key) for key in error.instance if key not in known]
        message = f"unknown field(s) {', '.join(map(repr, unexpected))}{_did_you_mean(unexpected, known)}"
    elif error.validator in ("oneOf", "anyOf") and error.context:
        reasons = sorted({sub.message for sub in error.context})
        message = f"matches none of the allowed forms ({'; '.join(reasons)})"
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + " ..."


def _major_minor(version: str) -> str:
    match = re.match(r"^v?(\d+)\.(\d+)", version)
    if not match:
        raise ValidationSetupError(f"Kubernetes version {version!r}: expected MAJOR.MINOR, e.g. 1.33")
    return f"{match.group(1)}.{match.group(2)}"


def _core_schema_dir(major_minor: str) -> Any:
    """kubernetes-validate's strict schema directory for this version (its own rule: the newest schema
    version not newer than the one asked for); an unsupported version is an error."""
    root = resources.files("kubernetes_validate").joinpath(_CORE_SCHEMA_ROOT)
    available = {}
    for entry in root.iterdir():
        match = re.match(r"^v(\d+)\.(\d+)\.\d+-local-strict$", entry.name)
        if match:
            available[(int(match.group(1)), int(match.group(2)))] = entry
    wanted = tuple(int(part) for part in major_minor.split("."))
    usable = [version for version in available if version <= wanted]
    if not usable or wanted > max(available):
        supported = f"{min(available)[0]}.{min(available)[1]}-{max(available)[0]}.{max(available)[1]}"
        raise ValidationSetupError(
            f"Kubernetes {major_minor} is not covered by kubernetes-validate's schemas ({supported})"
        )
    return available[max(usable)]


@cache
def _core_definitions(major_minor: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        _core_schema_dir(major_minor).joinpath("_definitions.json").read_text()
    )
    return loaded


@cache
def _core_validator(api_version: str, kind: str, major_minor: str) -> jsonschema.protocols.Validator | None:
    # kubernetes-validate's file naming: the group's first label, then the version (apps/v1 -> apps-v1,
    # rbac.authorization.k8s.io/v1 -> rbac-v1, v1 -> v1).
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema_file = _core_schema_dir(major_minor).joinpath(f"{kind.lower()}-{group_version}.json")
    if not schema_file.is_file():
        return None
    schema = json.loads(schema_file.read_text())
    kinds = schema.get("x-kubernetes-group-version-kind") or []
    if not any(_gvk_api_version(gvk) == api_version and gvk.get("kind") == kind for gvk in kinds):
        return None  # e.g. a CRD group whose first label collides with a core group
    registry: Registry[Any] = Resource.from_contents(_core_definitions(major_minor)) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _gvk_api_version(gvk: Mapping[str, str]) -> str:
    group, version = gvk.get("group", ""), gvk.get("version", "")
    return f"{group}/{version}" if group else version


def _lookup(document: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = document
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


@cache
def _definition_validator(definition: str, major_minor: str) -> jsonschema.protocols.Validator:
    """A validator for one strict Kubernetes definition, e.g. ObjectMeta or PodTemplateSpec."""
    definitions = _core_definitions(major_minor)
    schema = {"$ref": f"{definitions['$id']}#/$defs/{definition}"}
    registry: Registry[Any] = Resource.from_contents(definitions) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> validator, for every served version of every CRD under shared/crds."""
    return _crd_validators_in(shared_dir())


@cache
def _crd_validators_in(shared: Path) -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    crd_root = shared / "crds"
    files = sorted(crd_root.glob("*/*.yaml")) + sorted(crd_root.glob("*/*.yml"))
    if not files:
        raise ValidationSetupError(f"no CRDs found under {crd_root}")
    validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
    for path in files:
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec["versions"]:
                if not version.get("served", False):
                    continue
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema is None:
                    raise ValidationSetupError(f"{path}: version {version['name']} has no openAPIV3Schema")
                api_version = f"{spec['group']}/{version['name']}"
                validators[(api_version, spec["names"]["kind"])] = jsonschema.Draft4Validator(
                    strict_structural_schema(schema)
                )
    return validators


def strict_structural_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as JSON Schema that rejects fields the API server would prune.

    Applies to the structural part only (properties, items, additionalProperties); branches of
    allOf/anyOf/oneOf/not only add constraints in a structural schema and may list a subset of the
    fields, so they are left as they are.
    """
    strict = copy.deepcopy(dict(schema))
    _tighten(strict)
    return strict


def _tighten(node: dict[str, Any]) -> None:
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
        node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and "type" in node:
        node["type"] = [node["type"], "null"]
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
    properties = node.get("properties")
    if isinstance(properties, dict):
        for child in properties.values():
            _tighten(child)
        if not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
            node["additionalProperties"] = False
    if isinstance(node.get("items"), dict):
        _tighten(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        _tighten(node["additionalProperties"])


def supported_custom_kinds() -> Sequence[tuple[str, str]]:
    """(apiVersion, kind) of every custom resource the validator has a schema for."""
    return sorted(_crd_validators())
