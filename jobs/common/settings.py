"""A job's own settings, declared once.

Each field of a job's frozen config says its flag, default and help (`topic_setting`, `duration_setting`);
from those `JobSettings` builds the job's command line on top of the flags every job shares, checks each
value (a ConfigError names the flag) and lists the topics the job reads and writes (`topics_by_flag`).
A job adds only the checks that relate settings to each other, in `check()`:

    @dataclass(frozen=True)
    class SessionJobConfig(JobSettings):
        input_topic: str = topic_setting("--input-topic", "page-views", "page views to group into sessions")
        session_gap: str = duration_setting("--session-gap", "30 seconds", "inactivity that ends a session")

    config = SessionJobConfig.parse_args(argv, name="sessionization", description="...")
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from jobs.common.config import (
    StreamingJobConfig,
    add_topic_argument,
    parse_job_config,
    require_duration,
    require_topic,
    streaming_job_parser,
)

_TOPIC = "topic"
_DURATION = "duration"

SettingsT = TypeVar("SettingsT", bound="JobSettings")


def topic_setting(flag: str, default: str, help: str, *, off_flag: str = "", off_help: str = "") -> Any:
    """A topic the job reads or writes. With `off_flag` the output can be turned off: the command line
    has it on (`default`), a config built in code has it off (None) unless given."""
    metadata = {"flag": flag, "kind": _TOPIC, "default": default, "help": help, "off_flag": off_flag}
    return field(default=None if off_flag else default, metadata={**metadata, "off_help": off_help})


def duration_setting(flag: str, default: str, help: str) -> Any:
    """A Spark interval such as '10 seconds'."""
    return field(
        default=default, metadata={"flag": flag, "kind": _DURATION, "default": default, "help": help}
    )


@dataclass(frozen=True)
class JobSettings:
    """Base of every job's config: the settings every job shares, then the subclass's own."""

    streaming: StreamingJobConfig

    def __post_init__(self) -> None:
        for flag, topic in self.topics_by_flag().items():
            require_topic(flag, topic)
        for setting in self._settings():
            if setting.metadata["kind"] == _DURATION:
                require_duration(setting.metadata["flag"], getattr(self, setting.name))
        self.check()

    def check(self) -> None:
        """Checks that relate settings to each other; raise ConfigError naming a flag."""

    def topics_by_flag(self) -> dict[str, str]:
        """The topics the job reads and writes (besides dead letters), by flag; only those turned on."""
        return {
            setting.metadata["flag"]: getattr(self, setting.name)
            for setting in self._settings()
            if setting.metadata["kind"] == _TOPIC and getattr(self, setting.name) is not None
        }

    @classmethod
    def _settings(cls) -> Iterator[Field[Any]]:
        return (setting for setting in fields(cls) if "flag" in setting.metadata)

    @classmethod
    def parse_args(cls: type[SettingsT], argv: list[str] | None, *, name: str, description: str) -> SettingsT:
        """The job's command line: the shared flags (`--query-name` defaults to `name`) and its settings;
        a bad value exits like a usage error (status 2), naming the flag."""
        parser = streaming_job_parser(name, description, query_name=name)
        for setting in cls._settings():
            meta = setting.metadata
            if meta["kind"] == _TOPIC:
                add_topic_argument(parser, meta["flag"], meta["default"], meta["help"], dest=setting.name)
            else:
                parser.add_argument(
                    meta["flag"], dest=setting.name, default=meta["default"], help=meta["help"]
                )
            if meta.get("off_flag"):
                parser.add_argument(
                    meta["off_flag"], dest=f"{setting.name}_off", action="store_true", help=meta["off_help"]
                )

        def build(args: argparse.Namespace, streaming: StreamingJobConfig) -> SettingsT:
            values: dict[str, Any] = {}
            for setting in cls._settings():
                value = getattr(args, setting.name)
                if setting.metadata["kind"] == _DURATION:
                    value = value.strip()
                if setting.metadata.get("off_flag") and getattr(args, f"{setting.name}_off"):
                    value = None
                values[setting.name] = value
            return cls(streaming, **values)

        return parse_job_config(parser, argv, build)
