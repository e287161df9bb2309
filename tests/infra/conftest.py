"""Pulumi mocks for the infra tests: every resource the program registers is recorded (type, name, inputs,
transforms and the options the engine would see: provider, parent, dependencies, protect, retainOnDelete),
nothing runs.

Mock inputs arrive camelCase with numbers as floats; `CustomResource.api_version` is None unless the mock
echoes it back, so `new_resource` returns the inputs (apiVersion and kind included) as the outputs. A
`helm.v4.Chart` of one of our charts creates no children under mocks: `Stack.chart_objects()` renders it
with the real helm (streamstack.render.render_local_chart), as `streamstack render` does.
"""

from __future__ import annotations

import base64
import json
import runpy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import config as stack_config
from streamstack.paths import REPO_ROOT
from streamstack.render import (
    HELM_CHART_TYPE,
    ChartObject,
    Registration,
    render_local_chart,
)
from streamstack.render.mocks import EchoMocks, RecordingMonitor

# pulumi.runtime.test runs a function under the mocks and waits until every registration has been answered.
under_mocks: Callable[[Callable[[], object]], Callable[[], None]] = pulumi.runtime.test
PROGRAM = REPO_ROOT / "infra" / "__main__.py"
# Strimzi's cluster CA Secret as the test cluster holds it, mid-renewal: the current certificate as `ca.crt`,
# the replaced one as `ca-<date>.crt`, and the PKCS12 store with its password (not certificates).
CLUSTER_CA_PEM = "-----BEGIN CERTIFICATE-----\nY2x1c3Rlci1jYS12MQ==\n-----END CERTIFICATE-----\n"
OLD_CLUSTER_CA_PEM = "-----BEGIN CERTIFICATE-----\nY2x1c3Rlci1jYS12MA==\n-----END CERTIFICATE-----\n"


def strimzi_cluster_ca_data() -> dict[str, str]:
    def encoded(value: str) -> str:
        return base64.b64encode(value.encode()).decode()

    return {
        "ca.crt": encoded(CLUSTER_CA_PEM),
        "ca-2026-01-01T00-00-00Z.crt": encoded(OLD_CLUSTER_CA_PEM),
        "ca.p12": encoded("pkcs12"),
        "ca.password": encoded("store-password"),
    }


@dataclass
class Recorded:
    """One registered resource: what the provider would receive and how the engine would treat it."""

    typ: str
    name: str
    inputs: dict[str, Any]
    urn: str = ""
    parent: str = ""
    provider: str = ""
    dependencies: tuple[str, ...] = ()
    protect: bool = False
    retain_on_delete: bool = False
    custom: bool = True
    transforms: tuple[Any, ...] = ()

    @property
    def kind(self) -> str:
        return self.typ.rsplit(":", 1)[-1]

    @property
    def metadata(self) -> dict[str, Any]:
        value: dict[str, Any] = self.inputs.get("metadata") or {}
        return value

    @property
    def spec(self) -> dict[str, Any]:
        value: dict[str, Any] = self.inputs.get("spec") or {}
        return value


class Stack:
    """What one program run registered, with lookups by kind and name."""

    def __init__(self, monitor: RecordingMonitor) -> None:
        self.monitor = monitor
        self.mocks = monitor.echo_mocks
        self.exports: dict[str, Any] = {}  # the stack outputs, resolved (run_program only)

    def resources(self) -> list[Recorded]:
        result = []
        for key, (request, urn) in self.monitor.requests.items():
            recorded = Recorded(
                request.type,
                request.name,
                self.mocks.inputs.get(key, {}),
                transforms=self.mocks.transforms.get(key, ()),
            )
            recorded.urn = urn
            recorded.parent = request.parent
            recorded.provider = request.provider
            recorded.dependencies = tuple(request.dependencies)
            recorded.protect = bool(request.protect)
            recorded.retain_on_delete = bool(request.retainOnDelete)
            recorded.custom = bool(request.custom)
            result.append(recorded)
        return result

    def of_kind(self, kind: str) -> list[Recorded]:
        return [resource for resource in self.resources() if resource.custom and resource.kind == kind]

    def named(self, kind: str, name: str) -> Recorded:
        matches = [resource for resource in self.of_kind(kind) if resource.metadata.get("name") == name]
        assert len(matches) == 1, f"expected one {kind} named {name}, found {len(matches)}"
        return matches[0]

    def by_logical_name(self, name: str) -> Recorded:
        matches = [resource for resource in self.resources() if resource.name == name]
        assert len(matches) == 1, f"expected one resource {name}, found {len(matches)}"
        return matches[0]

    def charts(self) -> list[Recorded]:
        """The helm.v4.Chart installs of our charts."""
        return [resource for resource in self.resources() if resource.typ == HELM_CHART_TYPE]

    def chart_objects(self, kubernetes_version: str = "1.33") -> Objects:
        """Every object of every chart install, rendered with helm from the values the program passed, with
        the options (retainOnDelete, protect) the Chart resource and its transforms give it."""
        rendered: list[ChartObject] = []
        for chart in self.charts():
            registration = Registration(
                chart.typ, chart.name, False, chart.parent, chart.inputs, chart.transforms
            )
            chart_dir = Path(chart.inputs["chart"])
            rendered += render_local_chart(registration, chart_dir, kubernetes_version).objects
        return Objects(rendered)


class Objects:
    """Rendered chart objects with lookups by kind and name."""

    def __init__(self, objects: list[ChartObject]) -> None:
        self.objects = objects

    def manifests(self) -> list[dict[str, Any]]:
        return [item.manifest for item in self.objects]

    def of_kind(self, kind: str) -> list[ChartObject]:
        return [item for item in self.objects if item.manifest["kind"] == kind]

    def named(self, kind: str, name: str) -> ChartObject:
        matches = [item for item in self.of_kind(kind) if item.manifest["metadata"]["name"] == name]
        assert len(matches) == 1, f"expected one {kind} named {name}, found {len(matches)}"
        return matches[0]

    def manifest(self, kind: str, name: str) -> dict[str, Any]:
        return self.named(kind, name).manifest


def stack_sections(stack: str) -> dict[str, Any]:
    """The `streamstack:` values of Pulumi.<stack>.yaml, by key without the namespace."""
    document = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))
    return {
        key.split(":", 1)[1]: value
        for key, value in document["config"].items()
        if key.startswith("streamstack:")
    }


def load_config(stack: str, **overrides: Any) -> stack_config.StackConfig:
    """`infra.config.load` on the stack file with sections replaced; no Pulumi runtime involved."""
    sections = {**stack_sections(stack), **overrides}
    return stack_config.load(sections.get)


@pytest.fixture
def mocked() -> Iterator[Callable[[str], Stack]]:
    """`mocked(stack)` installs fresh mocks for that stack name and returns what they record."""

    def install(stack: str = "dev") -> Stack:
        mocks = EchoMocks(cluster_ca_data=strimzi_cluster_ca_data())
        monitor = RecordingMonitor(mocks)
        # A fresh root Stack per run: set_mocks keeps an existing one, and with it the previous run's outputs.
        pulumi.runtime.settings.ROOT.set(None)
        pulumi.runtime.set_mocks(mocks, project="streamstack", stack=stack, preview=False, monitor=monitor)
        pulumi.runtime.set_all_config({}, [])  # no secret keys left from another test
        return Stack(monitor)

    yield install
    pulumi.runtime.set_all_config({}, [])


def run_program(
    mocked: Callable[[str], Stack],
    stack: str,
    sections: Mapping[str, Any] | None = None,
    *,
    strings: Mapping[str, str] | None = None,
    secret_keys: Sequence[str] = (),
) -> Stack:
    """Run infra/__main__.py as `pulumi up` runs it, on Pulumi.<stack>.yaml (or `sections`), under mocks.
    `strings` are string settings as `pulumi config set` stores them; `secret_keys` name the settings the CLI
    would mark secret (set with `--secret`), as the language host hands them to the program."""
    recorder = mocked(stack)
    values = stack_sections(stack) if sections is None else sections
    config = {f"streamstack:{key}": json.dumps(value) for key, value in values.items()}
    config.update({f"streamstack:{key}": value for key, value in (strings or {}).items()})
    pulumi.runtime.set_all_config(config, [f"streamstack:{key}" for key in secret_keys])

    def program() -> pulumi.Output[None]:
        runpy.run_path(str(PROGRAM), run_name="__main__")
        root = pulumi.runtime.settings.get_root_resource()
        assert root is not None
        exported: dict[str, Any] = root.outputs  # type: ignore[attr-defined]
        return pulumi.Output.all(**exported).apply(recorder.exports.update)

    under_mocks(program)()
    return recorder


def build(component: Callable[[], object]) -> None:
    """Construct components under the mocks and wait until every registration has reached them."""

    under_mocks(component)()
