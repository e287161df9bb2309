"""The clickstream-windows job's own settings: flags, defaults and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import ConfigError
from jobs.common.config import duration_seconds
from jobs.common.settings import JobSettings, duration_setting, topic_setting


@dataclass(frozen=True)
class WindowJobConfig(JobSettings):
    input_topic: str = topic_setting("--input-topic", "page-views", "page views to count")
    output_topic: str = topic_setting(
        "--output-topic", "page-views-per-url", "compacted topic of window counts"
    )
    # Turned on by the command line, off (None) in a config built in code unless given.
    windows_topic: str | None = topic_setting(
        "--windows-topic",
        "page-view-windows",
        "compacted topic of counts per url and user",
        off_flag="--no-windows-topic",
        off_help="do not count per url and user by window kind",
    )
    late_topic: str | None = topic_setting(
        "--late-topic",
        "page-views-late",
        "views dropped as late, for corrections",
        off_flag="--no-late-topic",
        off_help="do not route late views",
    )
    window_duration: str = duration_setting("--window-duration", "10 seconds", "tumbling window length")
    hop_window_duration: str = duration_setting(
        "--hop-window-duration", "30 seconds", "hopping window length"
    )
    hop_slide: str = duration_setting("--hop-slide", "10 seconds", "a hopping window starts this often")
    session_gap: str = duration_setting("--session-gap", "30 seconds", "inactivity that ends a session")
    watermark_delay: str = duration_setting("--watermark-delay", "5 seconds", "how late a row may be")

    def check(self) -> None:
        if duration_seconds(self.hop_slide) > duration_seconds(self.hop_window_duration):
            raise ConfigError(
                f"--hop-slide {self.hop_slide!r}: must not exceed --hop-window-duration "
                f"{self.hop_window_duration!r}"
            )

    def query_name(self, kind: str) -> str:
        """`<main query name>.<kind>`: tumbling, hopping, sessions, late."""
        return f"{self.streaming.query_name}.{kind}"
