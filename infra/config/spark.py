"""`streamstack:spark`, `streamstack:jobDefaults` and `streamstack:jobs`: the operator, the image and each
job's SparkApplication settings, checked against the pipeline catalogue."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from functools import partial
from typing import Any

from contracts.durations import SPARK_DURATION
from contracts.pipeline import (
    DNS_LABEL_PATTERN,
    FLAG_PATTERN,
    MAX_JOB_NAME,
    PACKAGE_PATTERN,
    TOPIC_NAME_PATTERN,
    JobIdentity,
    load_pipeline,
)
from contracts.shadow_groups import SHADOW_GROUP_PREFIX
from infra.config import versions
from infra.config.base import (
    _SPARK_MEMORY,
    ACCESS_MODES,
    PULL_POLICIES,
    ConfigError,
    Layered,
    Origin,
    Section,
    T,
    _require_quantity,
    require_choice,
    require_match,
    require_minimum,
    setting,
)
from infra.config.versions import parse_version, require_pinned_chart


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
    shadow_group_prefix: str = SHADOW_GROUP_PREFIX

    def __post_init__(self) -> None:
        require_match(setting("spark.operatorNamespace"), self.operator_namespace, DNS_LABEL_PATTERN)
        require_match(setting("spark.jobsNamespace"), self.jobs_namespace, DNS_LABEL_PATTERN)
        require_choice(setting("spark.imagePullPolicy"), self.image_pull_policy, PULL_POLICIES)
        require_match(setting("spark.serviceAccount"), self.service_account, DNS_LABEL_PATTERN)
        major = parse_version(setting("spark.version"), self.version)[0]
        require_pinned_chart(
            setting("spark.operatorChartVersion"), "spark-operator", self.operator_chart_version
        )
        majors = versions.SPARK_OPERATOR_SPARK_MAJORS[self.operator_chart_version]
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
    """`registry/name:tag@sha256:...` split the way our charts take it (`image.repository/tag/digest`);
    `setting` names the image's stack setting."""

    repository: str
    tag: str
    digest: str = ""
    setting: str = field(kw_only=True)

    def __post_init__(self) -> None:
        if not self.repository or not self.tag or "/" in self.tag:
            raise ConfigError(f"{self.setting}: {self.image!r} needs a pinned tag (repository:tag)")

    @property
    def image(self) -> str:
        reference = f"{self.repository}:{self.tag}" if self.repository else self.tag
        return f"{reference}@{self.digest}" if self.digest else reference

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
    return ImageReference(repository, tag, digest, setting=name)


def image_tag(image: str) -> str | None:
    """`repo/name:tag@sha256:...` -> `tag`; None without a tag."""
    reference = image.split("@", 1)[0]
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        return None
    return tag


@dataclass(frozen=True)
class CheckpointConfig:
    """The job's checkpoint PersistentVolumeClaim; `origin` names the settings it was read from."""

    access_mode: str = "ReadWriteOnce"
    storage_class: str | None = None
    size: str = "1Gi"
    protect: bool = False
    origin: Origin = field(default_factory=partial(Origin, "jobDefaults.checkpoint"))

    def __post_init__(self) -> None:
        require_choice(self.access_mode_setting, self.access_mode, ACCESS_MODES)
        _require_quantity(self.origin.name("size"), self.size)

    @property
    def access_mode_setting(self) -> str:
        return self.origin.name("accessMode")


@dataclass(frozen=True, kw_only=True)
class SparkPodResources:
    """The cores and memory of a Spark pod; `origin` names the settings they were read from."""

    cores: int = 1
    core_request: str = "250m"
    core_limit: str | None = None
    memory: str = "1g"
    # spark.{driver,executor}.memoryOverhead: the pod's memory beyond the heap (JVM off-heap, the Python
    # process); None keeps Spark's max(0.4 x heap, 384 MiB) for a PySpark application.
    memory_overhead: str | None = None
    origin: Origin

    def __post_init__(self) -> None:
        require_minimum(self.origin.name("cores"), self.cores, 1)
        _require_quantity(self.origin.name("coreRequest"), self.core_request)
        _require_quantity(self.origin.name("coreLimit"), self.core_limit)
        for key, value in (("memory", self.memory), ("memoryOverhead", self.memory_overhead)):
            if value is not None and not _SPARK_MEMORY.match(value):
                raise ConfigError(f"{self.origin.name(key)}: {value!r} is not Spark memory like 1g")


@dataclass(frozen=True, kw_only=True)
class DriverResources(SparkPodResources):
    """The driver's pod."""

    origin: Origin = field(default_factory=partial(Origin, "jobDefaults.driver"))


@dataclass(frozen=True, kw_only=True)
class ExecutorResources(SparkPodResources):
    """Each executor's pod, and how many executors run."""

    instances: int = 1
    origin: Origin = field(default_factory=partial(Origin, "jobDefaults.executor"))

    def __post_init__(self) -> None:
        require_minimum(self.origin.name("instances"), self.instances, 1)
        super().__post_init__()


@dataclass(frozen=True)
class JobConfig(JobIdentity):
    """A streaming job: the catalogue's definition (its identity) with the stack's overrides and resources;
    `settings` are its own flags and values in order; `origin` names the settings it was read from."""

    settings: tuple[str, ...] = ()
    driver: DriverResources = field(default_factory=DriverResources)
    executor: ExecutorResources = field(default_factory=ExecutorResources)
    trigger_interval: str = "5 seconds"
    max_offsets_per_trigger: int | None = None
    shuffle_partitions: int = 4
    metrics_port: int = 9400
    dead_letter_topic: str = field(default_factory=lambda: load_pipeline().dead_letter_topic)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    origin: Origin = field(default_factory=partial(Origin, "jobDefaults"))

    def __post_init__(self) -> None:
        require_match(self.origin.entry_name("name"), self.name, DNS_LABEL_PATTERN)
        if len(self.name) > MAX_JOB_NAME:
            raise ConfigError(
                f"{self.origin.entry_name('name')}: {self.name!r} is longer than {MAX_JOB_NAME} characters "
                "(the streaming-job chart names its checkpoint claim <name>-checkpoints, which must fit 63)"
            )
        require_match(self.origin.entry_name("module"), self.module, PACKAGE_PATTERN)
        for flag, topic in self.topics:
            if not FLAG_PATTERN.match(flag) or not TOPIC_NAME_PATTERN.match(topic):
                raise ConfigError(
                    f"{self.origin.entry_name('topics')}.{flag}: expected --flag: topic-name, got {topic!r}"
                )
        flags = [flag for flag, _ in self.topics]
        for key, chosen in (("reads", self.reads), ("writes", self.writes)):
            missing = [flag for flag in chosen if flag not in flags]
            if missing:
                raise ConfigError(
                    f"{self.origin.entry_name(key)}: {missing[0]} is not one of the job's topic flags {flags}"
                )
        if not SPARK_DURATION.match(self.trigger_interval):
            raise ConfigError(
                f"{self.origin.name('triggerInterval')}: {self.trigger_interval!r} is not a duration such as "
                "'5 seconds'"
            )
        for key, value, minimum in (
            ("maxOffsetsPerTrigger", self.max_offsets_per_trigger, 1),
            ("shufflePartitions", self.shuffle_partitions, 1),
            ("metricsPort", self.metrics_port, 1024),
        ):
            require_minimum(self.origin.name(key), value, minimum)
        require_match(self.origin.name("deadLetterTopic"), self.dead_letter_topic, TOPIC_NAME_PATTERN)

    @property
    def stateful_setting(self) -> str:
        """The entry's `stateful` when it sets it; empty when the catalogue says."""
        return self.origin.entry_name("stateful") if "stateful" in self.origin.entry_keys else ""

    @property
    def read_topics(self) -> tuple[str, ...]:
        return self.topics_of(self.reads)

    @property
    def written_topics(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.topics_of(self.writes), self.dead_letter_topic]))

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
            f"{job.checkpoint.access_mode_setting}: {why}, but a ReadWriteOncePod volume admits only the "
            "driver's pod; use ReadWriteMany"
        )
    if mode == "ReadWriteOnce" and nodes > 1:
        raise ConfigError(
            f"{job.checkpoint.access_mode_setting}: {why}, but a ReadWriteOnce volume reaches pods on one "
            f"node only and the cluster has {nodes} nodes ({setting('cluster.nodes')}); use ReadWriteMany"
        )


def _spark(section: Section) -> SparkConfig:
    """Every field of SparkConfig is a string setting named like the field in camelCase (`jobsNamespace`);
    one left unset keeps the field's default (`image` has none: it is required)."""
    settings = {re.sub(r"_([a-z])", lambda m: m[1].upper(), item.name): item for item in fields(SparkConfig)}
    section.only(*settings)
    return SparkConfig(
        **{
            item.name: section.string(key) if item.default is MISSING else section.string(key, item.default)
            for key, item in settings.items()
        }
    )


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


def _pod_resources(part: Layered) -> dict[str, Any]:
    """The SparkPodResources fields of the job's `driver` or `executor`."""
    return {
        "cores": part.integer("cores", SparkPodResources.cores),
        "core_request": part.string("coreRequest", SparkPodResources.core_request),
        "core_limit": part.string("coreLimit", None),
        "memory": part.string("memory", SparkPodResources.memory),
        "memory_overhead": part.string("memoryOverhead", None),
        "origin": part.origin(),
    }


def _job(entry: Section, defaults: Section) -> JobConfig:
    entry.only("name", *_JOB_KEYS)
    name = entry.string("name")
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

    driver = layered.child("driver")
    driver.only("cores", "coreRequest", "coreLimit", "memory", "memoryOverhead")
    executor = layered.child("executor")
    executor.only("instances", "cores", "coreRequest", "coreLimit", "memory", "memoryOverhead")
    checkpoint = layered.child("checkpoint")
    checkpoint.only("accessMode", "storageClass", "size", "protect")
    return JobConfig(
        name=name,
        module=own("module", lambda s: s.string("module"), definition.module if definition else None),
        stateful=own(
            "stateful", lambda s: s.boolean("stateful"), definition.stateful if definition else None
        ),
        topics=topics,
        reads=own("reads", lambda s: s.strings("reads"), definition.reads if definition else None),
        writes=own("writes", lambda s: s.strings("writes"), definition.writes if definition else None),
        settings=own(
            "settings", lambda s: s.strings("settings"), definition.setting_arguments if definition else ()
        ),
        driver=DriverResources(**_pod_resources(driver)),
        executor=ExecutorResources(
            instances=executor.integer("instances", ExecutorResources.instances), **_pod_resources(executor)
        ),
        trigger_interval=layered.string("triggerInterval", JobConfig.trigger_interval),
        max_offsets_per_trigger=layered.integer("maxOffsetsPerTrigger", None),
        shuffle_partitions=layered.integer("shufflePartitions", JobConfig.shuffle_partitions),
        metrics_port=layered.integer("metricsPort", JobConfig.metrics_port),
        dead_letter_topic=layered.string("deadLetterTopic", load_pipeline().dead_letter_topic),
        checkpoint=CheckpointConfig(
            access_mode=checkpoint.string("accessMode", CheckpointConfig.access_mode),
            storage_class=checkpoint.string("storageClass", None),
            size=checkpoint.string("size", CheckpointConfig.size),
            protect=checkpoint.boolean("protect", CheckpointConfig.protect),
            origin=checkpoint.origin(),
        ),
        origin=layered.origin(),
    )
