"""Typed, frozen exporter configuration parsed from flags, with environment-variable defaults.

Every flag `--some-flag` also reads its default from `STREAMSTACK_LAG_SOME_FLAG` (repeatable flags take a
comma-separated list there). How to log in to Kafka comes only from the environment, from the variables every
client of ours reads (`contracts.kafka_security`: `STREAMSTACK_KAFKA_SECURITY_PROTOCOL`, `..._SASL_MECHANISM`,
`..._SASL_JAAS_CONFIG`, `..._SSL_CA_FILE`), so credentials never show up in a process listing. Errors name
the flag or the variable.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contracts.errors import ConfigError
from contracts.kafka_security import (
    CA_FILE_VARIABLE,
    JAAS_VARIABLE,
    MECHANISM_VARIABLE,
    PROTOCOL_VARIABLE,
    KafkaSecurity,
)
from contracts.shadow_groups import SHADOW_GROUP_PREFIX
from monitoring.lag_exporter.postgres_source import (
    PostgresSourceConfig,
    add_source_arguments,
    source_config_from_args,
)

ENV_PREFIX = "STREAMSTACK_LAG_"
Granularity = Literal["partition", "topic"]
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class CheckpointDir:
    """A Spark checkpoint to read: a query checkpoint, or a root holding several query checkpoints."""

    name: str
    path: Path


def _compile(flag: str, patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            raise ConfigError(f"{flag} {pattern!r}: not a regular expression ({error})") from None
    return tuple(compiled)


@dataclass(frozen=True)
class NameFilter:
    """A name passes when it fully matches an allow pattern (or there are none) and no deny pattern."""

    allow: tuple[re.Pattern[str], ...] = ()
    deny: tuple[re.Pattern[str], ...] = ()

    @classmethod
    def of(cls, allow: Sequence[str] = (), deny: Sequence[str] = (), what: str = "group") -> NameFilter:
        """Compile the patterns; a bad one raises ConfigError naming `--<what>-allow` or `--<what>-deny`."""
        return cls(_compile(f"--{what}-allow", allow), _compile(f"--{what}-deny", deny))

    def __call__(self, name: str) -> bool:
        if self.allow and not any(pattern.fullmatch(name) for pattern in self.allow):
            return False
        return not any(pattern.fullmatch(name) for pattern in self.deny)


@dataclass(frozen=True)
class ExporterConfig:
    bootstrap_servers: str
    listen_host: str = "127.0.0.1"
    listen_port: int = 9308
    refresh_interval: float = 10.0
    window: float = 300.0
    kafka_timeout: float = 10.0
    granularity: Granularity = "partition"
    shadow_prefix: str = SHADOW_GROUP_PREFIX
    groups: NameFilter = field(default_factory=NameFilter)
    topics: NameFilter = field(default_factory=NameFilter)
    checkpoints: tuple[CheckpointDir, ...] = ()
    include_groups: bool = True
    commit_log: bool = True
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    log_level: str = "INFO"
    source: PostgresSourceConfig | None = None  # the CDC replication slot (--postgres-host)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError("--bootstrap-servers must not be empty")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"--listen port {self.listen_port}: not a TCP port")
        if not self.refresh_interval > 0:
            raise ConfigError(f"--refresh-interval {self.refresh_interval}: must be greater than 0")
        if self.window < 2 * self.refresh_interval:
            raise ConfigError(
                f"--window {self.window}: must be at least twice --refresh-interval ({self.refresh_interval})"
            )
        if not self.kafka_timeout > 0:
            raise ConfigError(f"--kafka-timeout {self.kafka_timeout}: must be greater than 0")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"--log-level {self.log_level!r}: expected DEBUG, INFO, WARNING or ERROR")
        if self.granularity not in ("partition", "topic"):
            raise ConfigError(f"--granularity {self.granularity!r}: expected 'partition' or 'topic'")
        names = [checkpoint.name for checkpoint in self.checkpoints]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ConfigError(f"--checkpoint-dir: name {duplicates[0]!r} given more than once")

    def is_shadow(self, group: str) -> bool:
        return bool(self.shadow_prefix) and group.startswith(self.shadow_prefix)


def _number(flag: str) -> Any:
    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: not a number") from None

    return parse


def parse_listen(text: str) -> tuple[str, int]:
    """'HOST:PORT' or ':PORT' (meaning 127.0.0.1) -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9308")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port_text)


def parse_checkpoint(text: str) -> CheckpointDir:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"--checkpoint-dir {text!r}: expected NAME=PATH")
    if not _NAME.match(name):
        raise ConfigError(f"--checkpoint-dir {text!r}: NAME may use letters, digits, '.', '_' and '-'")
    return CheckpointDir(name, Path(path))


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    def default(flag: str, fallback: str | None) -> str | None:
        return env.get(_env_name(flag), fallback)

    def default_list(flag: str) -> list[str]:
        value = env.get(_env_name(flag), "")
        return [item.strip() for item in value.split(",") if item.strip()]

    parser = argparse.ArgumentParser(
        prog="python -m monitoring.lag_exporter",
        description=(
            "Export consumer lag of Kafka consumer groups, streamstack shadow groups and Spark checkpoints "
            f"to Prometheus. Every flag also reads {ENV_PREFIX}<FLAG> from the environment; the Kafka login "
            f"comes from {PROTOCOL_VARIABLE}, {MECHANISM_VARIABLE}, {JAAS_VARIABLE} and {CA_FILE_VARIABLE}, "
            "as for the jobs."
        ),
    )
    parser.add_argument(
        "--bootstrap-servers", default=default("--bootstrap-servers", None), help="Kafka bootstrap servers"
    )
    parser.add_argument(
        "--listen", default=default("--listen", "127.0.0.1:9308"), help="HOST:PORT to serve /metrics on"
    )
    for flag, fallback, meaning in (
        ("--refresh-interval", "10", "seconds between two reads of Kafka and the checkpoints"),
        ("--window", "300", "seconds of history the status and the consumption rate are evaluated over"),
        ("--kafka-timeout", "10", "seconds a Kafka request may take before the collection counts as failed"),
    ):
        parser.add_argument(
            flag, type=_number(flag), default=default(flag, fallback), help=f"{meaning} (default {fallback})"
        )
    parser.add_argument(
        "--granularity",
        choices=("partition", "topic"),
        default=default("--granularity", "partition"),
        help="'topic' sums lag and takes the max seconds per topic, dropping the partition label",
    )
    parser.add_argument(
        "--shadow-prefix",
        default=default("--shadow-prefix", SHADOW_GROUP_PREFIX),
        help=f'groups whose id starts with this are labelled source="shadow" (default {SHADOW_GROUP_PREFIX})',
    )
    for what in ("group", "topic"):
        for verb in ("allow", "deny"):
            flag = f"--{what}-{verb}"
            parser.add_argument(
                flag,
                action="append",
                default=None,
                metavar="REGEX",
                help=f"{verb} {what}s whose name fully matches REGEX (repeatable)",
            )
    parser.add_argument(
        "--checkpoint-dir",
        action="append",
        default=None,
        metavar="NAME=PATH",
        help="a Spark query checkpoint, or a directory of query checkpoints, to read (repeatable)",
    )
    parser.add_argument(
        "--no-groups",
        action="store_true",
        default=default("--no-groups", "") in ("1", "true", "yes"),
        help="do not export Kafka consumer groups (only checkpoints)",
    )
    parser.add_argument(
        "--no-commit-log",
        action="store_true",
        default=default("--no-commit-log", "") in ("1", "true", "yes"),
        help="do not read __consumer_offsets for commit times (STALL then cannot be told from STOP)",
    )
    parser.add_argument("--log-level", default=default("--log-level", "INFO"))
    add_source_arguments(parser, env, ENV_PREFIX)
    parser.set_defaults(
        env_lists={
            flag: default_list(flag)
            for flag in (
                "--group-allow",
                "--group-deny",
                "--topic-allow",
                "--topic-deny",
                "--checkpoint-dir",
            )
        }
    )
    return parser


def parse_args(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> ExporterConfig:
    """Parse flags (falling back to the environment) into a validated config; raise ConfigError."""
    environment = os.environ if env is None else env
    parser = build_parser(environment)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code == 0:
            raise
        raise ConfigError("invalid command line (see the message above)") from None
    return config_from_args(args, environment)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> ExporterConfig:
    lists: dict[str, list[str]] = args.env_lists

    def listed(flag: str, value: list[str] | None) -> list[str]:
        return value if value is not None else lists[flag]

    if not args.bootstrap_servers:
        raise ConfigError(f"--bootstrap-servers is required (or set {_env_name('--bootstrap-servers')})")
    host, port = parse_listen(args.listen)
    security = KafkaSecurity.from_environment(env)
    return ExporterConfig(
        bootstrap_servers=args.bootstrap_servers,
        listen_host=host,
        listen_port=port,
        refresh_interval=float(args.refresh_interval),
        window=float(args.window),
        kafka_timeout=float(args.kafka_timeout),
        granularity=args.granularity,
        shadow_prefix=args.shadow_prefix,
        groups=NameFilter.of(
            listed("--group-allow", args.group_allow), listed("--group-deny", args.group_deny), "group"
        ),
        topics=NameFilter.of(
            listed("--topic-allow", args.topic_allow), listed("--topic-deny", args.topic_deny), "topic"
        ),
        checkpoints=tuple(parse_checkpoint(item) for item in listed("--checkpoint-dir", args.checkpoint_dir)),
        include_groups=not args.no_groups,
        commit_log=not args.no_commit_log,
        security=security,
        log_level=args.log_level,
        source=source_config_from_args(args),
    )
