"""What the rendered stack says about Kafka, read for the cluster rehearsal: users, ACLs, topics, logins.

The rendered stack (`streamstack.render.render_stack(...).manifests`) is the one source: its `KafkaTopic`s
become the rehearsal broker's topics, each `KafkaUser` a SCRAM-SHA-512 user with exactly the ACLs of its
`spec.authorization` (translated 1:1 into Kafka ACL bindings, no others), and the rendered workloads say
which user each process logs in as and with which security protocol.

    users = rendered_kafka_users(rendered.manifests)          # [RenderedKafkaUser(name, acls), ...]
    topics = rendered_kafka_topics(rendered.manifests)        # [RenderedKafkaTopic(name, partitions, ...)]
    workload_kafka_users(rendered.manifests)                  # {"SparkApplication/user-view": user, ...}
    users_by_secret(users)[rendered.outputs["loadGeneratorSecret"]]   # the producers' user
    rendered_security_protocol(rendered.manifests)            # "SASL_PLAINTEXT" or "SASL_SSL"

A user's Secret is named after the user (Strimzi's User Operator, no secret prefix), so a workload's user is
the KafkaUser whose name is the Secret it takes its credentials from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
)

from contracts.kafka_security import PROTOCOL_VARIABLE
from streamstack.errors import StreamstackError
from streamstack.local.kafka import TopicSpec

STRIMZI_API_VERSION = "kafka.strimzi.io/v1"
SCRAM_MECHANISM = "SCRAM-SHA-512"  # the only mechanism of Strimzi's `scram-sha-512` users
CLUSTER_RESOURCE_NAME = "kafka-cluster"  # Kafka's name for the cluster resource (what Strimzi binds)
CLIENT_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")

_RESOURCE_TYPES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.CLUSTER,
    "transactionalId": ResourceType.TRANSACTIONAL_ID,
}
_PATTERN_TYPES = {"literal": ACLResourcePatternType.LITERAL, "prefix": ACLResourcePatternType.PREFIXED}
_PERMISSIONS = {"allow": ACLPermissionType.ALLOW, "deny": ACLPermissionType.DENY}
_OPERATIONS = {
    "Read": ACLOperation.READ,
    "Write": ACLOperation.WRITE,
    "Create": ACLOperation.CREATE,
    "Delete": ACLOperation.DELETE,
    "Alter": ACLOperation.ALTER,
    "Describe": ACLOperation.DESCRIBE,
    "ClusterAction": ACLOperation.CLUSTER_ACTION,
    "AlterConfigs": ACLOperation.ALTER_CONFIGS,
    "DescribeConfigs": ACLOperation.DESCRIBE_CONFIGS,
    "IdempotentWrite": ACLOperation.IDEMPOTENT_WRITE,
    "All": ACLOperation.ALL,
}
# Kafka's implied operations: Describe is allowed by Read, Write, Delete or Alter, DescribeConfigs by
# AlterConfigs (AclEntry.supportedOperations / StandardAuthorizerData).
_IMPLIED_BY = {
    "Describe": ("Read", "Write", "Delete", "Alter"),
    "DescribeConfigs": ("AlterConfigs",),
}


# --- what the stack renders ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderedAcl:
    """One rule of a KafkaUser's `spec.authorization.acls` with Strimzi's defaults filled in."""

    resource_type: str  # topic | group | cluster | transactionalId
    name: str | None  # None for the cluster
    pattern_type: str  # literal | prefix
    operations: tuple[str, ...]
    permission: str = "allow"  # allow | deny
    host: str = "*"

    def matches(self, resource_type: str, name: str) -> bool:
        """Whether the rule's resource covers `name` (a wildcard literal `*` covers every name)."""
        if resource_type != self.resource_type:
            return False
        if resource_type == "cluster":
            return True
        assert self.name is not None
        if self.pattern_type == "prefix":
            return name.startswith(self.name)
        return self.name in (name, "*")

    def bindings(self, principal: str) -> list[ACL]:
        """The Kafka ACL bindings of this rule for `principal`: one per operation."""
        pattern = ResourcePattern(
            _RESOURCE_TYPES[self.resource_type],
            CLUSTER_RESOURCE_NAME if self.resource_type == "cluster" else self.name,
            _PATTERN_TYPES[self.pattern_type],
        )
        return [
            ACL(principal, self.host, _OPERATIONS[operation], _PERMISSIONS[self.permission], pattern)
            for operation in self.operations
        ]


@dataclass(frozen=True)
class RenderedKafkaUser:
    """A rendered `KafkaUser`: a SCRAM-SHA-512 user and its ACLs; its Secret has its name."""

    name: str
    acls: tuple[RenderedAcl, ...]
    namespace: str | None = None

    @property
    def principal(self) -> str:
        return f"User:{self.name}"

    @property
    def secret_name(self) -> str:
        return self.name

    def bindings(self) -> list[ACL]:
        """Every Kafka ACL binding of the user: exactly what its KafkaUser's ACLs say, nothing more."""
        return [binding for acl in self.acls for binding in acl.bindings(self.principal)]

    def allows(self, operation: str, resource_type: str, name: str = CLUSTER_RESOURCE_NAME) -> bool:
        """Whether the ACLs allow `operation` ("Read", "Write", ...) on a resource, as Kafka decides it
        (a matching deny wins; Describe is implied by Read/Write/Delete/Alter; host rules are ignored)."""
        granting = (operation, "All", *_IMPLIED_BY.get(operation, ()))
        matching = [acl for acl in self.acls if acl.matches(resource_type, name)]
        if any(acl.permission == "deny" and {operation, "All"} & set(acl.operations) for acl in matching):
            return False
        return any(acl.permission == "allow" and set(granting) & set(acl.operations) for acl in matching)

    def without_acl(self, index: int, name: str | None = None) -> RenderedKafkaUser:
        """This user without its `index`th ACL rule (named `name`, if given): a missing ACL."""
        acls = self.acls[:index] + self.acls[index + 1 :]
        return RenderedKafkaUser(name or self.name, acls, self.namespace)


@dataclass(frozen=True)
class RenderedKafkaTopic:
    """A rendered `KafkaTopic`: its Kafka name, partitions, replicas and topic configs (as strings)."""

    name: str
    partitions: int
    replicas: int
    config: Mapping[str, str] = field(default_factory=dict)

    def single_broker_spec(self) -> TopicSpec:
        """The topic on one broker: replication factor 1 and `min.insync.replicas` at most 1 (the rendered
        value could never be met there); partitions and every other config as rendered."""
        config = dict(self.config)
        if "min.insync.replicas" in config:
            config["min.insync.replicas"] = "1"
        return TopicSpec(self.name, partitions=self.partitions, extra_config=config)


def _strimzi(objects: Iterable[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    found = []
    for manifest in objects:
        if manifest.get("kind") != kind or not str(manifest.get("apiVersion", "")).startswith(
            "kafka.strimzi.io/"
        ):
            continue
        if manifest["apiVersion"] != STRIMZI_API_VERSION:
            raise StreamstackError(
                f"{kind} {manifest['metadata']['name']}: apiVersion {manifest['apiVersion']}, "
                f"expected {STRIMZI_API_VERSION} (Strimzi 1.2.0 serves only v1)"
            )
        found.append(manifest)
    return found


def _config_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _acl(user: str, index: int, rule: Mapping[str, Any]) -> RenderedAcl:
    where = f"KafkaUser {user}: spec.authorization.acls[{index}]"
    unknown = sorted(set(rule) - {"type", "resource", "operations", "host"})
    if unknown:
        raise StreamstackError(
            f"{where}: unknown field {unknown[0]!r} (kafka.strimzi.io/v1 has `operations`)"
        )
    resource = rule.get("resource") or {}
    resource_type = _one_of(f"{where}.resource.type", resource.get("type"), _RESOURCE_TYPES)
    pattern_type = _one_of(
        f"{where}.resource.patternType", resource.get("patternType", "literal"), _PATTERN_TYPES
    )
    name = resource.get("name")
    if resource_type == "cluster":
        name = None
    elif not name:
        raise StreamstackError(f"{where}.resource.name: required for a {resource_type} resource")
    operations = tuple(rule.get("operations") or ())
    bad = [operation for operation in operations if operation not in _OPERATIONS]
    if not operations or bad:
        raise StreamstackError(
            f"{where}.operations {list(operations)!r}: expected some of {', '.join(_OPERATIONS)}"
        )
    permission = _one_of(f"{where}.type", rule.get("type", "allow"), _PERMISSIONS)
    return RenderedAcl(resource_type, name, pattern_type, operations, permission, str(rule.get("host", "*")))


def _one_of(field: str, value: Any, choices: Mapping[str, Any]) -> str:
    """`value`, when it is one of the `choices`; else an error naming the field and the choices."""
    if value not in choices:
        names = list(choices)
        expected = " or ".join(names) if len(names) == 2 else f"one of {', '.join(names)}"
        raise StreamstackError(f"{field} {value!r}: expected {expected}")
    return str(value)


def rendered_kafka_users(objects: Iterable[Mapping[str, Any]]) -> list[RenderedKafkaUser]:
    """Every rendered `KafkaUser` (kafka.strimzi.io/v1) with its ACLs, in render order. A user that does not
    authenticate with SCRAM-SHA-512 or whose authorization is not `simple` cannot be rehearsed and fails."""
    users = []
    for manifest in _strimzi(objects, "KafkaUser"):
        metadata, spec = manifest["metadata"], manifest.get("spec") or {}
        name = str(metadata["name"])
        authentication = (spec.get("authentication") or {}).get("type")
        if authentication != "scram-sha-512":
            raise StreamstackError(
                f"KafkaUser {name}: authentication {authentication!r}; the rehearsal runs scram-sha-512 users"
            )
        authorization = spec.get("authorization") or {"type": "simple", "acls": []}
        if authorization.get("type") != "simple":
            raise StreamstackError(
                f"KafkaUser {name}: authorization {authorization.get('type')!r}, expected simple"
            )
        acls = tuple(_acl(name, index, rule) for index, rule in enumerate(authorization.get("acls") or []))
        users.append(RenderedKafkaUser(name, acls, metadata.get("namespace")))
    names = [user.name for user in users]
    if len(set(names)) != len(names):
        raise StreamstackError(f"two rendered KafkaUsers share a name: {', '.join(names)}")
    return users


def rendered_kafka_topics(objects: Iterable[Mapping[str, Any]]) -> list[RenderedKafkaTopic]:
    """Every rendered `KafkaTopic`: `spec.topicName` (else its name), partitions, replicas, config."""
    topics = []
    for manifest in _strimzi(objects, "KafkaTopic"):
        spec = manifest.get("spec") or {}
        name = str(spec.get("topicName") or manifest["metadata"]["name"])
        if "partitions" not in spec:
            raise StreamstackError(f"KafkaTopic {name}: spec.partitions is not set")
        config = {str(key): _config_value(value) for key, value in (spec.get("config") or {}).items()}
        topics.append(RenderedKafkaTopic(name, int(spec["partitions"]), int(spec.get("replicas", 1)), config))
    return topics


def users_by_secret(users: Iterable[RenderedKafkaUser]) -> dict[str, RenderedKafkaUser]:
    """Secret name -> the KafkaUser whose credentials Strimzi's User Operator writes into it."""
    return {user.secret_name: user for user in users}


def _pod_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def _containers(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Whatever carries `env`/`envFrom` in a workload: its pod's containers; for a SparkApplication, the
    driver and executor specs and their pod templates' containers."""
    spec = manifest.get("spec") or {}
    if manifest.get("kind") == "SparkApplication":
        roles = [spec.get(role) or {} for role in ("driver", "executor")]
        templates = [(role.get("template") or {}).get("spec") or {} for role in roles]
        return [*roles, *(container for pod in templates for container in _pod_containers(pod))]
    if manifest.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    pod = spec if manifest.get("kind") == "Pod" else (spec.get("template") or {}).get("spec") or {}
    return _pod_containers(pod)


def secret_references(manifest: Mapping[str, Any]) -> dict[str, set[str]]:
    """Environment variable -> the Secrets it is taken from, for a SparkApplication (`sparkConf`
    `spark.kubernetes.{driver,executor}.secretKeyRef.<VAR>: <secret>:<key>`) or a workload's containers
    (`env[].valueFrom.secretKeyRef`; `envFrom[].secretRef` as variable `*`)."""
    references: dict[str, set[str]] = {}
    if manifest.get("kind") == "SparkApplication":
        for key, value in ((manifest.get("spec") or {}).get("sparkConf") or {}).items():
            match = re.fullmatch(r"spark\.kubernetes\.(?:driver|executor)\.secretKeyRef\.(.+)", key)
            if match:
                references.setdefault(match.group(1), set()).add(str(value).split(":", 1)[0])
    for container in _containers(manifest):
        for variable in container.get("env") or []:
            reference = (variable.get("valueFrom") or {}).get("secretKeyRef")
            if reference:
                references.setdefault(variable["name"], set()).add(reference["name"])
        for source in container.get("envFrom") or []:
            if source.get("secretRef"):
                references.setdefault("*", set()).add(source["secretRef"]["name"])
    return references


def kafka_user_of(
    manifest: Mapping[str, Any], users: Iterable[RenderedKafkaUser]
) -> RenderedKafkaUser | None:
    """The KafkaUser a rendered workload logs in as (through the Secret it references), or None. A
    workload referencing two users' Secrets, or naming a SASL username other than its Secret's user,
    could not log in on a cluster and fails here."""
    by_secret = users_by_secret(users)
    secrets_used = {name for names in secret_references(manifest).values() for name in names}
    found = sorted(name for name in secrets_used if name in by_secret)
    what = f"{manifest.get('kind')} {manifest['metadata']['name']}"
    if len(found) > 1:
        raise StreamstackError(
            f"{what}: takes credentials from several KafkaUsers' Secrets ({', '.join(found)})"
        )
    if not found:
        return None
    return by_secret[found[0]]


def workload_kafka_users(objects: Iterable[Mapping[str, Any]]) -> dict[str, RenderedKafkaUser]:
    """`<Kind>/<name>` of every rendered workload that logs in to Kafka -> its KafkaUser."""
    manifests = list(objects)
    users = rendered_kafka_users(manifests)
    found = {}
    for manifest in manifests:
        if manifest.get("kind") in (
            "SparkApplication",
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "Job",
            "CronJob",
            "Pod",
        ):
            user = kafka_user_of(manifest, users)
            if user is not None:
                found[f"{manifest['kind']}/{manifest['metadata']['name']}"] = user
    return found


def _rendered_protocols(manifest: Mapping[str, Any]) -> set[str]:
    protocols = set()
    if manifest.get("kind") == "SparkApplication":
        for key, value in ((manifest.get("spec") or {}).get("sparkConf") or {}).items():
            if key.endswith(f".{PROTOCOL_VARIABLE}"):
                protocols.add(str(value))
    for container in _containers(manifest):
        for variable in container.get("env") or []:
            if variable.get("name") == PROTOCOL_VARIABLE and "value" in variable:
                protocols.add(str(variable["value"]))
    return protocols


def rendered_security_protocol(objects: Iterable[Mapping[str, Any]]) -> str:
    """The security protocol the rendered Kafka clients use: SASL_PLAINTEXT or SASL_SSL (TLS), the same for
    every workload that logs in as a KafkaUser."""
    manifests = list(objects)
    users = rendered_kafka_users(manifests)
    protocols: dict[str, set[str]] = {}
    for manifest in manifests:
        if kafka_user_of(manifest, users) is not None:
            for protocol in _rendered_protocols(manifest):
                protocols.setdefault(protocol, set()).add(
                    f"{manifest['kind']} {manifest['metadata']['name']}"
                )
    if len(protocols) != 1 or next(iter(protocols)) not in CLIENT_PROTOCOLS:
        found = "; ".join(f"{protocol} ({', '.join(sorted(where))})" for protocol, where in protocols.items())
        raise StreamstackError(
            f"the rendered Kafka clients must all use one of {', '.join(CLIENT_PROTOCOLS)}; "
            f"found {found or 'none'}"
        )
    return next(iter(protocols))


def check_rendered_kafka(objects: Iterable[Mapping[str, Any]], tls: bool) -> None:
    """The rendered `Kafka` must enforce `simple` authorization and have a SCRAM listener with the TLS
    setting the rehearsal runs: otherwise the rehearsal would rehearse another cluster."""
    for kafka in _strimzi(objects, "Kafka"):
        spec = (kafka.get("spec") or {}).get("kafka") or {}
        name = kafka["metadata"]["name"]
        if (spec.get("authorization") or {}).get("type") != "simple":
            raise StreamstackError(
                f"Kafka {name}: spec.kafka.authorization is not `simple`; nothing to rehearse"
            )
        if not any(
            (listener.get("authentication") or {}).get("type") == "scram-sha-512"
            and bool(listener.get("tls")) == tls
            for listener in spec.get("listeners") or []
        ):
            raise StreamstackError(f"Kafka {name}: no scram-sha-512 listener with tls: {str(tls).lower()}")
