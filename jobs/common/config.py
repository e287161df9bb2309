"""Typed job configuration, parsed from the command line the same way locally and in the cluster.

Only the master URL, addresses and paths differ between `streamstack local up` and a SparkApplication:
both pass these flags to the same entry point, with the topics and settings of the pipeline catalogue
(pipeline.yaml). Flags every job shares live here; a job's own are declared in jobs.common.settings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from contracts.durations import SPARK_DURATION, duration_seconds
from contracts.errors import ConfigError
from contracts.kafka_security import KafkaSecurity
from contracts.shadow_groups import SHADOW_GROUP_PREFIX

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_STARTING_OFFSETS = ("earliest", "latest")

JobConfigT = TypeVar("JobConfigT")


@dataclass(frozen=True)
class EventLimits:
    """What a well-formed input event may look like; anything else is a dead letter."""

    max_event_bytes: int = 64 * 1024
    max_event_future_seconds: int = 60 * 60
    max_event_age_seconds: int = 7 * 24 * 60 * 60

    def __post_init__(self) -> None:
        for flag, value in (
            ("--max-event-bytes", self.max_event_bytes),
            ("--max-event-future-seconds", self.max_event_future_seconds),
            ("--max-event-age-seconds", self.max_event_age_seconds),
        ):
            if value < 1:
                raise ConfigError(f"{flag} {value}: must be at least 1")


@dataclass(frozen=True)
class StreamingJobConfig:
    """What every streaming job needs: Kafka, the checkpoint root, how to trigger, how to report.

    A job may run several queries (its main queries and its dead-letter query); each checkpoints under
    `<checkpoint_dir>/<query name>` and commits to the shadow group `<shadow_group_prefix><query name>`.
    """

    query_name: str
    bootstrap_servers: str
    checkpoint_dir: str
    metrics_port: int
    dead_letter_topic: str
    metrics_host: str = "127.0.0.1"
    master: str | None = None
    trigger_interval: str = "2 seconds"
    starting_offsets: str = "earliest"
    starting_timestamp_ms: int | None = None
    max_offsets_per_trigger: int | None = None
    accept_data_loss: bool = False
    shuffle_partitions: int = 4
    fetch_max_wait_ms: int = 1
    extra_jars: tuple[str, ...] = ()
    spark_conf: dict[str, str] = field(default_factory=dict)
    shadow_group_prefix: str | None = SHADOW_GROUP_PREFIX
    event_limits: EventLimits = field(default_factory=EventLimits)
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def __post_init__(self) -> None:
        for flag, value in (
            ("--query-name", self.query_name),
            ("--bootstrap-servers", self.bootstrap_servers),
            ("--checkpoint-dir", self.checkpoint_dir),
        ):
            if not value.strip():
                raise ConfigError(f"{flag} must not be empty")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.query_name):
            raise ConfigError(f"--query-name {self.query_name!r}: use letters, digits, '.', '_' or '-'")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port {self.metrics_port}: not a TCP port")
        require_duration("--trigger-interval", self.trigger_interval)
        require_starting_offsets(self.starting_offsets)
        if self.starting_timestamp_ms is not None and self.starting_timestamp_ms < 0:
            raise ConfigError(f"--starting-timestamp-ms {self.starting_timestamp_ms}: must not be negative")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigError(f"--max-offsets-per-trigger {self.max_offsets_per_trigger}: must be at least 1")
        if self.shadow_group_prefix is not None and not self.shadow_group_prefix.strip():
            raise ConfigError("--shadow-group-prefix must not be empty")
        if self.shuffle_partitions < 1:
            raise ConfigError(f"--shuffle-partitions {self.shuffle_partitions}: must be at least 1")
        if not 0 <= self.fetch_max_wait_ms <= 500:
            raise ConfigError(f"--kafka-fetch-max-wait-ms {self.fetch_max_wait_ms}: must be 0 to 500")
        require_topic("--dead-letter-topic", self.dead_letter_topic)

    def checkpoint_for(self, query_name: str) -> str:
        """Each query of the job checkpoints in its own directory under the job's checkpoint root."""
        return f"{self.checkpoint_dir.rstrip('/')}/{query_name}"

    @property
    def trigger_interval_seconds(self) -> float:
        return duration_seconds(self.trigger_interval)


def require_duration(flag: str, value: str) -> str:
    """Accept Spark interval strings such as '10 seconds' or '1 minute'."""
    if not SPARK_DURATION.match(value.strip()):
        raise ConfigError(f"{flag} {value!r}: expected a duration such as '10 seconds' or '1 minute'")
    return value.strip()


def require_topic(flag: str, value: str) -> str:
    if not _TOPIC.match(value):
        raise ConfigError(f"{flag} {value!r}: not a Kafka topic name (letters, digits, '.', '_', '-')")
    return value


def require_starting_offsets(value: str) -> str:
    """'earliest', 'latest', or Spark's per-partition JSON such as {"<topic>":{"0":42,"1":-2}}."""
    if value in _STARTING_OFFSETS:
        return value
    try:
        offsets = json.loads(value)
    except json.JSONDecodeError:
        offsets = None
    valid = isinstance(offsets, dict) and all(
        isinstance(partitions, dict)
        and all(str(p).isdigit() and isinstance(o, int) and o >= -2 for p, o in partitions.items())
        for partitions in offsets.values()
    )
    if not valid:
        raise ConfigError(
            f"--starting-offsets {value!r}: expected earliest, latest or JSON such as "
            '\'{"<topic>":{"0":42,"1":-2}}\' (-2 = earliest, -1 = latest)'
        )
    return value


def streaming_job_parser(program: str, description: str, *, query_name: str) -> argparse.ArgumentParser:
    """A job's command line with the flags every job shares (`add_streaming_job_arguments`)."""
    parser = argparse.ArgumentParser(prog=program, description=description)
    add_streaming_job_arguments(parser, query_name=query_name)
    return parser


def parse_job_config(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    build: Callable[[argparse.Namespace, StreamingJobConfig], JobConfigT],
) -> JobConfigT:
    """Parse the command line and `build(args, shared config)` the job's config; a ConfigError, from the
    shared flags or the job's own, exits like any usage error (status 2, the message naming the flag)."""
    args = parser.parse_args(argv)
    try:
        return build(args, streaming_job_config(args))
    except ConfigError as error:
        parser.error(str(error))


def add_streaming_job_arguments(parser: argparse.ArgumentParser, *, query_name: str) -> None:
    """Flags shared by every job; each job adds its own on top."""
    parser.add_argument("--query-name", default=query_name, help="stable name of the job's main query")
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers, host:port[,...]")
    parser.add_argument(
        "--checkpoint-dir", required=True, help="directory or URI under which each query checkpoints"
    )
    parser.add_argument("--metrics-port", type=int, default=9400, help="port of the Prometheus endpoint")
    parser.add_argument("--metrics-host", default="127.0.0.1", help="address the Prometheus endpoint binds")
    parser.add_argument("--master", default=None, help="Spark master URL; unset under spark-submit")
    parser.add_argument("--trigger-interval", default="2 seconds")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="where a new checkpoint starts: earliest, latest or per-partition JSON (replay)",
    )
    parser.add_argument(
        "--starting-timestamp-ms",
        type=int,
        default=None,
        help="a new checkpoint starts at the first record at or after this time (replay)",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument(
        "--accept-data-loss",
        action="store_true",
        help="skip input records Kafka no longer has (retention, a deleted topic) instead of failing; "
        "for one run after such a failure, until a batch commits",
    )
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument(
        "--kafka-fetch-max-wait-ms",
        type=int,
        default=StreamingJobConfig.fetch_max_wait_ms,
        help="how long a fetch of the Kafka source may wait for data; every task of a micro-batch waits "
        "for it once, whatever the batch's size (Kafka's default is 500; make bench-batch-cost)",
    )
    parser.add_argument("--extra-jars", default="", help="comma-separated jars (local mode only)")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    parser.add_argument(
        "--shadow-group-prefix",
        default=SHADOW_GROUP_PREFIX,
        help="each query commits its batches' end offsets to the group <prefix><query name>",
    )
    parser.add_argument(
        "--no-shadow-group", action="store_true", help="do not commit processed offsets to consumer groups"
    )
    parser.add_argument("--dead-letter-topic", required=True, help="where malformed input goes")
    parser.add_argument("--max-event-bytes", type=int, default=EventLimits.max_event_bytes)
    parser.add_argument(
        "--max-event-future-seconds",
        type=int,
        default=EventLimits.max_event_future_seconds,
        help="event time may lead the record's Kafka timestamp by at most this much",
    )
    parser.add_argument(
        "--max-event-age-seconds",
        type=int,
        default=EventLimits.max_event_age_seconds,
        help="event time may trail the record's Kafka timestamp by at most this much",
    )


def streaming_job_config(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> StreamingJobConfig:
    """Build the shared config from parsed flags and the Kafka credentials in the environment; raises
    ConfigError naming the bad flag or variable."""
    spark_conf: dict[str, str] = {}
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--spark-conf {item!r}: expected KEY=VALUE")
        spark_conf[key] = value
    return StreamingJobConfig(
        query_name=args.query_name,
        bootstrap_servers=args.bootstrap_servers,
        checkpoint_dir=args.checkpoint_dir,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        master=args.master,
        trigger_interval=args.trigger_interval,
        starting_offsets=args.starting_offsets,
        starting_timestamp_ms=args.starting_timestamp_ms,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        accept_data_loss=args.accept_data_loss,
        shuffle_partitions=args.shuffle_partitions,
        fetch_max_wait_ms=args.kafka_fetch_max_wait_ms,
        extra_jars=tuple(jar for jar in args.extra_jars.split(",") if jar),
        spark_conf=spark_conf,
        shadow_group_prefix=None if args.no_shadow_group else args.shadow_group_prefix,
        dead_letter_topic=args.dead_letter_topic,
        event_limits=EventLimits(
            max_event_bytes=args.max_event_bytes,
            max_event_future_seconds=args.max_event_future_seconds,
            max_event_age_seconds=args.max_event_age_seconds,
        ),
        kafka_security=KafkaSecurity.from_environment(os.environ if environ is None else environ),
    )
