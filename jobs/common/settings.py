"""A job's own settings, declared once.

Each field of a job's frozen config says its flag and help (`topic_setting`, `duration_setting`); from those
`JobSettings` builds the job's command line on top of the flags every job shares, checks each value (a
ConfigError names the flag; no two topic flags may name one topic) and lists the topics the job reads and
writes (`topics_by_flag`). The values themselves live in one place, the pipeline catalogue (pipeline.yaml:
`jobs.<name>.topics` and `.settings`), which the local runtime and the chart both pass on the command line;
so a job has no defaults of its own for them. A job adds only the checks that relate settings to each
other, in `check()`:

    @dataclass(frozen=True)
    class SessionJobConfig(JobSettings):
        input_topic: str = topic_setting("--input-topic", "page views to group into sessions")
        session_gap: str = duration_setting("--session-gap", "inactivity that ends a session")

    config = SessionJobConfig.parse_args(argv, name="sessionization", description="...")
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from contracts.errors import ConfigError
from jobs.common.config import (
    StreamingJobConfig,
    parse_job_config,
    require_duration,
    require_topic,
    streaming_job_parser,
)

_TOPIC = "topic"
_DURATION = "duration"

SettingsT = TypeVar("SettingsT", bound="JobSettings")


def topic_setting(flag: str, help: str, *, optional: bool = False) -> Any:
    """A topic the job reads or writes: a required flag, or with `optional` an extra output that is off
    (None) unless given."""
    metadata = {"flag": flag, "kind": _TOPIC, "help": help, "optional": optional}
    if optional:
        return field(default=None, kw_only=True, metadata=metadata)
    return field(kw_only=True, metadata=metadata)


def duration_setting(flag: str, help: str) -> Any:
    """A Spark interval such as '10 seconds'."""
    return field(kw_only=True, metadata={"flag": flag, "kind": _DURATION, "help": help})


@dataclass(frozen=True)
class JobSettings:
    """Base of every job's config: the settings every job shares, then the subclass's own."""

    streaming: StreamingJobConfig

    def __post_init__(self) -> None:
        flag_of_topic: dict[str, str] = {}
        for flag, topic in self.topics_by_flag().items():
            require_topic(flag, topic)
            if topic in flag_of_topic:
                raise ConfigError(f"{flag} {topic!r}: must differ from {flag_of_topic[topic]}")
            flag_of_topic[topic] = flag
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
        a bad or missing value exits like a usage error (status 2), naming the flag."""
        parser = streaming_job_parser(name, description, query_name=name)
        for setting in cls._settings():
            meta = setting.metadata
            required = meta["kind"] == _DURATION or not meta["optional"]
            parser.add_argument(meta["flag"], dest=setting.name, required=required, help=meta["help"])

        def build(args: argparse.Namespace, streaming: StreamingJobConfig) -> SettingsT:
            values: dict[str, Any] = {
                setting.name: getattr(args, setting.name) for setting in cls._settings()
            }
            for setting in cls._settings():
                if setting.metadata["kind"] == _DURATION:
                    values[setting.name] = values[setting.name].strip()
            return cls(streaming, **values)

        return parse_job_config(parser, argv, build)
