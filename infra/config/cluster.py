"""`streamstack:cluster` and the Kafka node pool: namespaces, storage, and the CIDRs the
NetworkPolicies admit."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from infra.config.base import (
    _DNS_LABEL,
    NODE_ROLES,
    ConfigError,
    Resources,
    Section,
    _require_quantity,
    _resources,
)


@dataclass(frozen=True)
class ClusterConfig:
    """The target cluster: how many nodes pods may spread over decides which volumes reach every executor."""

    nodes: int = 1
    kubernetes_version: str = "1.33"
    kubeconfig_context: str | None = None
    # The Kubernetes API server's endpoint addresses (NetworkPolicies see those, not the Service IP): the
    # only destinations of the drivers' and operators' API egress, and where the API server calls the
    # Prometheus Operator's admission webhook from. Empty: no API egress at all.
    api_server_cidrs: tuple[str, ...] = ()
    # The nodes' addresses (InternalIP): where Prometheus scrapes the kubelet (cAdvisor, volume stats) and
    # node-exporter, which run on the host network. Empty: Prometheus reaches no node.
    node_cidrs: tuple[str, ...] = ()

    @property
    def kubernetes_minor(self) -> tuple[int, int]:
        major, minor = self.kubernetes_version.split(".")
        return int(major), int(minor)


@dataclass(frozen=True)
class NodePool:
    """A Strimzi KafkaNodePool: KRaft controllers, brokers, or both (dual-role, for one-node clusters)."""

    name: str
    roles: tuple[str, ...]
    replicas: int
    storage_size: str
    storage_class: str | None = None
    resources: Resources = field(default_factory=Resources)


def _cluster_cidrs(section: Section, key: str, what: str) -> tuple[str, ...]:
    """A list of CIDRs of the cluster's own addresses (`what`, for the message): each a network address with
    its prefix (172.18.0.2/32), never a catch-all such as 0.0.0.0/0 or ::/0, which would open the ports to
    every address, the internet included. Empty by default: no rule to any address."""
    name = section.name(key)
    cidrs: tuple[str, ...] = section.strings(key, ())
    for index, cidr in enumerate(cidrs):
        try:
            if "/" not in cidr:  # Kubernetes' ipBlock.cidr needs the prefix length, even for one address
                raise ValueError("no prefix length, e.g. /32 for one address")
            network = ipaddress.ip_network(cidr, strict=True)
        except ValueError as error:
            raise ConfigError(f"{name}[{index}]: {cidr!r} is not a CIDR ({error})") from None
        if network.prefixlen == 0:
            raise ConfigError(
                f"{name}[{index}]: {cidr} is every address, the internet included; list {what} "
                "(e.g. 172.18.0.2/32)"
            )
    if len(set(cidrs)) != len(cidrs):
        raise ConfigError(f"{name}: a CIDR is listed twice")
    return cidrs


def _cluster(section: Section) -> ClusterConfig:
    section.only("nodes", "kubernetesVersion", "kubeconfigContext", "apiServerCidrs", "nodeCidrs")
    version = section.string(
        "kubernetesVersion", ClusterConfig.kubernetes_version, re.compile(r"^1\.[0-9]+$")
    )
    return ClusterConfig(
        nodes=section.integer("nodes", ClusterConfig.nodes, minimum=1),
        kubernetes_version=version,
        kubeconfig_context=section.string("kubeconfigContext", None),
        api_server_cidrs=_cluster_cidrs(
            section, "apiServerCidrs", "the API server's endpoint addresses (EndpointSlices of `kubernetes`)"
        ),
        node_cidrs=_cluster_cidrs(section, "nodeCidrs", "the nodes' InternalIP addresses"),
    )


def _node_pool(section: Section) -> NodePool:
    section.only("name", "roles", "replicas", "storage", "resources")
    roles = section.strings("roles")
    if not roles or any(role not in NODE_ROLES for role in roles) or len(set(roles)) != len(roles):
        raise ConfigError(
            f"{section.name('roles')}: expected one or both of {', '.join(NODE_ROLES)}, got {roles}"
        )
    storage = section.section("storage")
    storage.only("size", "class")
    return NodePool(
        name=section.string("name", pattern=_DNS_LABEL),
        roles=roles,
        replicas=section.integer("replicas", minimum=1),
        storage_size=_require_quantity(storage.name("size"), storage.string("size")),
        storage_class=storage.string("class", None),
        resources=_resources(section.section("resources"), Resources()),
    )
