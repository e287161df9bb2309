"""`streamstack:spark`, `streamstack:jobDefaults` and `streamstack:jobs`: the operator, the image and each
job's SparkApplication settings, checked against the pipeline catalogue."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from contracts.pipeline import FLAG_PATTERN, PACKAGE_PATTERN, TOPIC_NAME_PATTERN, load_pipeline
from contracts.shadow_groups import SHADOW_GROUP_PREFIX
from infra.config import versions
from infra.config.base import (
    _DNS_LABEL,
    _SPARK_DURATION,
    _SPARK_MEMORY,
    ACCESS_MODES,
    PULL_POLICIES,
    ConfigError,
    Layered,
    Section,
    T,
    _known,
    _require_quantity,
    _version,
    require_vendored_crds,
    setting,
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
    shadow_group_prefix: str = SHADOW_GROUP_PREFIX

    def __post_init__(self) -> None:
        major = _version(setting("spark.version"), self.version)[0]
        _known(
            setting("spark.operatorChartVersion"),
            self.operator_chart_version,
            versions.SPARK_OPERATOR_SPARK_MAJORS,
            "spark-operator",
        )
        require_vendored_crds(
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
