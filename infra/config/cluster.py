"""`streamstack:cluster` and the Kafka node pool: namespaces, storage, and the CIDRs the
NetworkPolicies admit."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from functools import partial

from contracts.pipeline import DNS_LABEL_PATTERN
from infra.config.base import (
    NODE_ROLES,
    ConfigError,
    Resources,
    Section,
    _require_quantity,
    _resources,
    require_match,
    require_minimum,
    setting,
)

_KUBERNETES_VERSION = re.compile(r"^1\.[0-9]+$")


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

    def __post_init__(self) -> None:
        require_match(setting("cluster.kubernetesVersion"), self.kubernetes_version, _KUBERNETES_VERSION)
        require_minimum(setting("cluster.nodes"), self.nodes, 1)
        for key, cidrs, what in (
            (
                "apiServerCidrs",
                self.api_server_cidrs,
                "the API server's endpoint addresses (EndpointSlices of `kubernetes`)",
            ),
            ("nodeCidrs", self.node_cidrs, "the nodes' InternalIP addresses"),
        ):
            _require_cluster_cidrs(setting(f"cluster.{key}"), cidrs, what)

    @property
    def kubernetes_minor(self) -> tuple[int, int]:
        major, minor = self.kubernetes_version.split(".")
        return int(major), int(minor)


def _require_cluster_cidrs(name: str, cidrs: tuple[str, ...], what: str) -> None:
    """CIDRs of the cluster's own addresses (`what`, for the message): each a network address with its
    prefix (172.18.0.2/32), never a catch-all such as 0.0.0.0/0 or ::/0, which would open the ports to every
    address, the internet included."""
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


@dataclass(frozen=True)
class NodePool:
    """A Strimzi KafkaNodePool: KRaft controllers, brokers, or both (dual-role, for one-node clusters);
    `setting` names the pool's entry of `kafka.nodePools`."""

    name: str
    roles: tuple[str, ...]
    replicas: int
    storage_size: str
    storage_class: str | None = None
    resources: Resources = field(default_factory=partial(Resources, setting("kafka.nodePools.resources")))
    setting: str = setting("kafka.nodePools")

    def __post_init__(self) -> None:
        roles = self.roles
        if not roles or any(role not in NODE_ROLES for role in roles) or len(set(roles)) != len(roles):
            raise ConfigError(
                f"{self.setting}.roles: expected one or both of {', '.join(NODE_ROLES)}, got {roles}"
            )
        require_match(f"{self.setting}.name", self.name, DNS_LABEL_PATTERN)
        require_minimum(f"{self.setting}.replicas", self.replicas, 1)
        _require_quantity(f"{self.setting}.storage.size", self.storage_size)


def _cluster(section: Section) -> ClusterConfig:
    section.only("nodes", "kubernetesVersion", "kubeconfigContext", "apiServerCidrs", "nodeCidrs")
    return ClusterConfig(
        nodes=section.integer("nodes", ClusterConfig.nodes),
        kubernetes_version=section.string("kubernetesVersion", ClusterConfig.kubernetes_version),
        kubeconfig_context=section.string("kubeconfigContext", None),
        api_server_cidrs=section.strings("apiServerCidrs", ()),
        node_cidrs=section.strings("nodeCidrs", ()),
    )


def _node_pool(section: Section) -> NodePool:
    section.only("name", "roles", "replicas", "storage", "resources")
    storage = section.section("storage")
    storage.only("size", "class")
    return NodePool(
        name=section.string("name"),
        roles=section.strings("roles"),
        replicas=section.integer("replicas"),
        storage_size=storage.string("size"),
        storage_class=storage.string("class", None),
        resources=_resources(section.section("resources")),
        setting=setting(section.path),
    )
