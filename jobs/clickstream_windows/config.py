"""The clickstream-windows job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.durations import duration_seconds
from contracts.errors import ConfigError
from jobs.common.settings import JobSettings, duration_setting, topic_setting


@dataclass(frozen=True)
class WindowJobConfig(JobSettings):
    input_topic: str = topic_setting("--input-topic", "page views to count")
    output_topic: str = topic_setting("--output-topic", "compacted topic of window counts")
    # Optional outputs: the catalogue turns them on; a config built in code has them off unless given.
    windows_topic: str | None = topic_setting(
        "--windows-topic", "compacted topic of counts per url and user", optional=True
    )
    late_topic: str | None = topic_setting(
        "--late-topic", "views dropped as late, for corrections", optional=True
    )
    window_duration: str = duration_setting("--window-duration", "tumbling window length")
    hop_window_duration: str = duration_setting("--hop-window-duration", "hopping window length")
    hop_slide: str = duration_setting("--hop-slide", "a hopping window starts this often")
    session_gap: str = duration_setting("--session-gap", "inactivity that ends a session")
    watermark_delay: str = duration_setting("--watermark-delay", "how late a row may be")

    def check(self) -> None:
        if duration_seconds(self.hop_slide) > duration_seconds(self.hop_window_duration):
            raise ConfigError(
                f"--hop-slide {self.hop_slide!r}: must not exceed --hop-window-duration "
                f"{self.hop_window_duration!r}"
            )

    def query_name(self, kind: str) -> str:
        """`<main query name>.<kind>`: tumbling, hopping, sessions, late."""
        return f"{self.streaming.query_name}.{kind}"
