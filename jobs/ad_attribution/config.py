"""The ad-attribution job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import JobSettings, duration_setting, topic_setting


@dataclass(frozen=True)
class AttributionJobConfig(JobSettings):
    impressions_topic: str = topic_setting("--impressions-topic", "ad impressions")
    clicks_topic: str = topic_setting("--clicks-topic", "clicks on ad impressions")
    output_topic: str = topic_setting("--output-topic", "compacted topic of one attribution per impression")
    attribution_window: str = duration_setting(
        "--attribution-window",
        "a click counts if it comes at most this long after the impression",
    )
    watermark_delay: str = duration_setting("--watermark-delay", "how late an event may be")
