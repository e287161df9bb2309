"""The ad-attribution job's own settings: flags, defaults and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import ConfigError
from jobs.common.settings import JobSettings, duration_setting, topic_setting


@dataclass(frozen=True)
class AttributionJobConfig(JobSettings):
    impressions_topic: str = topic_setting("--impressions-topic", "ad-impressions", "ad impressions")
    clicks_topic: str = topic_setting("--clicks-topic", "ad-clicks", "clicks on ad impressions")
    output_topic: str = topic_setting(
        "--output-topic", "ad-attributions", "compacted topic of one attribution per impression"
    )
    attribution_window: str = duration_setting(
        "--attribution-window",
        "30 seconds",
        "a click counts if it comes at most this long after the impression",
    )
    watermark_delay: str = duration_setting("--watermark-delay", "10 seconds", "how late an event may be")

    def check(self) -> None:
        if self.impressions_topic == self.clicks_topic:
            raise ConfigError(f"--clicks-topic {self.clicks_topic!r}: must differ from --impressions-topic")
