"""Typed job configuration, parsed from the command line the same way locally and in the cluster.

Only the master URL, addresses and paths differ between `streamstack local up` and a SparkApplication:
both pass these flags to the same entry point.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

_DURATION = re.compile(r"^\d+ (millisecond|second|minute|hour|day)s?$")
_STARTING_OFFSETS = ("earliest", "latest")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the flag."""


@dataclass(frozen=True)
class StreamingJobConfig:
    """What every streaming job needs: where to read, where to write, where to checkpoint, how to report."""

    query_name: str
    bootstrap_servers: str
    input_topic: str
    output_topic: str
    checkpoint_dir: str
    metrics_port: int
    metrics_host: str = "127.0.0.1"
    master: str | None = None
    trigger_interval: str = "2 seconds"
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    shuffle_partitions: int = 4
    extra_jars: tuple[str, ...] = ()
    spark_conf: dict[str, str] = field(default_factory=dict)
    shadow_group: str | None = None

    def __post_init__(self) -> None:
        for flag, value in (
            ("--query-name", self.query_name),
            ("--bootstrap-servers", self.bootstrap_servers),
            ("--input-topic", self.input_topic),
            ("--output-topic", self.output_topic),
            ("--checkpoint-dir", self.checkpoint_dir),
        ):
            if not value.strip():
                raise ConfigError(f"{flag} must not be empty")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.query_name):
            raise ConfigError(f"--query-name {self.query_name!r}: use letters, digits, '.', '_' or '-'")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port {self.metrics_port}: not a TCP port")
        require_duration("--trigger-interval", self.trigger_interval)
        if self.starting_offsets not in _STARTING_OFFSETS:
            raise ConfigError(
                f"--starting-offsets {self.starting_offsets!r}: "
                f"expected one of {', '.join(_STARTING_OFFSETS)}"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigError(f"--max-offsets-per-trigger {self.max_offsets_per_trigger}: must be at least 1")
        if self.shadow_group is not None and not self.shadow_group.strip():
            raise ConfigError("--shadow-group must not be empty")
        if self.shuffle_partitions < 1:
            raise ConfigError(f"--shuffle-partitions {self.shuffle_partitions}: must be at least 1")


def require_duration(flag: str, value: str) -> str:
    """Accept Spark interval strings such as '10 seconds' or '1 minute'."""
    if not _DURATION.match(value.strip()):
        raise ConfigError(f"{flag} {value!r}: expected a duration such as '10 seconds' or '1 minute'")
    return value.strip()


def add_streaming_job_arguments(parser: argparse.ArgumentParser, *, query_name: str) -> None:
    """Flags shared by every job; each job adds its own on top."""
    parser.add_argument("--query-name", default=query_name, help="stable name of the streaming query")
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers, host:port[,...]")
    parser.add_argument("--input-topic", required=True)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--checkpoint-dir", required=True, help="directory or URI of the query checkpoint")
    parser.add_argument("--metrics-port", type=int, default=9400, help="port of the Prometheus endpoint")
    parser.add_argument("--metrics-host", default="127.0.0.1", help="address the Prometheus endpoint binds")
    parser.add_argument("--master", default=None, help="Spark master URL; unset under spark-submit")
    parser.add_argument("--trigger-interval", default="2 seconds")
    parser.add_argument("--starting-offsets", default="earliest", help="where a new checkpoint starts")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--extra-jars", default="", help="comma-separated jars (local mode only)")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    parser.add_argument(
        "--shadow-group",
        default=None,
        help="consumer group that gets each batch's end offsets (default streamstack-<query name>)",
    )
    parser.add_argument(
        "--no-shadow-group", action="store_true", help="do not commit processed offsets to a consumer group"
    )


def streaming_job_config(args: argparse.Namespace) -> StreamingJobConfig:
    """Build the shared config from parsed flags; raises ConfigError naming the bad flag."""
    spark_conf: dict[str, str] = {}
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--spark-conf {item!r}: expected KEY=VALUE")
        spark_conf[key] = value
    return StreamingJobConfig(
        query_name=args.query_name,
        bootstrap_servers=args.bootstrap_servers,
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        checkpoint_dir=args.checkpoint_dir,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        master=args.master,
        trigger_interval=args.trigger_interval,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        shuffle_partitions=args.shuffle_partitions,
        extra_jars=tuple(jar for jar in args.extra_jars.split(",") if jar),
        spark_conf=spark_conf,
        shadow_group=None
        if args.no_shadow_group
        else (args.shadow_group or f"streamstack-{args.query_name}"),
    )
