"""The user-enrichment job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import JobSettings, topic_setting


@dataclass(frozen=True)
class EnrichmentJobConfig(JobSettings):
    views_topic: str = topic_setting("--views-topic", "page views to enrich")
    users_topic: str = topic_setting("--users-topic", "compacted changelog of user profiles")
    output_topic: str = topic_setting("--output-topic", "enriched page views")
