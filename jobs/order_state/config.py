"""The order-state job's own settings: flags, help and checks (jobs.common.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.common.settings import JobSettings, topic_setting


@dataclass(frozen=True)
class OrderStateJobConfig(JobSettings):
    input_topic: str = topic_setting("--input-topic", "order events, kept forever, keyed by order id")
    output_topic: str = topic_setting("--output-topic", "compacted topic of each order's current state")
