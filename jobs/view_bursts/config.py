"""The view-bursts job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contracts.durations import duration_seconds
from contracts.errors import ConfigError
from jobs.common.settings import JobSettings, duration_setting, topic_setting


def _count_setting(flag: str, help: str) -> Any:
    """A required whole-number flag, kept as text like every setting and checked in `check()`."""
    return field(kw_only=True, metadata={"flag": flag, "kind": "count", "help": help, "optional": False})


@dataclass(frozen=True)
class BurstJobConfig(JobSettings):
    input_topic: str = topic_setting("--input-topic", "page views to look for bursts in")
    output_topic: str = topic_setting("--output-topic", "compacted topic of each user's largest burst")
    alerts_topic: str | None = topic_setting(
        "--alerts-topic", "bursts above --burst-threshold", optional=True
    )
    late_topic: str | None = topic_setting(
        "--late-topic", "views dropped as late, for corrections", optional=True
    )
    window_length: str = duration_setting("--window-length", "views this close in event time share a window")
    watermark_delay: str = duration_setting("--watermark-delay", "how late a view may be")
    state_retention: str = duration_setting(
        "--state-retention", "a user without views for this long (event time) is forgotten"
    )
    burst_threshold: str = _count_setting("--burst-threshold", "a burst of more views than this is an alert")

    def check(self) -> None:
        text = self.burst_threshold.strip()
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(f"--burst-threshold {self.burst_threshold!r}: expected a whole number >= 1")
        if duration_seconds(self.window_length) <= 0:
            raise ConfigError(f"--window-length {self.window_length!r}: must be longer than 0")
        if duration_seconds(self.state_retention) < duration_seconds(self.window_length):
            raise ConfigError(
                f"--state-retention {self.state_retention!r}: must be at least --window-length "
                f"{self.window_length!r}"
            )

    @property
    def threshold(self) -> int:
        return int(self.burst_threshold.strip())

    @property
    def window_ms(self) -> int:
        return round(duration_seconds(self.window_length) * 1000)

    @property
    def retention_ms(self) -> int:
        return round(duration_seconds(self.state_retention) * 1000)

    def query_name(self, kind: str) -> str:
        """`<main query name>.<kind>`: alerts, late."""
        return f"{self.streaming.query_name}.{kind}"
