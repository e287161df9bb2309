"""What every component shares: object metadata, readiness annotations, namespaces with Pod Security
levels, NetworkPolicies, and the inputs of every chart of ours that runs a Kafka client."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as kubernetes

from infra.kafka_access import KafkaClient
from infra.network import Peers, Policy

WAIT_FOR = "pulumi.com/waitFor"
READY = "condition=Ready"
# How long Pulumi awaits an object's readiness, for objects it manages but cannot be given ResourceOptions
# (a helm.v4.Chart's children): pulumi-kubernetes reads it after customTimeouts, before its defaults.
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"
PART_OF = {"app.kubernetes.io/part-of": "streamstack", "app.kubernetes.io/managed-by": "pulumi"}


@dataclass(frozen=True, kw_only=True)
class KafkaClientArgs:
    """Inputs of a chart of ours whose pods are Kafka clients (StreamingJob, LagExporter): its KafkaUser and
    listener (with a CA Secret, the chart mounts it where the clients run), the peers its NetworkPolicy
    admits, and the cluster's node count, which decides the volumes that reach every pod."""

    kafka: KafkaClient
    cluster_nodes: int
    peers: Peers


def metadata(
    name: str,
    namespace: pulumi.Input[str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> kubernetes.meta.v1.ObjectMetaArgs:
    """Explicit names (no Pulumi suffix): other objects and the stack outputs refer to them by name."""
    return kubernetes.meta.v1.ObjectMetaArgs(
        name=name,
        namespace=namespace,
        labels={**PART_OF, **(labels or {})},
        annotations=dict(annotations) if annotations else None,
    )


def child(
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
    **options: Any,
) -> pulumi.ResourceOptions:
    """Options of a component's child: parented (so it inherits the component's provider) plus extras."""
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on), **options)


def platform_namespace(
    parent: pulumi.Resource,
    logical_prefix: str,
    name: str,
    policies: Sequence[Policy],
    *,
    enforce: str = "restricted",
    logical_name: str | None = None,
) -> tuple[kubernetes.core.v1.Namespace, list[kubernetes.networking.v1.NetworkPolicy]]:
    """The namespace `name` at Pod Security level `enforce` and its NetworkPolicies (infra/network.py),
    created after it: `<logical_prefix>-namespace` (or `logical_name`) and `<logical_prefix>-netpol-...`."""
    created = kubernetes.core.v1.Namespace(
        logical_name or f"{logical_prefix}-namespace",
        metadata=metadata(name, labels=pod_security(enforce)),
        opts=child(parent),
    )
    return created, network_policies(parent, logical_prefix, policies, [created])


def pod_security(enforce: str, warn: str = "restricted") -> dict[str, str]:
    """Pod Security Admission labels of a namespace."""
    return {
        "pod-security.kubernetes.io/enforce": enforce,
        "pod-security.kubernetes.io/warn": warn,
        "pod-security.kubernetes.io/audit": warn,
    }


def network_policies(
    parent: pulumi.Resource,
    logical_prefix: str,
    policies: Sequence[Policy],
    depends_on: Sequence[pulumi.Resource] = (),
) -> list[kubernetes.networking.v1.NetworkPolicy]:
    """The NetworkPolicies of infra/network.py as objects of the component."""
    return [
        kubernetes.networking.v1.NetworkPolicy(
            f"{logical_prefix}-netpol-{item.namespace}-{item.name}",
            metadata=metadata(item.name, item.namespace),
            # Kubernetes' own (camelCase) field names, which the SDK sends as they are.
            spec=cast(Any, item.spec),
            opts=child(parent, depends_on),
        )
        for item in policies
    ]
