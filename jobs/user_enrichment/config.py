"""The user-enrichment job's own settings: flags, defaults and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import ConfigError
from jobs.common.settings import JobSettings, topic_setting


@dataclass(frozen=True)
class EnrichmentJobConfig(JobSettings):
    views_topic: str = topic_setting("--views-topic", "page-views", "page views to enrich")
    users_topic: str = topic_setting("--users-topic", "users", "compacted changelog of user profiles")
    output_topic: str = topic_setting("--output-topic", "page-views-enriched", "enriched page views")

    def check(self) -> None:
        if self.views_topic == self.users_topic:
            raise ConfigError(f"--users-topic {self.users_topic!r}: must differ from --views-topic")
