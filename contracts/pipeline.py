"""The pipeline catalogue: `pipeline.yaml` at the repository's root, read into typed, checked objects.

The one description of the pipeline's topics, jobs and producers. The Pulumi program (`infra`), the local
runtime and the rehearsal (`streamstack`) and the tests all read it through `load_pipeline()`, so what runs
on a laptop and what `pulumi up` deploys cannot drift apart. A mistake in the file fails on load with a
message naming the field, e.g. `pipeline.yaml: jobs.user-view.reads: --foo is not one of its topic flags`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from contracts.record_sizes import DEAD_LETTER_MAX_MESSAGE_BYTES, INPUT_MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from contracts.cdc import CdcSource

CATALOGUE_PATH = Path(__file__).resolve().parent.parent / "pipeline.yaml"
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
MAX_MESSAGE_BYTES = "max.message.bytes"
DEAD_LETTER_FLAG = "--dead-letter-topic"

# What a topic name, a job's command-line flag, a job's package and a job's name (a Kubernetes DNS label) may
# look like: the stack config (infra.config) checks its overrides against the same patterns.
TOPIC_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,247}[a-z0-9])?$")
FLAG_PATTERN = re.compile(r"^--[a-z][a-z0-9-]*$")
PACKAGE_PATTERN = re.compile(r"^[a-z_][a-z0-9_]*$")
DNS_LABEL_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# The streaming-job chart names a job's checkpoint claim <job>-checkpoints, which must fit a DNS label (63).
MAX_JOB_NAME = 51
_MODULE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")


class CatalogueError(ValueError):
    """`pipeline.yaml` says something that cannot work; the message starts with the field."""


@dataclass(frozen=True)
class Topic:
    """A topic: compact for changelogs and views (latest value per key), delete for event logs."""

    name: str
    partitions: int
    cleanup_policy: str = "delete"
    retention_ms: int | None = None
    extra_config: Mapping[str, str] = field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        """The topic's configs as Kafka names them (cleanup.policy, retention.ms and the verbatim ones)."""
        config = {"cleanup.policy": self.cleanup_policy, **self.extra_config}
        if self.retention_ms is not None:
            config["retention.ms"] = str(self.retention_ms)
        return config


@dataclass(frozen=True)
class Producer:
    """A synthetic event producer: `python -m <module> --topic <topic> ... <arguments>`."""

    name: str
    module: str
    topic: str
    arguments: tuple[str, ...] = ()

    @property
    def flags(self) -> tuple[str, ...]:
        """Its flags besides the bootstrap servers: the topic, then its own arguments."""
        return ("--topic", self.topic, *self.arguments)


@dataclass(frozen=True)
class JobIdentity:
    """What makes a PySpark job of `jobs/<module>/` the job it is: its name, package, whether it keeps state,
    its topic flags (flag -> topic) and which of them it reads and writes. The catalogue defines it; a
    stack's job entry (infra.config.JobConfig) may override it."""

    name: str
    module: str
    stateful: bool
    topics: tuple[tuple[str, str], ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def topics_of(self, flags: tuple[str, ...]) -> tuple[str, ...]:
        """The topics of these flags, each once, in the order of the flags."""
        by_flag = dict(self.topics)
        return tuple(dict.fromkeys(by_flag[flag] for flag in flags))


@dataclass(frozen=True)
class Job(JobIdentity):
    """A job of the catalogue: its identity, its own settings (flag -> value) and the producers that feed
    it. Every job also writes the dead-letter topic."""

    settings: tuple[tuple[str, str], ...] = ()
    producers: tuple[str, ...] = ()

    @property
    def python_module(self) -> str:
        return f"jobs.{self.module}"

    @property
    def setting_arguments(self) -> tuple[str, ...]:
        return tuple(part for flag_value in self.settings for part in flag_value)

    @property
    def topic_arguments(self) -> tuple[str, ...]:
        return tuple(part for flag_topic in self.topics for part in flag_topic)

    def arguments(self) -> tuple[str, ...]:
        """The job's own flags: its topics, then its settings (the dead-letter flag is shared)."""
        return self.topic_arguments + self.setting_arguments


@dataclass(frozen=True)
class Pipeline:
    topics: tuple[Topic, ...]
    jobs: tuple[Job, ...]
    producers: tuple[Producer, ...]
    dead_letter_topic: str
    # `sources.cdc`: the tables Debezium captures onto the changelog topics (contracts.cdc); None: no CDC.
    cdc: CdcSource | None = None

    def topic(self, name: str) -> Topic:
        return {topic.name: topic for topic in self.topics}[name]

    def job(self, name: str) -> Job:
        return {job.name: job for job in self.jobs}[name]

    def producer(self, name: str) -> Producer:
        return {producer.name: producer for producer in self.producers}[name]


class _Fields:
    """A mapping of the file with its path, so that every error names the field it is about."""

    def __init__(self, raw: object, path: str) -> None:
        if not isinstance(raw, Mapping):
            raise CatalogueError(f"{path}: expected a mapping, got {type(raw).__name__}")
        self.raw: Mapping[str, Any] = raw
        self.path = path

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def only(self, *keys: str) -> None:
        unknown = sorted(str(key) for key in self.raw if key not in keys)
        if unknown:
            raise CatalogueError(f"{self.name(unknown[0])}: unknown field (known: {', '.join(keys)})")

    def require(self, key: str) -> object:
        if key not in self.raw:
            raise CatalogueError(f"{self.name(key)}: required")
        return self.raw[key]

    def child(self, key: str) -> _Fields:
        return _Fields(self.raw.get(key, {}), self.name(key))

    def string(self, key: str, pattern: re.Pattern[str], default: str | None = None) -> str:
        value = self.raw.get(key, default) if default is not None else self.require(key)
        if not isinstance(value, str) or not pattern.match(value):
            raise CatalogueError(f"{self.name(key)}: {value!r} does not match {pattern.pattern}")
        return value

    def integer(self, key: str, minimum: int, default: int | None = None) -> int | None:
        value = self.raw.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise CatalogueError(f"{self.name(key)}: {value!r} is not a whole number >= {minimum}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise CatalogueError(f"{self.name(key)}: expected a list of strings")
        return tuple(value)

    def string_pairs(self, key: str, key_pattern: re.Pattern[str]) -> tuple[tuple[str, str], ...]:
        value = self.child(key).raw
        pairs = []
        for flag, item in value.items():
            if not isinstance(flag, str) or not key_pattern.match(flag):
                raise CatalogueError(
                    f"{self.name(key)}.{flag}: not a valid name (pattern {key_pattern.pattern})"
                )
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise CatalogueError(f"{self.name(key)}.{flag}: expected a string, got {item!r}")
            pairs.append((flag, str(item)))
        return tuple(pairs)


def _require_in_catalogue(field: str, name: str, known: Mapping[str, object], kind: str) -> None:
    """`name`, given in `field`, must be a `kind` (topic, producer) the catalogue defines."""
    if name not in known:
        raise CatalogueError(f"{field}: {name} is not a {kind} of the catalogue")


def _topic(name: str, fields: _Fields) -> Topic:
    if not TOPIC_NAME_PATTERN.match(name):
        raise CatalogueError(f"{fields.path}: not a valid topic name")
    fields.only("partitions", "cleanupPolicy", "retentionMs", "config")
    policy = fields.raw.get("cleanupPolicy", "delete")
    if policy not in CLEANUP_POLICIES:
        raise CatalogueError(f"{fields.name('cleanupPolicy')}: {policy!r} is not one of {CLEANUP_POLICIES}")
    partitions = fields.integer("partitions", 1)
    if partitions is None:
        raise CatalogueError(f"{fields.name('partitions')}: required")
    return Topic(
        name=name,
        partitions=partitions,
        cleanup_policy=policy,
        retention_ms=fields.integer("retentionMs", 1),
        extra_config=dict(fields.string_pairs("config", re.compile(r"^[a-z][a-z0-9.]*$"))),
    )


def _job(name: str, fields: _Fields, topics: Mapping[str, Topic], producers: Mapping[str, Producer]) -> Job:
    if not DNS_LABEL_PATTERN.match(name) or len(name) > MAX_JOB_NAME:
        raise CatalogueError(
            f"{fields.path}: not a valid job name (a DNS label of at most {MAX_JOB_NAME} characters)"
        )
    fields.only("module", "stateful", "topics", "reads", "writes", "settings", "producers")
    stateful = fields.require("stateful")
    if not isinstance(stateful, bool):
        raise CatalogueError(f"{fields.name('stateful')}: expected true or false")
    job_topics = fields.string_pairs("topics", FLAG_PATTERN)
    if not job_topics:
        raise CatalogueError(f"{fields.name('topics')}: required, at least one --flag: topic")
    for flag, topic in job_topics:
        _require_in_catalogue(f"{fields.name('topics')}.{flag}", topic, topics, "topic")
    flags = [flag for flag, _ in job_topics]
    reads, writes = fields.strings("reads"), fields.strings("writes")
    for key, chosen in (("reads", reads), ("writes", writes)):
        for flag in chosen:
            if flag not in flags:
                raise CatalogueError(f"{fields.name(key)}: {flag} is not one of its topic flags {flags}")
    if not reads:
        raise CatalogueError(f"{fields.name('reads')}: a job reads at least one of its topics")
    settings = fields.string_pairs("settings", FLAG_PATTERN)
    clashing = sorted({flag for flag, _ in settings} & {*flags, DEAD_LETTER_FLAG})
    if clashing:
        raise CatalogueError(f"{fields.name('settings')}.{clashing[0]}: a topic flag, set under topics")
    feeding = fields.strings("producers")
    for producer in feeding:
        _require_in_catalogue(fields.name("producers"), producer, producers, "producer")
    return Job(
        name=name,
        module=fields.string("module", PACKAGE_PATTERN),
        stateful=stateful,
        topics=job_topics,
        reads=reads,
        writes=writes,
        settings=settings,
        producers=feeding,
    )


def _producer(name: str, fields: _Fields, topics: Mapping[str, Topic]) -> Producer:
    fields.only("module", "topic", "arguments")
    topic = fields.string("topic", TOPIC_NAME_PATTERN)
    _require_in_catalogue(fields.name("topic"), topic, topics, "topic")
    return Producer(
        name=name,
        module=fields.string("module", _MODULE),
        topic=topic,
        arguments=fields.strings("arguments"),
    )


def _sized_dead_letter_topic(topics: Mapping[str, Topic], dead_letters: str, jobs: tuple[Job, ...]) -> Topic:
    """The dead-letter topic with room for the dead letter of the largest input record
    (contracts.record_sizes); no input topic may take larger records than that sizing assumes."""
    for input_topic in dict.fromkeys(name for job in jobs for name in job.topics_of(job.reads)):
        limit = topics[input_topic].extra_config.get(MAX_MESSAGE_BYTES)
        if limit is not None and (not limit.isdigit() or int(limit) > INPUT_MAX_MESSAGE_BYTES):
            raise CatalogueError(
                f"topics.{input_topic}.config.{MAX_MESSAGE_BYTES}: {limit!r} is not a number of bytes up to "
                f"{INPUT_MAX_MESSAGE_BYTES}, the largest input record the dead-letter topic is sized for "
                "(contracts/record_sizes.py)"
            )
    topic = topics[dead_letters]
    if MAX_MESSAGE_BYTES in topic.extra_config:
        raise CatalogueError(
            f"topics.{dead_letters}.config.{MAX_MESSAGE_BYTES}: set from contracts/record_sizes.py, not here"
        )
    return replace(
        topic, extra_config={**topic.extra_config, MAX_MESSAGE_BYTES: str(DEAD_LETTER_MAX_MESSAGE_BYTES)}
    )


def parse_pipeline(document: object, source: str = "pipeline.yaml") -> Pipeline:
    """The catalogue from its YAML document; `source` prefixes every error message."""
    try:
        root = _Fields(document, "")
        root.only("deadLetterTopic", "topics", "producers", "jobs", "sources")
        topics = {name: _topic(name, root.child("topics").child(name)) for name in root.child("topics").raw}
        dead_letters = root.string("deadLetterTopic", TOPIC_NAME_PATTERN)
        _require_in_catalogue("deadLetterTopic", dead_letters, topics, "topic")
        producers_fields = root.child("producers")
        producers = {
            name: _producer(name, producers_fields.child(name), topics) for name in producers_fields.raw
        }
        jobs_fields = root.child("jobs")
        jobs = tuple(_job(name, jobs_fields.child(name), topics, producers) for name in jobs_fields.raw)
        topics[dead_letters] = _sized_dead_letter_topic(topics, dead_letters, jobs)
        pipeline = Pipeline(tuple(topics.values()), jobs, tuple(producers.values()), dead_letters)
        sources = root.child("sources")
        sources.only("cdc")
        if "cdc" in sources.raw:
            from contracts.cdc import parse_cdc_source  # noqa: PLC0415 (contracts.cdc imports this module)

            pipeline = replace(pipeline, cdc=parse_cdc_source(sources.raw["cdc"], pipeline, "sources.cdc"))
    except CatalogueError as error:
        raise CatalogueError(f"{source}: {error}") from None
    return pipeline


@functools.cache
def _load(path: Path) -> Pipeline:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise CatalogueError(f"{path.name}: cannot read the pipeline catalogue: {error}") from None
    return parse_pipeline(document, path.name)


def load_pipeline(path: Path = CATALOGUE_PATH) -> Pipeline:
    """The pipeline of `pipeline.yaml` (read once per path)."""
    return _load(path.resolve())
