"""`load()`: every section read, checked and combined into one `StackConfig`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pulumi

from infra.config import versions
from infra.config.base import PREFIX, ConfigError, Section, setting
from infra.config.cdc import CdcConfig, _cdc
from infra.config.cluster import ClusterConfig, _cluster
from infra.config.kafka import KafkaConfig, TopicConfig, _kafka, _topics, require_topic_fits
from infra.config.monitoring import (
    NOTIFIER_SECRETS,
    AlertingConfig,
    LagExporterConfig,
    LoadGeneratorConfig,
    MonitoringConfig,
    _alerting,
    _lag_exporter,
    _load_generator,
    _monitoring,
    require_exporter_reach,
)
from infra.config.secrets import CDC_DATABASE_PASSWORD, GRAFANA_ADMIN_PASSWORD
from infra.config.spark import (
    _JOB_DEFAULT_KEYS,
    JobConfig,
    SparkConfig,
    _job,
    _spark,
    require_checkpoint_reach,
)


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
    cdc: CdcConfig = field(default_factory=CdcConfig)

    def __post_init__(self) -> None:
        minimum = versions.STRIMZI_MIN_KUBERNETES[self.kafka.operator_chart_version]
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
                        f"{job.origin.entry_name('topics')}: {flag} {topic} of job {job.name} is not a "
                        f"topic of the stack (add it under {setting('topics')})"
                    )
            require_checkpoint_reach(job, self.cluster.nodes)
        require_exporter_reach(self.lag_exporter, self.jobs, self.cluster.nodes)


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
    "cdc",
)


def configured_keys() -> set[str]:
    """The `streamstack:` keys the stack sets, as the program receives them: from the language host's
    PULUMI_CONFIG, or set in-process (mocks, `streamstack render`)."""
    received = {*pulumi.runtime.config.CONFIG.get(), *pulumi.runtime.get_config_env()}
    return {key.split(":", 1)[1] for key in received if key.startswith(f"{PREFIX}:")}


def check_known_keys(keys: Iterable[str]) -> None:
    """A misspelt top-level key (`streamstack:kafak`) would otherwise be ignored and its defaults used."""
    known = (*SECTIONS, GRAFANA_ADMIN_PASSWORD, CDC_DATABASE_PASSWORD, *NOTIFIER_SECRETS.values())
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
        cdc=_cdc(Section("cdc", raw["cdc"])),
    )
