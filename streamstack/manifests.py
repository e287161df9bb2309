"""Run the Pulumi program of a stack under mocks and capture what it would create.

No Pulumi CLI or cluster is needed: the program runs in this process, the way Pulumi's Python language host
runs it (config from `Pulumi.<stack>.yaml`, working directory = the program directory, `runpy`), against a
mock engine that records every resource registration. Kubernetes resources come back as manifests, Helm
releases of upstream charts as records (chart, version, repository, namespace, values), and the stack's
exports as plain values. Pulumi secrets and Secret data are redacted; secure config values are replaced by
placeholders (they cannot be decrypted without the CLI).

A chart installed from a local chart directory (our charts/, as a `helm.v4.Chart` or a `helm.v3.Release`)
renders nothing under mocks, so it is rendered here with the real helm (`helm template` with the values the
program passed, for the stack's Kubernetes version; a values.schema.json violation fails the render as it
fails `pulumi preview`), and its objects join the manifests. The resource options Pulumi would give each of
them are recorded too: `retainOnDelete` from `helm.sh/resource-policy: keep` (what the Chart resource does)
and whatever the chart's `transforms` set.

    rendered = render_stack("dev")
    rendered.manifests        # [{"apiVersion": ..., "kind": ..., "metadata": ..., "spec": ...}, ...]
    rendered.helm_releases    # [HelmRelease(chart="strimzi-kafka-operator", version="1.2.0", ...), ...]
    rendered.local_charts     # [LocalChart(chart_dir=.../charts/streaming-job, objects=(...)), ...]
    rendered.outputs          # {"kafkaBootstrap": "...", ...}
    write_rendered(rendered, Path("out"))
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from streamstack import k8s_validation, runtimes
from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT

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
_MANIFEST_KEY_ORDER = ("apiVersion", "kind", "metadata")


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


def _kubernetes_version(config: Mapping[str, str]) -> str:
    project = config.get("__project__", "streamstack")
    try:
        cluster = json.loads(config.get(f"{project}:cluster", "{}"))
    except ValueError:
        cluster = None
    if isinstance(cluster, dict) and cluster.get("kubernetesVersion"):
        return str(cluster["kubernetesVersion"])
    return config.get(f"{project}:kubernetesVersion") or k8s_validation.DEFAULT_KUBERNETES_VERSION


@dataclass(frozen=True)
class Project:
    name: str
    root: Path
    program_dir: Path
    stack_config_dir: Path
    config: dict[str, Any]


def load_project(project_dir: Path = REPO_ROOT) -> Project:
    path = project_dir / "Pulumi.yaml"
    if not path.is_file():
        raise StreamstackError(f"{path} not found")
    document = yaml.safe_load(path.read_text()) or {}
    return Project(
        name=str(document["name"]),
        root=project_dir,
        program_dir=(project_dir / str(document.get("main", "."))).resolve(),
        stack_config_dir=(project_dir / str(document.get("stackConfigDir", "."))).resolve(),
        config=dict(document.get("config") or {}),
    )


def stack_config(
    project: Project, stack: str, overrides: Mapping[str, Any] | None = None
) -> tuple[dict[str, str], list[str]]:
    """Config as the CLI hands it to a program: `namespace:key` -> string (objects JSON-encoded), plus
    the secret keys. Project-level defaults first, then Pulumi.<stack>.yaml, then `overrides`."""
    stack_file = project.stack_config_dir / f"Pulumi.{stack}.yaml"
    if not stack_file.is_file():
        available = sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in _stack_files(project))
        raise StreamstackError(f"no stack {stack!r}: {stack_file} not found (stacks: {', '.join(available)})")
    raw: dict[str, Any] = {}
    for key, value in project.config.items():
        if isinstance(value, Mapping) and ("default" in value or "value" in value):
            raw[_qualified(project, key)] = value.get("value", value.get("default"))
        elif not isinstance(value, Mapping) or "type" not in value:
            raw[_qualified(project, key)] = value
    document = yaml.safe_load(stack_file.read_text()) or {}
    for key, value in (document.get("config") or {}).items():
        raw[_qualified(project, key)] = value
    for key, value in (overrides or {}).items():
        raw[_qualified(project, key)] = value
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        plain, secret = _without_secure_values(value, key)
        config[key] = _config_string(plain)
        if secret:
            secret_keys.append(key)
    return config, secret_keys


def _stack_files(project: Project) -> list[Path]:
    return sorted(project.stack_config_dir.glob("Pulumi.*.yaml"))


def _qualified(project: Project, key: str) -> str:
    return key if ":" in key else f"{project.name}:{key}"


def _without_secure_values(value: Any, key: str) -> tuple[Any, bool]:
    """`{secure: <ciphertext>}` needs the CLI to decrypt: stand in a placeholder and mark the key secret. The
    placeholder is a URL, so it passes the program's checks of secrets that are URLs (alert notifiers) too."""
    if isinstance(value, Mapping):
        if set(value) == {"secure"}:
            return f"https://placeholder.invalid/{key.split(':', 1)[-1]}", True
        secret = False
        plain = {}
        for child_key, child in value.items():
            plain[child_key], child_secret = _without_secure_values(child, key)
            secret = secret or child_secret
        return plain, secret
    if isinstance(value, list):
        items = [_without_secure_values(child, key) for child in value]
        return [item for item, _ in items], any(secret for _, secret in items)
    return value, False


def _config_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


# --- running the program -----------------------------------------------------------------------------


class _EchoMocks(pulumi_mocks.Mocks):
    """Outputs = inputs (so `CustomResource.api_version`, names and specs resolve), plus what a real
    provider would add: a name for autonamed objects, a status for Helm releases. Keeps each resource's
    transforms for the recording monitor."""

    def __init__(self) -> None:
        self.transforms: dict[tuple[str, str], tuple[Any, ...]] = {}

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.custom is None and args.resource_id:  # a read of an existing object (Resource.get)
            return args.resource_id, _existing_object(args.typ, args.resource_id)
        self.transforms[(args.typ, args.name)] = tuple(args.transforms)
        state = dict(args.inputs)
        if args.typ == HELM_RELEASE_TYPE:
            release_name = state.get("name") or _autoname(args.name, args.typ)
            state.setdefault("name", release_name)
            state["status"] = {
                "name": release_name,
                "namespace": state.get("namespace", "default"),
                "chart": state.get("chart"),
                "version": state.get("version"),
                "status": "deployed",
                "revision": 1,
            }
            return f"{state['status']['namespace']}/{release_name}", state
        if args.custom and args.typ.startswith("kubernetes:") and "kind" in state:
            metadata = dict(state.get("metadata") or {})
            metadata.setdefault("name", _autoname(args.name, args.typ))
            state["metadata"] = metadata
            # apiextensions.CustomResource reads its apiVersion back as the output `api_version`.
            state["api_version"] = state.get("apiVersion")
            if args.typ == CRD_TYPE:
                # No program reads a CRD's schema back, and the upstream CRDs are megabytes: not echoed.
                state.pop("spec", None)
            namespace = metadata.get("namespace")
            return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"]), state
        return f"{args.name}-id", state

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "kubernetes:yaml:decode":
            documents = [document for document in yaml.safe_load_all(args.args["text"]) if document]
            return {"result": documents}, None
        if args.token == "kubernetes:helm:template":
            raise ProgramError(
                "the program renders a chart with helm.v3.Chart, which needs helm; use a Release"
            )
        return {}, None


def _existing_object(resource_type: str, resource_id: str) -> dict[str, Any]:
    """What a cluster would answer to the program's reads. Only Strimzi's cluster CA Secret is read (after
    the Kafka is Ready): its shape, with a stand-in certificate (the copy's data is redacted anyway)."""
    namespace, _, name = resource_id.rpartition("/")
    if resource_type == SECRET_TYPE and name.endswith(CLUSTER_CA_SECRET_SUFFIX):
        certificate = (
            f"-----BEGIN CERTIFICATE-----\n[the cluster CA of {resource_id}]\n-----END CERTIFICATE-----\n"
        )
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {
                "ca.crt": base64.b64encode(certificate.encode()).decode(),
                "ca.p12": base64.b64encode(b"[PKCS12 store]").decode(),
                "ca.password": base64.b64encode(b"[store password]").decode(),
            },
        }
    raise ProgramError(f"the program reads {resource_type} {resource_id}, which a render cannot know")


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """Keeps each registration's inputs exactly as sent (secrets still marked at the leaf they are on;
    the SDK's own deserializer marks the whole enclosing object)."""

    def __init__(self, mocks: _EchoMocks) -> None:
        super().__init__(mocks)
        self.echo_mocks = mocks
        self.registrations: list[Registration] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            self.registrations.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    custom=bool(request.custom),
                    parent=request.parent,
                    inputs=json_format.MessageToDict(request.object),
                    transforms=self.echo_mocks.transforms.get((request.type, request.name), ()),
                )
            )
        return response


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def render_stack(
    stack: str,
    *,
    project_dir: Path = REPO_ROOT,
    program_dir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> RenderedStack:
    """Run the stack's program under mocks (a preview) and return what it would create.

    `overrides` replace config values (`key` or `namespace:key`); `program_dir` replaces `main:` from
    Pulumi.yaml. A failing program raises ProgramError with the program's own message.
    """
    project = load_project(project_dir)
    program = (program_dir or project.program_dir).resolve()
    if not (program / "__main__.py").is_file():
        raise StreamstackError(f"no Pulumi program at {program} (expected __main__.py)")
    config, secret_keys = stack_config(project, stack, overrides)
    # A thread of its own starts with an empty context and no event loop: Pulumi's context-variable state
    # (config, root stack, settings) and its event loop stay away from the caller's and from other runs.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"render-{stack}") as runner:
        return runner.submit(_render_in_context, project, program, stack, config, secret_keys).result()


def _render_in_context(
    project: Project, program: Path, stack: str, config: dict[str, str], secret_keys: list[str]
) -> RenderedStack:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    error_log = _ErrorLog()
    logger = logging.getLogger(f"streamstack.manifests.{stack}")
    logger.propagate = False
    logger.addHandler(error_log)
    try:
        settings.reset_options(
            project=project.name, stack=stack, root_directory=str(project.root), preview=True
        )
        pulumi.runtime.set_all_config(config, secret_keys)
        monitor = _RecordingMonitor(_EchoMocks())
        pulumi.runtime.set_mocks(
            monitor.mocks, project=project.name, stack=stack, preview=True, logger=logger, monitor=monitor
        )
        root: Any = settings.get_root_resource()  # the Stack that set_mocks created
        exported: dict[str, Any] = {}

        async def run_program() -> None:
            runpy.run_path(str(program), run_name="__main__")
            exported.update(await _resolve_outputs(dict(root.outputs)))

        try:
            # The environment lasts until every registration is done: the SDK reads the program's type
            # annotations (from its modules' globals) while it serializes inputs.
            with _program_environment(program):
                _sync_await(run_pulumi_func(run_program))
        except Exception as error:
            logged = "".join(f"\n  {message}" for message in error_log.messages)
            raise ProgramError(
                f"the Pulumi program for stack {stack!r} failed: {type(error).__name__}: {error}"
                f"{_where(error, project.root)}{logged}"
            ) from error
        if error_log.messages:
            raise ProgramError(f"the Pulumi program for stack {stack!r} logged errors: {error_log.messages}")
        return _rendered(
            stack,
            {**config, "__project__": project.name},
            monitor.registrations,
            exported,
            program=program,
            loop=loop,
        )
    finally:
        logger.removeHandler(error_log)
        loop.close()


def _where(error: BaseException, project_root: Path) -> str:
    """` (at infra/x.py:12)`: the project's innermost line in the traceback. Left out for a ValueError,
    the program's own verdict on its config (a guard rail), whose message says what to change."""
    if isinstance(error, ValueError):
        return ""
    innermost = ""
    root, environment = project_root.resolve(), Path(sys.prefix).resolve()
    for frame in traceback.extract_tb(error.__traceback__):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(root) and not path.is_relative_to(environment):
            innermost = f" (at {path.relative_to(root)}:{frame.lineno})"
    return innermost


@contextlib.contextmanager
def _program_environment(program: Path) -> Iterator[None]:
    """What the language host does (cwd = program dir, program dir first on sys.path), undone afterwards;
    modules the program imported from its directory are dropped so the next run imports them afresh."""
    previous_cwd = Path.cwd()
    modules_before = set(sys.modules)
    sys.path.insert(0, str(program))
    os.chdir(program)
    try:
        yield
    finally:
        os.chdir(previous_cwd)
        with contextlib.suppress(ValueError):
            sys.path.remove(str(program))
        for name in set(sys.modules) - modules_before:
            module_file = getattr(sys.modules[name], "__file__", None)
            if module_file and Path(module_file).resolve().is_relative_to(program):
                del sys.modules[name]


async def _resolve_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for name, value in outputs.items():
        output = pulumi.Output.from_input(value)
        if await output.is_secret():
            resolved[name] = SECRET_PLACEHOLDER
        elif not await output.is_known():
            resolved[name] = UNKNOWN_PLACEHOLDER
        else:
            resolved[name] = _plain_output(await output.future())
    return resolved


def _plain_output(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain_output(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_output(child) for child in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


# --- turning registrations into manifests --------------------------------------------------------------


def _rendered(
    stack: str,
    config: dict[str, str],
    registrations: list[Registration],
    outputs: dict[str, Any],
    *,
    program: Path,
    loop: asyncio.AbstractEventLoop,
) -> RenderedStack:
    manifests: list[dict[str, Any]] = []
    releases: list[HelmRelease] = []
    local_charts: list[LocalChart] = []
    unrendered: list[str] = []
    kubernetes_version = _kubernetes_version(config)
    for registration in registrations:
        local = (
            _local_chart_dir(registration, program)
            if registration.type in (HELM_CHART_TYPE, HELM_RELEASE_TYPE)
            else None
        )
        if local is not None:
            local_charts.append(render_local_chart(registration, local, kubernetes_version, loop))
        elif registration.type in REMOTE_COMPONENT_TYPES:
            unrendered.append(f"{registration.type} {registration.name}")
        elif registration.type == HELM_RELEASE_TYPE:
            releases.append(_helm_release(registration))
        elif registration.custom and registration.type.startswith("kubernetes:"):
            manifests.append(_manifest(registration))
    manifests += [item.manifest for chart in local_charts for item in chart.objects]
    manifests.sort(
        key=lambda item: (item["kind"], item["metadata"].get("namespace", ""), item["metadata"]["name"])
    )
    releases.sort(key=lambda release: (release.namespace or "", release.release_name))
    local_charts.sort(key=lambda chart: (chart.namespace, chart.release_name))
    return RenderedStack(
        stack=stack,
        config=config,
        manifests=manifests,
        helm_releases=releases,
        outputs=outputs,
        registrations=list(registrations),
        unrendered=unrendered,
        local_charts=local_charts,
    )


# --- local charts: rendered with the real helm -------------------------------------------------------


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


class ChartRenderError(StreamstackError):
    """`helm template` refused the chart's values (schema, the chart's own checks) or failed."""


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


# --- validation and files ----------------------------------------------------------------------------


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
        directory = out_dir / "helm" / release.release_name
        directory.mkdir(parents=True, exist_ok=False)
        (directory / "release.yaml").write_text(to_yaml(release.record()))
        (directory / "values.yaml").write_text(to_yaml(release.values))
        written += [directory / "release.yaml", directory / "values.yaml"]
    for chart in rendered.local_charts:
        directory = out_dir / "charts" / chart.release_name
        directory.mkdir(parents=True, exist_ok=False)
        (directory / "release.yaml").write_text(to_yaml(chart.record()))
        (directory / "values.yaml").write_text(to_yaml(chart.values))
        written += [directory / "release.yaml", directory / "values.yaml"]
    outputs_path = out_dir / "outputs.yaml"
    outputs_path.write_text(to_yaml(rendered.outputs))
    written.append(outputs_path)
    return written


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
