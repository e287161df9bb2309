"""`streamstack:cdc`: change data capture in the cluster (issue 18): a Strimzi KafkaConnect running Debezium's
PostgreSQL connector (what it captures comes from pipeline.yaml's `sources.cdc`, contracts/cdc.py) and the
database it reads, either an in-cluster PostgreSQL (a StatefulSet, the dev stack) or an external one.

    streamstack:cdc:
      enabled: true
      connect: {image: streamstack/connect:0.1.0-kafka4.3.1-debezium3.6.1, replicas: 1, heap: 192m,
                resources: {...}}
      database:
        user: streamstack_cdc
        inCluster: {namespace: postgres, image: postgres:15.20-bookworm, storageSize: 2Gi, ...}
        # or
        external: {host: db.example.com, port: 5432, database: streamstack, cidrs: [10.0.32.0/24],
                   walDiskSize: 500Gi}

The password is never here: it is the stack secret `streamstack:cdcDatabasePassword`
(infra/config/secrets.py).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from contracts.pipeline import DNS_LABEL_PATTERN
from infra.config.base import (
    PULL_POLICIES,
    ConfigError,
    Resources,
    Section,
    _require_quantity,
    _resources,
    require_choice,
    require_match,
    require_minimum,
    setting,
)
from infra.config.spark import image_tag

_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$"
)
_PG_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A JVM heap size as Strimzi's jvmOptions take it (-Xms/-Xmx, the CRD's pattern): bytes, or m/g binary units.
_JVM_SIZE = re.compile(r"^([0-9]+)([mMgG]?)$")
_JVM_UNITS = {"": 1, "m": 2**20, "g": 2**30}
_MEMORY_UNITS = {
    "m": 0.001,
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
MIB = 2**20
# What the Connect JVM holds beside its heap, measured (README.md, "On a laptop with Docker and kind"): the
# local worker (streamstack/local/connect.py with the Strimzi image's G1 flags, C2 on) streaming Debezium at
# 100 changes/s with a 192m heap touched in full (-XX:+AlwaysPreTouch) had an RSS of 382 MiB, 190 MiB
# beyond the heap (Native Memory Tracking: metaspace and class space 57, G1's own 45, code cache 24, symbols
# 12, CDS 12, threads 5; malloc's own 28 more). 224 MiB adds room for the Prometheus JMX exporter agent
# Strimzi runs in the pod. The memory limit must hold heap + this, or the pod is OOM-killed.
CONNECT_NON_HEAP = 224 * MIB

CONNECT_RESOURCES = Resources(
    setting("cdc.connect.resources"), {"cpu": "250m", "memory": "1Gi"}, {"memory": "1Gi"}
)
POSTGRES_RESOURCES = Resources(
    setting("cdc.database.inCluster.resources"),
    {"cpu": "100m", "memory": "256Mi"},
    {"cpu": "1", "memory": "512Mi"},
)


def memory_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (`512Mi`, `1Gi`, `500M`) in bytes."""
    match = _MEMORY.match(quantity)
    if match is None:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2) or ""])


def jvm_size_bytes(size: str) -> int:
    """A JVM size (`256m`, `1g`, `268435456`) in bytes."""
    match = _JVM_SIZE.match(size)
    if match is None:
        raise ValueError(f"not a JVM size: {size!r}")
    return int(match.group(1)) * _JVM_UNITS[match.group(2).lower()]


def require_pinned_image(name: str, image: str) -> None:
    """`repository:tag` or `repository:tag@sha256:<digest>`, never `latest` or a bare name."""
    tag = image_tag(image)
    if tag is None or tag == "latest":
        raise ConfigError(f"{name}: {image!r} needs a pinned tag (repository:tag[@sha256:...])")
    _, _, digest = image.partition("@")
    if digest and not _DIGEST.match(digest):
        raise ConfigError(f"{name}: {image!r} has a digest that is not sha256:<64 hex digits>")


@dataclass(frozen=True)
class ConnectConfig:
    """The Strimzi KafkaConnect: our Connect image (Strimzi's Kafka image + the Debezium plugin,
    infra/connect/Dockerfile), its replicas, JVM heap and resources.

    `heap` (a JVM size such as 192m) becomes the pods' -Xms and -Xmx. Unset, Strimzi gives the heap 75% of
    the memory limit, which leaves a small limit too little for what the JVM holds beside its heap; set, the
    memory limit must hold the heap plus CONNECT_NON_HEAP, or the pod is OOM-killed (the request, what the
    scheduler reserves, may be what Connect uses in steady state)."""

    image: str
    replicas: int = 1
    image_pull_policy: str = "IfNotPresent"
    heap: str | None = None
    resources: Resources = CONNECT_RESOURCES

    def __post_init__(self) -> None:
        require_pinned_image(setting("cdc.connect.image"), self.image)
        require_minimum(setting("cdc.connect.replicas"), self.replicas, 1)
        require_choice(setting("cdc.connect.imagePullPolicy"), self.image_pull_policy, PULL_POLICIES)
        if self.heap is None:
            return
        if not _JVM_SIZE.match(self.heap):
            raise ConfigError(
                f"{setting('cdc.connect.heap')}: {self.heap!r} is not a JVM size such as 256m or 1g"
            )
        needed = jvm_size_bytes(self.heap) + CONNECT_NON_HEAP
        limit = self.resources.limits.get("memory")
        if limit is None:
            raise ConfigError(
                f"{self.resources.setting}.limits.memory: required with {setting('cdc.connect.heap')}: at "
                f"least the heap plus {CONNECT_NON_HEAP // MIB} MiB ({-(-needed // MIB)}Mi)"
            )
        if memory_bytes(limit) < needed:
            raise ConfigError(
                f"{self.resources.setting}.limits.memory: {limit} is less than the heap ({self.heap}) plus "
                f"the {CONNECT_NON_HEAP // MIB} MiB Kafka Connect holds beside it: at least "
                f"{-(-needed // MIB)}Mi"
            )


@dataclass(frozen=True)
class InClusterDatabase:
    """A PostgreSQL StatefulSet of this stack (dev): one pod, a PersistentVolumeClaim, `wal_level=logical`, a
    Service only Kafka Connect may reach. `max_slot_wal_keep_size` caps the WAL a stalled replication slot
    may retain, so a stopped connector invalidates its slot instead of filling the disk."""

    image: str
    namespace: str = "postgres"
    storage_size: str = "2Gi"
    storage_class: str | None = None
    max_slot_wal_keep_size_mb: int = 1024
    run_as_user: int = 999  # the official image's `postgres` user
    resources: Resources = POSTGRES_RESOURCES

    def __post_init__(self) -> None:
        base = "cdc.database.inCluster"
        require_pinned_image(setting(f"{base}.image"), self.image)
        require_match(setting(f"{base}.namespace"), self.namespace, DNS_LABEL_PATTERN)
        _require_quantity(setting(f"{base}.storageSize"), self.storage_size)
        require_minimum(setting(f"{base}.maxSlotWalKeepSizeMb"), self.max_slot_wal_keep_size_mb, 64)
        require_minimum(setting(f"{base}.runAsUser"), self.run_as_user, 1)


@dataclass(frozen=True)
class ExternalDatabase:
    """A PostgreSQL outside the cluster (`wal_level=logical`, a user with REPLICATION and the tables'
    SELECT): where Connect connects, the address blocks its NetworkPolicy may reach on `port`, and the size
    of the volume that holds its `pg_wal` (what the retained-WAL alert predicts a full disk against)."""

    host: str
    cidrs: tuple[str, ...]
    wal_disk_size: str
    port: int = 5432
    database: str | None = None  # None: pipeline.yaml's sources.cdc.database

    def __post_init__(self) -> None:
        base = "cdc.database.external"
        require_match(setting(f"{base}.host"), self.host, _HOSTNAME)
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"{setting(f'{base}.port')}: {self.port} is not a TCP port")
        _require_quantity(setting(f"{base}.walDiskSize"), self.wal_disk_size)
        if self.database is not None:
            require_match(setting(f"{base}.database"), self.database, _PG_IDENTIFIER)
        if not self.cidrs:
            raise ConfigError(
                f"{setting(f'{base}.cidrs')}: required: the database's address blocks, the only ones Kafka "
                "Connect's NetworkPolicy lets it reach (e.g. [10.0.32.0/24])"
            )
        for index, cidr in enumerate(self.cidrs):
            name = f"{setting(f'{base}.cidrs')}[{index}]"
            try:
                if "/" not in cidr:
                    raise ValueError("no prefix length, e.g. /32 for one address")
                network = ipaddress.ip_network(cidr, strict=True)
            except ValueError as error:
                raise ConfigError(f"{name}: {cidr!r} is not a CIDR ({error})") from None
            if network.prefixlen == 0:
                raise ConfigError(f"{name}: {cidr} is every address; list the database's own")


@dataclass(frozen=True)
class DatabaseConfig:
    """Exactly one of `in_cluster` and `external`; `user` is the login Debezium uses."""

    user: str = "streamstack_cdc"
    in_cluster: InClusterDatabase | None = None
    external: ExternalDatabase | None = None

    def __post_init__(self) -> None:
        require_match(setting("cdc.database.user"), self.user, _PG_IDENTIFIER)
        if (self.in_cluster is None) == (self.external is None):
            raise ConfigError(
                f"{setting('cdc.database')}: set exactly one of inCluster (a PostgreSQL of this stack) and "
                "external (host, port, cidrs, walDiskSize)"
            )

    @property
    def wal_disk_size(self) -> str:
        """The size of the volume that holds pg_wal: the in-cluster database's claim, or what the external
        database's settings state."""
        if self.in_cluster is not None:
            return self.in_cluster.storage_size
        assert self.external is not None  # exactly one of the two, checked above
        return self.external.wal_disk_size


# What a disabled section holds (never deployed): the default image, so the object is well-formed.
_NO_DATABASE = InClusterDatabase(image="postgres:15.20-bookworm")


@dataclass(frozen=True)
class CdcConfig:
    enabled: bool = False
    connect: ConnectConfig | None = None
    database: DatabaseConfig = field(default_factory=lambda: DatabaseConfig(in_cluster=_NO_DATABASE))

    def __post_init__(self) -> None:
        if self.enabled and self.connect is None:
            raise ConfigError(f"{setting('cdc.connect.image')}: required while CDC is enabled")


def _cdc(section: Section) -> CdcConfig:
    section.only("enabled", "connect", "database")
    enabled = section.boolean("enabled", CdcConfig.enabled)
    if not enabled:
        return CdcConfig()
    connect = section.section("connect")
    connect.only("image", "replicas", "imagePullPolicy", "heap", "resources")
    database = section.section("database")
    database.only("user", "inCluster", "external")
    in_cluster = external = None
    if database.has("inCluster"):
        raw = database.section("inCluster")
        raw.only(
            "namespace",
            "image",
            "storageSize",
            "storageClass",
            "maxSlotWalKeepSizeMb",
            "runAsUser",
            "resources",
        )
        default = InClusterDatabase
        in_cluster = InClusterDatabase(
            image=raw.string("image"),
            namespace=raw.string("namespace", default.namespace),
            storage_size=raw.string("storageSize", default.storage_size),
            storage_class=raw.string("storageClass", None),
            max_slot_wal_keep_size_mb=raw.integer("maxSlotWalKeepSizeMb", default.max_slot_wal_keep_size_mb),
            run_as_user=raw.integer("runAsUser", default.run_as_user),
            resources=_resources(raw.section("resources"), POSTGRES_RESOURCES),
        )
    if database.has("external"):
        raw = database.section("external")
        raw.only("host", "port", "database", "cidrs", "walDiskSize")
        external = ExternalDatabase(
            host=raw.string("host"),
            wal_disk_size=raw.string("walDiskSize"),
            port=raw.integer("port", ExternalDatabase.port),
            database=raw.string("database", None),
            cidrs=raw.strings("cidrs", ()),
        )
    return CdcConfig(
        enabled=True,
        connect=ConnectConfig(
            image=connect.string("image"),
            replicas=connect.integer("replicas", ConnectConfig.replicas),
            image_pull_policy=connect.string("imagePullPolicy", ConnectConfig.image_pull_policy),
            heap=connect.string("heap", None),
            resources=_resources(connect.section("resources"), CONNECT_RESOURCES),
        ),
        database=DatabaseConfig(
            user=database.string("user", DatabaseConfig.user), in_cluster=in_cluster, external=external
        ),
    )
