"""The sessionization job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import JobSettings, duration_setting, topic_setting


@dataclass(frozen=True)
class SessionJobConfig(JobSettings):
    input_topic: str = topic_setting("--input-topic", "page views to group into sessions")
    output_topic: str = topic_setting("--output-topic", "compacted topic of completed sessions")
    session_gap: str = duration_setting("--session-gap", "inactivity that ends a session")
    watermark_delay: str = duration_setting("--watermark-delay", "how late a view may be")
