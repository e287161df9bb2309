"""The typed stack configuration: `load()` reads `Pulumi.<stack>.yaml` (`streamstack:` keys) and checks it.

Every setting is a structured value under one key (`streamstack:kafka`, `streamstack:spark`, ...) read with
`pulumi.Config("streamstack").get_object`. A misspelt key, a wrong type or a combination that cannot work
raises `ConfigError` whose message starts with the setting to change, e.g. `streamstack:kafka.version`, so
`pulumi preview` fails before anything is created. Importing this module creates no resources. The
secrets, `streamstack:grafanaAdminPassword` and the alert notifiers' URLs and keys (NOTIFIER_SECRETS), are not
part of `load()`: `grafana_admin_password()` and `alerting_secrets()` read them as Pulumi secrets.

Guard rails (see infra/README.md): a Kafka version the pinned Strimzi does not run; a Spark version that does
not match the image tag or the spark-operator; a stateful job on a checkpoint volume only the driver can
reach; a topic replicated more often than there are brokers; a min ISR above the replication factor.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pulumi

from contracts.pipeline import FLAG_PATTERN, PACKAGE_PATTERN, TOPIC_NAME_PATTERN, load_pipeline

REPO_ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = REPO_ROOT / "monitoring" / "rules"
DASHBOARDS_DIR = REPO_ROOT / "monitoring" / "dashboards" / "generated"
# Our own charts, installed by the StreamingJob and LagExporter components: one source of truth.
STREAMING_JOB_CHART = REPO_ROOT / "charts" / "streaming-job"
LAG_EXPORTER_CHART = REPO_ROOT / "charts" / "lag-exporter"
PREFIX = "streamstack"

# Kafka versions each Strimzi release runs, with their KRaft metadata version (Strimzi's kafka-versions.yaml).
STRIMZI_KAFKA_VERSIONS: Mapping[str, Mapping[str, str]] = {
    "1.2.0": {"4.2.0": "4.2-IV1", "4.2.1": "4.2-IV1", "4.3.0": "4.3-IV0", "4.3.1": "4.3-IV0"},
}
STRIMZI_MIN_KUBERNETES: Mapping[str, tuple[int, int]] = {"1.2.0": (1, 30)}
# Spark major versions each spark-operator release submits (2.3+ is built on Spark 4; 2.5.2 on 4.0.4).
SPARK_OPERATOR_SPARK_MAJORS: Mapping[str, tuple[int, ...]] = {"2.5.2": (4,)}
KUBE_PROMETHEUS_STACK_VERSIONS = ("88.5.3",)
# Each pinned chart version's complete CRD set, vendored (scripts/vendor_crds.py): the stack installs the CRDs
# itself (infra/components/crds.py), since Helm never upgrades a chart's crds/.
CRDS_DIR = REPO_ROOT / "infra" / "crds"
CRDS_SOURCE_FILE = "source.json"

ACCESS_MODES = ("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany")
DRIVER_ONLY_ACCESS_MODES = ("ReadWriteOnce", "ReadWriteOncePod")
NODE_ROLES = ("controller", "broker")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SPARK_MEMORY = re.compile(r"^[0-9]+[kmgt]?$")
_SPARK_DURATION = re.compile(r"^[0-9]+ (millisecond|second|minute|hour|day)s?$")
_VERSION = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)$")
_METADATA_VERSION = re.compile(r"^([0-9]+)\.([0-9]+)(-IV[0-9]+)?$")


class ConfigError(ValueError):
    """A stack setting is missing, malformed or cannot work with the others; the message names it."""


def setting(path: str) -> str:
    """`kafka.version` -> `streamstack:kafka.version`."""
    return f"{PREFIX}:{path}"


T = TypeVar("T")
_MISSING: Any = object()


class Section:
    """One mapping of the stack config that knows its setting path, so every error can name the setting."""

    def __init__(self, path: str, raw: object) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{setting(path)}: expected a mapping, got {raw!r}")
        self.path = path
        self.raw: Mapping[str, Any] = raw

    def name(self, key: str) -> str:
        return setting(f"{self.path}.{key}")

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def only(self, *keys: str) -> None:
        """Reject keys this section does not know: a misspelt setting must not be ignored silently."""
        unknown = sorted(set(self.raw) - set(keys))
        if unknown:
            raise ConfigError(f"{self.name(unknown[0])}: unknown setting (known: {', '.join(sorted(keys))})")

    def _get(self, key: str, default: Any, check: Callable[[Any], bool], expected: str) -> Any:
        if not self.has(key):
            if default is _MISSING:
                raise ConfigError(f"{self.name(key)}: required")
            return default
        value = self.raw[key]
        if not check(value):
            raise ConfigError(f"{self.name(key)}: expected {expected}, got {value!r}")
        return value

    def string(self, key: str, default: Any = _MISSING, pattern: re.Pattern[str] | None = None) -> Any:
        value = self._get(key, default, lambda v: isinstance(v, str) and v.strip() != "", "a string")
        if value is not None and pattern is not None and not pattern.match(value):
            raise ConfigError(f"{self.name(key)}: {value!r} does not match {pattern.pattern}")
        return value

    def choice(self, key: str, choices: Sequence[str], default: Any = _MISSING) -> Any:
        value = self.string(key, default)
        if value is not None and value not in choices:
            raise ConfigError(f"{self.name(key)}: {value!r} is not one of {', '.join(choices)}")
        return value

    def integer(self, key: str, default: Any = _MISSING, minimum: int | None = None) -> Any:
        def is_int(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        value = self._get(key, default, is_int, "an integer")
        if value is not None and minimum is not None and value < minimum:
            raise ConfigError(f"{self.name(key)}: {value} is below the minimum {minimum}")
        return value

    def number(self, key: str, default: Any = _MISSING) -> Any:
        def is_number(value: object) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool) and value > 0

        return self._get(key, default, is_number, "a positive number")

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        return self._get(key, default, lambda v: isinstance(v, bool), "true or false")

    def strings(self, key: str, default: Any = _MISSING) -> Any:
        def is_strings(value: object) -> bool:
            return isinstance(value, list) and all(isinstance(item, str) for item in value)

        value = self._get(key, default, is_strings, "a list of strings")
        return tuple(value) if value is not None else None

    def string_map(self, key: str) -> dict[str, str]:
        raw = self._get(key, {}, lambda v: isinstance(v, Mapping), "a mapping")
        result = {}
        for name, value in raw.items():
            if not isinstance(value, str | int) or isinstance(value, bool):
                raise ConfigError(f"{self.name(key)}.{name}: expected a string or a number, got {value!r}")
            result[str(name)] = str(value)
        return result

    def section(self, key: str) -> Section:
        return Section(f"{self.path}.{key}", self.raw.get(key))

    def sections(self, key: str) -> list[Section]:
        raw = self._get(key, [], lambda v: isinstance(v, list), "a list")
        return [Section(f"{self.path}.{key}[{index}]", item) for index, item in enumerate(raw)]


class Layered:
    """A job's settings: the job's own entry first, then `streamstack:jobDefaults`, then the code's default.
    Errors name the entry that supplied the value (or `jobDefaults`, where a default would be changed)."""

    def __init__(self, entry: Section, defaults: Section) -> None:
        self.entry = entry
        self.defaults = defaults

    def source(self, key: str) -> Section:
        return self.entry if self.entry.has(key) else self.defaults

    def child(self, key: str) -> Layered:
        return Layered(self.entry.section(key), self.defaults.section(key))

    def only(self, *keys: str) -> None:
        self.entry.only(*keys)
        self.defaults.only(*keys)


def _require_quantity(name: str, value: str) -> str:
    if not _QUANTITY.match(value):
        raise ConfigError(f"{name}: {value!r} is not a Kubernetes quantity such as 500m, 1, 512Mi or 2Gi")
    return value


def _version(name: str, value: str) -> tuple[int, int, int]:
    match = _VERSION.match(value)
    if not match:
        raise ConfigError(f"{name}: {value!r} is not a version such as 4.3.1")
    return int(match[1]), int(match[2]), int(match[3])


def _known(name: str, value: str, known: Iterable[str], what: str) -> None:
    if value not in known:
        raise ConfigError(
            f"{name}: {what} {value} is not one this program was written and tested for "
            f"(known: {', '.join(known)}); its compatibility tables in infra/config.py need it first"
        )


def require_vendored_crds(name: str, chart: str, version: str) -> None:
    """The chart version's CRDs must be in infra/crds/: a version bump without them fails here."""
    if not (CRDS_DIR / f"{chart}-{version}" / CRDS_SOURCE_FILE).is_file():
        raise ConfigError(
            f"{name}: no CRDs of {chart} {version} in infra/crds/{chart}-{version}/ (Helm does not upgrade "
            "CRDs, so the stack installs them from there): add the version's source to "
            "scripts/vendor_crds.py and run it"
        )


@dataclass(frozen=True)
class Resources:
    """Kubernetes container requests and limits (`{requests: {cpu, memory}, limits: {...}}`)."""

    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, str]]:
        result: dict[str, dict[str, str]] = {}
        if self.requests:
            result["requests"] = dict(self.requests)
        if self.limits:
            result["limits"] = dict(self.limits)
        return result


def _resources(section: Section, default: Resources) -> Resources:
    if not section.raw:
        return default
    section.only("requests", "limits")
    parts: dict[str, dict[str, str]] = {}
    for part in ("requests", "limits"):
        values = section.string_map(part)
        for resource, quantity in values.items():
            if resource not in ("cpu", "memory", "ephemeral-storage"):
                raise ConfigError(
                    f"{section.name(part)}.{resource}: expected cpu, memory or ephemeral-storage"
                )
            _require_quantity(f"{section.name(part)}.{resource}", quantity)
        parts[part] = values
    return Resources(parts["requests"], parts["limits"])


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


@dataclass(frozen=True)
class KafkaConfig:
    namespace: str = "kafka"
    cluster_name: str = "streamstack"
    operator_chart_version: str = "1.2.0"
    version: str = "4.3.1"
    metadata_version: str = "4.3-IV0"
    replication_factor: int = 1
    min_insync_replicas: int = 1
    node_pools: tuple[NodePool, ...] = (NodePool("dual-role", ("controller", "broker"), 1, "10Gi"),)
    listener_port: int = 9092
    # The pipeline's clients use the TLS listener (SASL_SSL, trusting Strimzi's cluster CA); False: the plain
    # SCRAM listener (SASL_PLAINTEXT), for a cluster network you trust (dev on kind).
    client_tls: bool = True

    def __post_init__(self) -> None:
        _known(
            setting("kafka.operatorChartVersion"),
            self.operator_chart_version,
            STRIMZI_KAFKA_VERSIONS,
            "Strimzi",
        )
        require_vendored_crds(
            setting("kafka.operatorChartVersion"), "strimzi-kafka-operator", self.operator_chart_version
        )
        versions = STRIMZI_KAFKA_VERSIONS[self.operator_chart_version]
        if self.version not in versions:
            raise ConfigError(
                f"{setting('kafka.version')}: Kafka {self.version} is not supported by Strimzi "
                f"{self.operator_chart_version} (supported: {', '.join(versions)})"
            )
        match = _METADATA_VERSION.match(self.metadata_version)
        kafka_minor = _version(setting("kafka.version"), self.version)[:2]
        if not match or (int(match[1]), int(match[2])) > kafka_minor:
            raise ConfigError(
                f"{setting('kafka.metadataVersion')}: {self.metadata_version!r} is not a KRaft metadata "
                f"version Kafka {self.version} can run (its own is {versions[self.version]})"
            )
        if not any("controller" in pool.roles for pool in self.node_pools):
            raise ConfigError(
                f"{setting('kafka.nodePools')}: no pool has the controller role (KRaft needs one)"
            )
        if self.brokers == 0:
            raise ConfigError(f"{setting('kafka.nodePools')}: no pool has the broker role")
        if self.replication_factor > self.brokers:
            raise ConfigError(
                f"{setting('kafka.replicationFactor')}: {self.replication_factor} is above the broker count "
                f"{self.brokers} (sum of the replicas of the broker pools in {setting('kafka.nodePools')})"
            )
        if self.min_insync_replicas > self.replication_factor:
            raise ConfigError(
                f"{setting('kafka.minInsyncReplicas')}: {self.min_insync_replicas} is above "
                f"{setting('kafka.replicationFactor')} {self.replication_factor}: no write could ever succeed"
            )

    @property
    def brokers(self) -> int:
        return sum(pool.replicas for pool in self.node_pools if "broker" in pool.roles)

    @property
    def controllers(self) -> int:
        return sum(pool.replicas for pool in self.node_pools if "controller" in pool.roles)

    @property
    def tls_listener_port(self) -> int:
        """The SCRAM-SHA-512 listener over TLS (the KafkaCluster component's `tls` listener)."""
        return self.listener_port + 1

    @property
    def client_port(self) -> int:
        """The listener the pipeline's clients use: TLS with `clientTls`, else the plain SCRAM one."""
        return self.tls_listener_port if self.client_tls else self.listener_port

    @property
    def client_security_protocol(self) -> str:
        return "SASL_SSL" if self.client_tls else "SASL_PLAINTEXT"

    @property
    def cluster_ca_secret(self) -> str:
        """Strimzi's Secret with the cluster CA's certificate (`ca.crt`) in the Kafka namespace; the program
        copies it under the same name into the clients' namespace (infra/components/kafka_ca.py)."""
        return f"{self.cluster_name}-cluster-ca-cert"

    @property
    def bootstrap_servers(self) -> str:
        """The clients' authenticated (SCRAM-SHA-512) listener behind Strimzi's bootstrap Service."""
        return f"{self.cluster_name}-kafka-bootstrap.{self.namespace}.svc:{self.client_port}"


@dataclass(frozen=True)
class TopicConfig:
    """A KafkaTopic; `replicas_setting`/`min_isr_setting` name where its replicas and min ISR were set."""

    name: str
    partitions: int
    replicas: int
    config: Mapping[str, str]
    replicas_setting: str = setting("kafka.replicationFactor")
    min_isr_setting: str = setting("kafka.minInsyncReplicas")

    @property
    def min_insync_replicas(self) -> int:
        return int(self.config.get("min.insync.replicas", "1"))


def require_topic_fits(topic: TopicConfig, brokers: int) -> None:
    """A topic cannot have more replicas than brokers, nor a min ISR above its replicas."""
    if topic.replicas > brokers:
        raise ConfigError(
            f"{topic.replicas_setting}: topic {topic.name} would have {topic.replicas} replicas but the "
            f"cluster has {brokers} broker(s) ({setting('kafka.nodePools')})"
        )
    if topic.min_insync_replicas > topic.replicas:
        raise ConfigError(
            f"{topic.min_isr_setting}: topic {topic.name} has min.insync.replicas "
            f"{topic.min_insync_replicas} above its {topic.replicas} replicas: no write could ever succeed"
        )


@dataclass(frozen=True)
class SparkConfig:
    image: str
    version: str = "4.3.0"
    operator_chart_version: str = "2.5.2"
    operator_namespace: str = "spark-operator"
    jobs_namespace: str = "streaming"
    image_pull_policy: str = "IfNotPresent"
    application_root: str = "/opt/streamstack/app"
    service_account: str = "spark"
    shadow_group_prefix: str = "streamstack-"

    def __post_init__(self) -> None:
        major = _version(setting("spark.version"), self.version)[0]
        _known(
            setting("spark.operatorChartVersion"),
            self.operator_chart_version,
            SPARK_OPERATOR_SPARK_MAJORS,
            "spark-operator",
        )
        require_vendored_crds(
            setting("spark.operatorChartVersion"), "spark-operator", self.operator_chart_version
        )
        majors = SPARK_OPERATOR_SPARK_MAJORS[self.operator_chart_version]
        if major not in majors:
            raise ConfigError(
                f"{setting('spark.version')}: Spark {self.version} cannot be submitted by spark-operator "
                f"{self.operator_chart_version}, which runs Spark {' or '.join(f'{m}.x' for m in majors)}"
            )
        tag = image_tag(self.image)
        if tag is None or tag == "latest":
            raise ConfigError(
                f"{setting('spark.image')}: {self.image!r} needs a pinned tag naming its Spark version"
            )
        if not re.search(rf"(?<![0-9.]){re.escape(self.version)}(?![0-9.])", tag):
            raise ConfigError(
                f"{setting('spark.image')}: tag {tag!r} does not name Spark {self.version} "
                f"({setting('spark.version')}); build the jobs image for that Spark or change the version"
            )


@dataclass(frozen=True)
class ImageReference:
    """`registry/name:tag@sha256:...` split the way our charts take it (`image.repository/tag/digest`)."""

    repository: str
    tag: str
    digest: str = ""

    def chart_values(self, pull_policy: str) -> dict[str, str]:
        return {
            "repository": self.repository,
            "tag": self.tag,
            "digest": self.digest,
            "pullPolicy": pull_policy,
        }


def image_reference(name: str, image: str) -> ImageReference:
    """The parts of a pinned image; `name` is the setting it came from, for the error."""
    reference, _, digest = image.partition("@")
    repository, _, tag = reference.rpartition(":")
    if not repository or not tag or "/" in tag:
        raise ConfigError(f"{name}: {image!r} needs a pinned tag (repository:tag)")
    return ImageReference(repository, tag, digest)


def image_tag(image: str) -> str | None:
    """`repo/name:tag@sha256:...` -> `tag`; None without a tag."""
    reference = image.split("@", 1)[0]
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        return None
    return tag


@dataclass(frozen=True)
class CheckpointConfig:
    """The job's checkpoint PersistentVolumeClaim; `setting` names where its access mode was chosen."""

    access_mode: str = "ReadWriteOnce"
    storage_class: str | None = None
    size: str = "1Gi"
    protect: bool = False
    setting: str = setting("jobDefaults.checkpoint.accessMode")


@dataclass(frozen=True)
class DriverResources:
    cores: int = 1
    core_request: str = "250m"
    core_limit: str | None = None
    memory: str = "1g"


@dataclass(frozen=True)
class ExecutorResources:
    instances: int = 1
    cores: int = 1
    core_request: str = "250m"
    core_limit: str | None = None
    memory: str = "1g"


@dataclass(frozen=True)
class JobConfig:
    """A streaming job: the catalogue's definition with the stack's overrides and resources."""

    name: str
    module: str
    stateful: bool
    topics: tuple[tuple[str, str], ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    settings: tuple[str, ...] = ()
    driver: DriverResources = field(default_factory=DriverResources)
    executor: ExecutorResources = field(default_factory=ExecutorResources)
    trigger_interval: str = "5 seconds"
    max_offsets_per_trigger: int | None = None
    shuffle_partitions: int = 4
    metrics_port: int = 9400
    dead_letter_topic: str = field(default_factory=lambda: load_pipeline().dead_letter_topic)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    stateful_setting: str = ""
    entry: str = "jobs"

    @property
    def read_topics(self) -> tuple[str, ...]:
        by_flag = dict(self.topics)
        return tuple(dict.fromkeys(by_flag[flag] for flag in self.reads))

    @property
    def written_topics(self) -> tuple[str, ...]:
        by_flag = dict(self.topics)
        return tuple(dict.fromkeys([*(by_flag[flag] for flag in self.writes), self.dead_letter_topic]))

    @property
    def checkpoint_claim(self) -> str:
        return f"{self.name}-checkpoints"


def require_checkpoint_reach(job: JobConfig, nodes: int) -> None:
    """A stateful job's executors write state into the checkpoint: its volume must reach all of them."""
    if not job.stateful:
        return
    mode = job.checkpoint.access_mode
    why = (
        f"job {job.name} is stateful ({job.stateful_setting or 'the catalogue says so'}): its executors "
        "write state-store files into the checkpoint"
    )
    if mode == "ReadWriteOncePod":
        raise ConfigError(
            f"{job.checkpoint.setting}: {why}, but a ReadWriteOncePod volume admits only the driver's pod; "
            "use ReadWriteMany"
        )
    if mode == "ReadWriteOnce" and nodes > 1:
        raise ConfigError(
            f"{job.checkpoint.setting}: {why}, but a ReadWriteOnce volume reaches pods on one node only and "
            f"the cluster has {nodes} nodes ({setting('cluster.nodes')}); use ReadWriteMany"
        )


EXPORTER_RESOURCES = Resources({"cpu": "50m", "memory": "128Mi"}, {"cpu": "500m", "memory": "256Mi"})


@dataclass(frozen=True)
class LagExporterConfig:
    image: str | None = None
    enabled: bool = True
    image_pull_policy: str = "IfNotPresent"
    port: int = 9308
    refresh_interval: float = 10.0
    window: float = 300.0
    read_checkpoints: bool = False
    log_level: str = "INFO"
    run_as_user: int = 10001
    resources: Resources = EXPORTER_RESOURCES

    def __post_init__(self) -> None:
        if self.window < 2 * self.refresh_interval:
            raise ConfigError(
                f"{setting('lagExporter.window')}: {self.window} must be at least twice "
                f"{setting('lagExporter.refreshInterval')} ({self.refresh_interval})"
            )
        if not self.enabled:
            return
        if self.image is None:
            raise ConfigError(f"{setting('lagExporter.image')}: required while the exporter is enabled")
        tag = image_tag(self.image)
        if tag is None or tag == "latest":
            raise ConfigError(f"{setting('lagExporter.image')}: {self.image!r} needs a pinned tag")


def require_exporter_reach(exporter: LagExporterConfig, jobs: Sequence[JobConfig], nodes: int) -> None:
    """Reading checkpoints mounts every job's claim into the exporter's pod as well."""
    if not (exporter.enabled and exporter.read_checkpoints):
        return
    for job in jobs:
        mode = job.checkpoint.access_mode
        if mode == "ReadWriteOncePod" or (mode == "ReadWriteOnce" and nodes > 1):
            raise ConfigError(
                f"{setting('lagExporter.readCheckpoints')}: the exporter would mount the checkpoint of job "
                f"{job.name}, whose {mode} volume ({job.checkpoint.setting}) cannot be shared with its "
                f"driver on a {nodes}-node cluster; use ReadWriteMany or rely on the shadow groups"
            )


@dataclass(frozen=True)
class LoadGeneratorConfig:
    """A KafkaUser for synthetic producers (jobs/producers), allowed only to write the pipeline's input
    topics, and a NetworkPolicy that lets pods labelled as load generators reach the brokers."""

    enabled: bool = True


@dataclass(frozen=True)
class MonitoringConfig:
    namespace: str = "monitoring"
    chart_version: str = "88.5.3"
    release_name: str = "kube-prometheus-stack"
    prometheus_retention: str = "2d"
    prometheus_storage_size: str | None = None
    prometheus_storage_class: str | None = None
    prometheus_resources: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        _known(
            setting("monitoring.chartVersion"), self.chart_version, KUBE_PROMETHEUS_STACK_VERSIONS, "chart"
        )
        require_vendored_crds(setting("monitoring.chartVersion"), "kube-prometheus-stack", self.chart_version)

    @property
    def grafana_service(self) -> str:
        return f"{self.release_name}-grafana"


# Alertmanager's notifiers, each with the stack secret that holds its URL or key (never plain config).
NOTIFIER_SECRETS: Mapping[str, str] = {
    "webhook": "alertWebhookUrl",
    "slack": "alertSlackApiUrl",
    "pagerduty": "alertPagerdutyRoutingKey",
}
# Of those secrets, the ones that are URLs (checked for a scheme; the PagerDuty routing key is not one).
URL_NOTIFIERS = ("webhook", "slack")
ALERT_SEVERITIES = ("critical", "warning")
_AM_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


@dataclass(frozen=True)
class AlertingConfig:
    """Where Alertmanager sends our alerts (`streamstack:alerting`): the notifiers each severity reaches, the
    Slack channel and the notification timing. The notifiers' URLs and keys are stack secrets
    (NOTIFIER_SECRETS, read by `alerting_secrets`); `notifier_cidrs`/`notifier_ports` are where Alertmanager
    may connect to deliver them (its NetworkPolicy egress)."""

    critical: tuple[str, ...] = ()
    warning: tuple[str, ...] = ()
    slack_channel: str | None = None
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"
    notifier_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    notifier_ports: tuple[int, ...] = (443,)

    def __post_init__(self) -> None:
        for severity in ALERT_SEVERITIES:
            chosen = getattr(self, severity)
            for notifier in chosen:
                if notifier not in NOTIFIER_SECRETS:
                    raise ConfigError(
                        f"{setting(f'alerting.{severity}')}: {notifier!r} is not a notifier "
                        f"(known: {', '.join(NOTIFIER_SECRETS)})"
                    )
            if len(set(chosen)) != len(chosen):
                raise ConfigError(f"{setting(f'alerting.{severity}')}: a notifier is named twice")
        for key, value in (
            ("groupWait", self.group_wait),
            ("groupInterval", self.group_interval),
            ("repeatInterval", self.repeat_interval),
        ):
            if not _AM_DURATION.match(value):
                raise ConfigError(
                    f"{setting(f'alerting.{key}')}: {value!r} is not a duration such as 30s or 4h"
                )
        for cidr in self.notifier_cidrs:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                raise ConfigError(f"{setting('alerting.notifierCidrs')}: {cidr!r} is not a CIDR") from None
        for port in self.notifier_ports:
            if not 0 < port < 65536:
                raise ConfigError(f"{setting('alerting.notifierPorts')}: {port} is not a TCP port")

    @property
    def notifiers(self) -> tuple[str, ...]:
        """Every notifier some severity reaches, in NOTIFIER_SECRETS order."""
        return tuple(name for name in NOTIFIER_SECRETS if name in (*self.critical, *self.warning))


@dataclass(frozen=True)
class StackConfig:
    cluster: ClusterConfig
    kafka: KafkaConfig
    topics: tuple[TopicConfig, ...]
    spark: SparkConfig
    jobs: tuple[JobConfig, ...]
    lag_exporter: LagExporterConfig
    monitoring: MonitoringConfig
    load_generator: LoadGeneratorConfig = field(default_factory=LoadGeneratorConfig)
    alerting: AlertingConfig = field(default_factory=AlertingConfig)

    def __post_init__(self) -> None:
        minimum = STRIMZI_MIN_KUBERNETES[self.kafka.operator_chart_version]
        if self.cluster.kubernetes_minor < minimum:
            raise ConfigError(
                f"{setting('cluster.kubernetesVersion')}: Strimzi {self.kafka.operator_chart_version} needs "
                f"Kubernetes {minimum[0]}.{minimum[1]} or newer, got {self.cluster.kubernetes_version}"
            )
        for topic_config in self.topics:
            require_topic_fits(topic_config, self.kafka.brokers)
        topic_names = {topic_config.name for topic_config in self.topics}
        names = [job.name for job in self.jobs]
        for job in self.jobs:
            if names.count(job.name) > 1:
                raise ConfigError(f"{setting('jobs')}: job {job.name} is listed more than once")
            for flag, topic in [*job.topics, ("--dead-letter-topic", job.dead_letter_topic)]:
                if topic not in topic_names:
                    raise ConfigError(
                        f"{setting(f'{job.entry}.topics')}: {flag} {topic} of job {job.name} is not a "
                        f"topic of the stack (add it under {setting('topics')})"
                    )
            require_checkpoint_reach(job, self.cluster.nodes)
        require_exporter_reach(self.lag_exporter, self.jobs, self.cluster.nodes)


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


def _kafka(section: Section) -> KafkaConfig:
    section.only(
        "namespace",
        "clusterName",
        "operatorChartVersion",
        "version",
        "metadataVersion",
        "replicationFactor",
        "minInsyncReplicas",
        "nodePools",
        "clientTls",
    )
    pools = tuple(_node_pool(pool) for pool in section.sections("nodePools")) or KafkaConfig.node_pools
    names = [pool.name for pool in pools]
    if len(set(names)) != len(names):
        raise ConfigError(f"{section.name('nodePools')}: pool names must differ, got {', '.join(names)}")
    brokers = sum(pool.replicas for pool in pools if "broker" in pool.roles)
    chart = section.string("operatorChartVersion", KafkaConfig.operator_chart_version)
    version = section.string("version", KafkaConfig.version)
    default_metadata = STRIMZI_KAFKA_VERSIONS.get(chart, {}).get(version, KafkaConfig.metadata_version)
    replication = section.integer("replicationFactor", min(3, brokers), minimum=1)
    return KafkaConfig(
        namespace=section.string("namespace", KafkaConfig.namespace, _DNS_LABEL),
        cluster_name=section.string("clusterName", KafkaConfig.cluster_name, _DNS_LABEL),
        operator_chart_version=chart,
        version=version,
        metadata_version=section.string("metadataVersion", default_metadata),
        replication_factor=replication,
        min_insync_replicas=section.integer("minInsyncReplicas", max(1, replication - 1), minimum=1),
        node_pools=pools,
        client_tls=section.boolean("clientTls", KafkaConfig.client_tls),
    )


def _topics(section: Section, kafka: KafkaConfig) -> tuple[TopicConfig, ...]:
    """The catalogue's topics with `streamstack:topics` overrides; a name the catalogue lacks adds a topic."""
    definitions = {topic.name: topic for topic in load_pipeline().topics}
    for name in section.raw:
        if not TOPIC_NAME_PATTERN.match(name):
            raise ConfigError(f"{section.name(name)}: not a valid topic and Kubernetes name")
    names = list(definitions) + [name for name in section.raw if name not in definitions]
    topics = []
    for name in names:
        override = section.section(name)
        override.only("partitions", "replicas", "retentionMs", "cleanupPolicy", "minInsyncReplicas", "config")
        definition = definitions.get(name)
        if definition is None and not override.has("partitions"):
            raise ConfigError(
                f"{override.name('partitions')}: required for a topic the catalogue does not have"
            )
        config = definition.topic_config() if definition else {"cleanup.policy": "delete"}
        config.update(override.string_map("config"))
        if override.has("retentionMs"):
            config["retention.ms"] = str(override.integer("retentionMs", minimum=1))
        if override.has("cleanupPolicy"):
            config["cleanup.policy"] = override.choice("cleanupPolicy", CLEANUP_POLICIES)
        min_isr = override.integer("minInsyncReplicas", kafka.min_insync_replicas, minimum=1)
        config["min.insync.replicas"] = str(min_isr)
        topics.append(
            TopicConfig(
                name=name,
                partitions=override.integer("partitions", definition.partitions if definition else None, 1),
                replicas=override.integer("replicas", kafka.replication_factor, minimum=1),
                config=config,
                replicas_setting=override.name("replicas")
                if override.has("replicas")
                else setting("kafka.replicationFactor"),
                min_isr_setting=override.name("minInsyncReplicas")
                if override.has("minInsyncReplicas")
                else setting("kafka.minInsyncReplicas"),
            )
        )
    return tuple(topics)


def _spark(section: Section) -> SparkConfig:
    section.only(
        "image",
        "version",
        "operatorChartVersion",
        "operatorNamespace",
        "jobsNamespace",
        "imagePullPolicy",
        "applicationRoot",
        "serviceAccount",
        "shadowGroupPrefix",
    )
    return SparkConfig(
        image=section.string("image"),
        version=section.string("version", SparkConfig.version),
        operator_chart_version=section.string("operatorChartVersion", SparkConfig.operator_chart_version),
        operator_namespace=section.string("operatorNamespace", SparkConfig.operator_namespace, _DNS_LABEL),
        jobs_namespace=section.string("jobsNamespace", SparkConfig.jobs_namespace, _DNS_LABEL),
        image_pull_policy=section.choice("imagePullPolicy", PULL_POLICIES, SparkConfig.image_pull_policy),
        application_root=section.string("applicationRoot", SparkConfig.application_root),
        service_account=section.string("serviceAccount", SparkConfig.service_account, _DNS_LABEL),
        shadow_group_prefix=section.string("shadowGroupPrefix", SparkConfig.shadow_group_prefix),
    )


MAX_JOB_NAME = 51
_JOB_IDENTITY_KEYS = ("module", "stateful", "topics", "reads", "writes", "settings")
_JOB_DEFAULT_KEYS = (
    "driver",
    "executor",
    "triggerInterval",
    "maxOffsetsPerTrigger",
    "shufflePartitions",
    "metricsPort",
    "deadLetterTopic",
    "checkpoint",
)
_JOB_KEYS = _JOB_IDENTITY_KEYS + _JOB_DEFAULT_KEYS


def _job(entry: Section, defaults: Section) -> JobConfig:
    entry.only("name", *_JOB_KEYS)
    name = entry.string("name", pattern=_DNS_LABEL)
    if len(name) > MAX_JOB_NAME:
        raise ConfigError(
            f"{entry.name('name')}: {name!r} is longer than {MAX_JOB_NAME} characters (the streaming-job "
            "chart names its checkpoint claim <name>-checkpoints, which must fit 63)"
        )
    definition = {job.name: job for job in load_pipeline().jobs}.get(name)
    layered = Layered(entry, defaults)

    def own(key: str, read: Callable[[Section], T], fallback: T | None) -> T:
        """A setting that only a job's entry may give (its identity), from the catalogue otherwise."""
        if entry.has(key):
            return read(entry)
        if fallback is None:
            raise ConfigError(f"{entry.name(key)}: required for job {name}, which is not in the catalogue")
        return fallback

    no_overrides: tuple[tuple[str, str], ...] = ()
    topics = own(
        "topics",
        lambda s: tuple(s.string_map("topics").items()),
        None if definition is None else no_overrides,
    )
    if definition is not None:
        overridden = dict(definition.topics)
        for flag, topic in topics:
            if flag not in overridden:
                raise ConfigError(
                    f"{entry.name('topics')}.{flag}: job {name} has no such topic flag "
                    f"(its flags: {', '.join(overridden)})"
                )
            overridden[flag] = topic
        topics = tuple(overridden.items())
    for flag, topic in topics:
        if not FLAG_PATTERN.match(flag) or not TOPIC_NAME_PATTERN.match(topic):
            raise ConfigError(f"{entry.name('topics')}.{flag}: expected --flag: topic-name, got {topic!r}")
    flags = [flag for flag, _ in topics]
    reads = own("reads", lambda s: s.strings("reads"), definition.reads if definition else None)
    writes = own("writes", lambda s: s.strings("writes"), definition.writes if definition else None)
    for key, chosen in (("reads", reads), ("writes", writes)):
        missing = [flag for flag in chosen if flag not in flags]
        if missing:
            raise ConfigError(f"{entry.name(key)}: {missing[0]} is not one of the job's topic flags {flags}")
    stateful = own("stateful", lambda s: s.boolean("stateful"), definition.stateful if definition else None)

    driver = layered.child("driver")
    driver.only("cores", "coreRequest", "coreLimit", "memory")
    executor = layered.child("executor")
    executor.only("instances", "cores", "coreRequest", "coreLimit", "memory")
    checkpoint = layered.child("checkpoint")
    checkpoint.only("accessMode", "storageClass", "size", "protect")

    def spark_memory(part: Layered, default: str) -> str:
        value: str = part.source("memory").string("memory", default)
        if not _SPARK_MEMORY.match(value):
            raise ConfigError(
                f"{part.source('memory').name('memory')}: {value!r} is not Spark memory like 1g"
            )
        return value

    def quantity(part: Layered, key: str, default: str) -> str:
        value: str = part.source(key).string(key, default)
        return _require_quantity(part.source(key).name(key), value)

    def optional_quantity(part: Layered, key: str) -> str | None:
        value: str | None = part.source(key).string(key, None)
        return None if value is None else _require_quantity(part.source(key).name(key), value)

    trigger = layered.source("triggerInterval").string("triggerInterval", JobConfig.trigger_interval)
    if not _SPARK_DURATION.match(trigger):
        raise ConfigError(
            f"{layered.source('triggerInterval').name('triggerInterval')}: {trigger!r} is not a duration "
            "such as '5 seconds'"
        )
    mode_source = checkpoint.source("accessMode")
    return JobConfig(
        name=name,
        module=own(
            "module",
            lambda s: s.string("module", pattern=PACKAGE_PATTERN),
            definition.module if definition else None,
        ),
        stateful=stateful,
        topics=topics,
        reads=reads,
        writes=writes,
        settings=own(
            "settings", lambda s: s.strings("settings"), definition.setting_arguments if definition else ()
        ),
        driver=DriverResources(
            cores=driver.source("cores").integer("cores", DriverResources.cores, minimum=1),
            core_request=quantity(driver, "coreRequest", DriverResources.core_request),
            core_limit=optional_quantity(driver, "coreLimit"),
            memory=spark_memory(driver, DriverResources.memory),
        ),
        executor=ExecutorResources(
            instances=executor.source("instances").integer(
                "instances", ExecutorResources.instances, minimum=1
            ),
            cores=executor.source("cores").integer("cores", ExecutorResources.cores, minimum=1),
            core_request=quantity(executor, "coreRequest", ExecutorResources.core_request),
            core_limit=optional_quantity(executor, "coreLimit"),
            memory=spark_memory(executor, ExecutorResources.memory),
        ),
        trigger_interval=trigger,
        max_offsets_per_trigger=layered.source("maxOffsetsPerTrigger").integer(
            "maxOffsetsPerTrigger", None, 1
        ),
        shuffle_partitions=layered.source("shufflePartitions").integer(
            "shufflePartitions", JobConfig.shuffle_partitions, minimum=1
        ),
        metrics_port=layered.source("metricsPort").integer(
            "metricsPort", JobConfig.metrics_port, minimum=1024
        ),
        dead_letter_topic=layered.source("deadLetterTopic").string(
            "deadLetterTopic", load_pipeline().dead_letter_topic, TOPIC_NAME_PATTERN
        ),
        checkpoint=CheckpointConfig(
            access_mode=mode_source.choice("accessMode", ACCESS_MODES, CheckpointConfig.access_mode),
            storage_class=checkpoint.source("storageClass").string("storageClass", None),
            size=quantity(checkpoint, "size", CheckpointConfig.size),
            protect=checkpoint.source("protect").boolean("protect", CheckpointConfig.protect),
            setting=mode_source.name("accessMode"),
        ),
        stateful_setting=entry.name("stateful") if entry.has("stateful") else "",
        entry=entry.path,
    )


def _lag_exporter(section: Section) -> LagExporterConfig:
    section.only(
        "enabled",
        "image",
        "imagePullPolicy",
        "port",
        "refreshInterval",
        "window",
        "readCheckpoints",
        "logLevel",
        "runAsUser",
        "resources",
    )
    default = LagExporterConfig
    enabled = section.boolean("enabled", True)
    return LagExporterConfig(
        image=section.string("image", _MISSING if enabled else None),
        enabled=enabled,
        image_pull_policy=section.choice("imagePullPolicy", PULL_POLICIES, default.image_pull_policy),
        port=section.integer("port", default.port, minimum=1024),
        refresh_interval=float(section.number("refreshInterval", default.refresh_interval)),
        window=float(section.number("window", default.window)),
        read_checkpoints=section.boolean("readCheckpoints", default.read_checkpoints),
        log_level=section.choice("logLevel", LOG_LEVELS, default.log_level),
        run_as_user=section.integer("runAsUser", default.run_as_user, minimum=1),
        resources=_resources(section.section("resources"), EXPORTER_RESOURCES),
    )


def _monitoring(section: Section) -> MonitoringConfig:
    section.only("namespace", "chartVersion", "releaseName", "prometheus")
    prometheus = section.section("prometheus")
    prometheus.only("retention", "storageSize", "storageClass", "resources")
    size = prometheus.string("storageSize", None)
    return MonitoringConfig(
        namespace=section.string("namespace", MonitoringConfig.namespace, _DNS_LABEL),
        chart_version=section.string("chartVersion", MonitoringConfig.chart_version),
        release_name=section.string("releaseName", MonitoringConfig.release_name, _DNS_LABEL),
        prometheus_retention=prometheus.string(
            "retention", MonitoringConfig.prometheus_retention, re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")
        ),
        prometheus_storage_size=None
        if size is None
        else _require_quantity(prometheus.name("storageSize"), size),
        prometheus_storage_class=prometheus.string("storageClass", None),
        prometheus_resources=_resources(prometheus.section("resources"), Resources()),
    )


def _load_generator(section: Section) -> LoadGeneratorConfig:
    section.only("enabled")
    return LoadGeneratorConfig(enabled=section.boolean("enabled", LoadGeneratorConfig.enabled))


def _alerting(section: Section) -> AlertingConfig:
    section.only(
        *ALERT_SEVERITIES,
        "slackChannel",
        "groupWait",
        "groupInterval",
        "repeatInterval",
        "notifierCidrs",
        "notifierPorts",
    )
    default = AlertingConfig
    ports = section._get(
        "notifierPorts",
        list(default.notifier_ports),
        lambda v: isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in v),
        "a list of port numbers",
    )
    return AlertingConfig(
        critical=section.strings("critical", ()),
        warning=section.strings("warning", ()),
        slack_channel=section.string("slackChannel", None),
        group_wait=section.string("groupWait", default.group_wait),
        group_interval=section.string("groupInterval", default.group_interval),
        repeat_interval=section.string("repeatInterval", default.repeat_interval),
        notifier_cidrs=section.strings("notifierCidrs", default.notifier_cidrs),
        notifier_ports=tuple(ports),
    )


# The one secret setting: a plain string read only with `get_secret`, never part of `load()`'s sections.
GRAFANA_ADMIN_PASSWORD = "grafanaAdminPassword"


def grafana_admin_password() -> pulumi.Output[str] | None:
    """The optional stack secret `streamstack:grafanaAdminPassword` as a Pulumi secret, None when unset.

    A value set without `--secret` sits in plain text in Pulumi.<stack>.yaml, and so in the repository: it
    raises ConfigError naming the key (the CLI tells the program which keys are secret:
    PULUMI_CONFIG_SECRET_KEYS, read by the language host into `pulumi.runtime.is_config_secret`)."""
    password = pulumi.Config(PREFIX).get_secret(GRAFANA_ADMIN_PASSWORD)
    if password is None:
        return None
    if not pulumi.runtime.is_config_secret(setting(GRAFANA_ADMIN_PASSWORD)):
        raise ConfigError(
            f"{setting(GRAFANA_ADMIN_PASSWORD)}: set in plain text; remove it "
            f"(`pulumi config rm {GRAFANA_ADMIN_PASSWORD}`), choose a new password and set it with "
            f"`pulumi config set --secret {GRAFANA_ADMIN_PASSWORD} <password>`"
        )
    # The raw value, read without wrapping it: checked before any resource exists, never printed.
    if not str(pulumi.runtime.get_config(setting(GRAFANA_ADMIN_PASSWORD))).strip():
        raise ConfigError(
            f"{setting(GRAFANA_ADMIN_PASSWORD)}: empty; set a password with "
            f"`pulumi config set --secret {GRAFANA_ADMIN_PASSWORD} <password>`, or remove the setting "
            "to let the chart generate one"
        )
    return password


def alerting_secrets(alerting: AlertingConfig) -> dict[str, pulumi.Output[str]]:
    """notifier -> its URL or key (NOTIFIER_SECRETS) as a Pulumi secret, for each one set.

    Like `grafana_admin_password`: a value set without `--secret` raises ConfigError naming the key, as does
    an empty one, a URL without http(s)://, or a secret no severity of `streamstack:alerting` uses (a misspelt
    routing would otherwise drop it silently). A notifier a severity names whose secret is unset is left out
    of the routing with a warning in the preview: that severity's alerts reach only its other notifiers."""
    config = pulumi.Config(PREFIX)
    secrets: dict[str, pulumi.Output[str]] = {}
    for notifier, key in NOTIFIER_SECRETS.items():
        value = config.get_secret(key)
        used_by = [severity for severity in ALERT_SEVERITIES if notifier in getattr(alerting, severity)]
        command = f"`pulumi config set --secret {key} <{'url' if notifier in URL_NOTIFIERS else 'key'}>`"
        if value is None:
            if used_by:
                pulumi.log.warn(
                    f"{setting(key)}: not set, so {' and '.join(used_by)} alerts do not reach {notifier} "
                    f"({setting('alerting')}); set it with {command}"
                )
            continue
        if not pulumi.runtime.is_config_secret(setting(key)):
            raise ConfigError(
                f"{setting(key)}: set in plain text; remove it (`pulumi config rm {key}`), revoke it where "
                f"it was issued and set a new one with {command}"
            )
        # The raw value, checked before any resource exists and never printed.
        raw = str(pulumi.runtime.get_config(setting(key))).strip()
        if not raw:
            raise ConfigError(f"{setting(key)}: empty; set it with {command} or remove it")
        if notifier in URL_NOTIFIERS and not re.match(r"^https?://[^\s/]+", raw):
            raise ConfigError(f"{setting(key)}: not an http(s):// URL; set it with {command}")
        if not used_by:
            raise ConfigError(
                f"{setting(key)}: set, but neither {setting('alerting.critical')} nor "
                f"{setting('alerting.warning')} names {notifier}: add it to the severities it is for, or "
                f"remove the secret (`pulumi config rm {key}`)"
            )
        secrets[notifier] = value
    return secrets


SECTIONS = (
    "cluster",
    "kafka",
    "topics",
    "spark",
    "jobDefaults",
    "jobs",
    "lagExporter",
    "monitoring",
    "loadGenerator",
    "alerting",
)


def configured_keys() -> set[str]:
    """The `streamstack:` keys the stack sets, as the program receives them: from the language host's
    PULUMI_CONFIG, or set in-process (mocks, `streamstack render`)."""
    received = {*pulumi.runtime.config.CONFIG.get(), *pulumi.runtime.get_config_env()}
    return {key.split(":", 1)[1] for key in received if key.startswith(f"{PREFIX}:")}


def check_known_keys(keys: Iterable[str]) -> None:
    """A misspelt top-level key (`streamstack:kafak`) would otherwise be ignored and its defaults used."""
    known = (*SECTIONS, GRAFANA_ADMIN_PASSWORD, *NOTIFIER_SECRETS.values())
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ConfigError(f"{setting(unknown[0])}: unknown setting (known: {', '.join(sorted(known))})")


def load(read: Callable[[str], object] | None = None) -> StackConfig:
    """Read and validate the stack config. `read(key)` returns one structured value (default: the values of
    `pulumi.Config("streamstack").get_object`, after checking that every key set is a known one); raises
    ConfigError naming the first bad setting."""
    if read is None:
        check_known_keys(configured_keys())
        read = pulumi.Config(PREFIX).get_object
    raw = {key: read(key) for key in SECTIONS}
    kafka = _kafka(Section("kafka", raw["kafka"]))
    defaults = Section("jobDefaults", raw["jobDefaults"])
    defaults.only(*_JOB_DEFAULT_KEYS)
    jobs_raw = raw["jobs"] if raw["jobs"] is not None else []
    if not isinstance(jobs_raw, list):
        raise ConfigError(f"{setting('jobs')}: expected a list of jobs, got {jobs_raw!r}")
    jobs = tuple(_job(Section(f"jobs[{index}]", entry), defaults) for index, entry in enumerate(jobs_raw))
    return StackConfig(
        cluster=_cluster(Section("cluster", raw["cluster"])),
        kafka=kafka,
        topics=_topics(Section("topics", raw["topics"]), kafka),
        spark=_spark(Section("spark", raw["spark"])),
        jobs=jobs,
        lag_exporter=_lag_exporter(Section("lagExporter", raw["lagExporter"])),
        monitoring=_monitoring(Section("monitoring", raw["monitoring"])),
        load_generator=_load_generator(Section("loadGenerator", raw["loadGenerator"])),
        alerting=_alerting(Section("alerting", raw["alerting"])),
    )
