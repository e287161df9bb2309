"""The one Pulumi mock engine: it records every registration and echoes inputs as outputs, so a program runs
in-process with no CLI or cluster. `streamstack render` and the infra tests both use it."""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

import yaml
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks

from streamstack.render.helm import _autoname
from streamstack.render.records import (
    CLUSTER_CA_SECRET_SUFFIX,
    CRD_TYPE,
    HELM_RELEASE_TYPE,
    SECRET_TYPE,
    ProgramError,
    Registration,
)


class EchoMocks(pulumi_mocks.Mocks):
    """Outputs = inputs (so `CustomResource.api_version`, names and specs resolve), plus what a real
    provider would add: a name for autonamed objects, a status for Helm releases. Keeps each resource's
    inputs (as the SDK deserialized them) and transforms, and every read of an existing object.
    `cluster_ca_data` is the data of Strimzi's cluster CA Secret that reads return (a stand-in by default)."""

    def __init__(self, cluster_ca_data: Mapping[str, str] | None = None) -> None:
        self.cluster_ca_data = cluster_ca_data
        self.inputs: dict[tuple[str, str], dict[str, Any]] = {}
        self.transforms: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.reads: list[tuple[str, str]] = []  # (type, "<namespace>/<name>") of every Resource.get

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.custom is None and args.resource_id:  # a read of an existing object (Resource.get)
            self.reads.append((args.typ, args.resource_id))
            return args.resource_id, existing_object(args.typ, args.resource_id, self.cluster_ca_data)
        self.inputs[(args.typ, args.name)] = dict(args.inputs)
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
        raise ProgramError(f"the program made a function call a render cannot answer: {args.token}")


def existing_object(
    resource_type: str, resource_id: str, cluster_ca_data: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What a cluster would answer to the program's reads. Only Strimzi's cluster CA Secret is read (after
    the Kafka is Ready): its shape, with `cluster_ca_data` or a stand-in certificate (the copy's data is
    redacted anyway)."""
    namespace, _, name = resource_id.rpartition("/")
    if resource_type == SECRET_TYPE and name.endswith(CLUSTER_CA_SECRET_SUFFIX):
        certificate = (
            f"-----BEGIN CERTIFICATE-----\n[the cluster CA of {resource_id}]\n-----END CERTIFICATE-----\n"
        )
        data = cluster_ca_data or {
            "ca.crt": base64.b64encode(certificate.encode()).decode(),
            "ca.p12": base64.b64encode(b"[PKCS12 store]").decode(),
            "ca.password": base64.b64encode(b"[store password]").decode(),
        }
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": dict(data),
        }
    raise ProgramError(f"the program reads {resource_type} {resource_id}, which a render cannot know")


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """Keeps each registration's inputs exactly as sent (secrets still marked at the leaf they are on;
    the SDK's own deserializer marks the whole enclosing object), and each request with its URN for the
    resource options the Mocks interface does not see (parent, provider, protect, retainOnDelete)."""

    def __init__(self, mocks: EchoMocks) -> None:
        super().__init__(mocks)
        self.echo_mocks = mocks
        self.registrations: list[Registration] = []
        self.requests: dict[tuple[str, str], tuple[Any, str]] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            self.requests[(request.type, request.name)] = (request, response.urn)
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
