"""The user-view job's own settings: flags, defaults and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.errors import ConfigError
from jobs.common.settings import JobSettings, topic_setting


@dataclass(frozen=True)
class UserViewJobConfig(JobSettings):
    users_topic: str = topic_setting("--users-topic", "users", "compacted changelog of user profiles")
    orders_topic: str = topic_setting("--orders-topic", "orders", "compacted changelog of orders")
    output_topic: str = topic_setting("--output-topic", "user-view", "compacted topic of the per-user view")

    def check(self) -> None:
        topics = (self.users_topic, self.orders_topic, self.output_topic)
        if len(set(topics)) != len(topics):
            raise ConfigError(
                f"--users-topic, --orders-topic and --output-topic must differ, got {', '.join(topics)}"
            )
