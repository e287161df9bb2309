"""The user-view job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import JobSettings, topic_setting


@dataclass(frozen=True)
class UserViewJobConfig(JobSettings):
    users_topic: str = topic_setting("--users-topic", "compacted changelog of user profiles")
    orders_topic: str = topic_setting("--orders-topic", "compacted changelog of orders")
    output_topic: str = topic_setting("--output-topic", "compacted topic of the per-user view")
