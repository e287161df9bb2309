"""The pipeline the stack deploys by default: its topics and its streaming jobs.

This mirrors `streamstack/local/pipeline.py` (what `streamstack local up` runs), without importing it: `infra`
refers to jobs by image, module and name only. `tests/infra/test_catalogue.py` checks that both describe the
same topics and the same job arguments, so the cluster runs the pipeline that is tested locally.

A job's entry says which of its topic flags it reads and writes (the KafkaUser's ACLs come from that) and
whether it keeps state on executors (aggregations, joins, sessions): a stateful job needs its checkpoint
volume on every executor, a stateless one only on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DAY_MS = 24 * 60 * 60 * 1000
DEAD_LETTER_FLAG = "--dead-letter-topic"
DEAD_LETTER_TOPIC = "dead-letters"
# Small segments and a short compaction lag keep the changelogs near table size; the CDC jobs re-read them
# every batch (the same settings as the local pipeline).
CHANGELOG_CONFIG = {"segment.ms": "60000", "min.compaction.lag.ms": "60000", "delete.retention.ms": "3600000"}


@dataclass(frozen=True)
class TopicDefinition:
    """A topic of the pipeline: `cleanup_policy` compact for changelogs and views (latest value per key)."""

    name: str
    partitions: int
    retention_ms: int | None = None
    cleanup_policy: str = "delete"
    extra_config: Mapping[str, str] = field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        config = {"cleanup.policy": self.cleanup_policy, **self.extra_config}
        if self.retention_ms is not None:
            config["retention.ms"] = str(self.retention_ms)
        return config


@dataclass(frozen=True)
class JobDefinition:
    """A PySpark job of `jobs/<module>/`: its topic flags (flag -> topic), which flags it reads and writes,
    and its own settings (extra flags, verbatim). Every job also writes `--dead-letter-topic`."""

    name: str
    module: str
    stateful: bool
    topics: tuple[tuple[str, str], ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    settings: tuple[str, ...] = ()


TOPICS: tuple[TopicDefinition, ...] = (
    TopicDefinition("page-views", partitions=4, retention_ms=DAY_MS),
    TopicDefinition("page-views-per-url", partitions=4, cleanup_policy="compact"),
    TopicDefinition("page-view-windows", partitions=4, cleanup_policy="compact"),
    TopicDefinition("page-views-late", partitions=1, retention_ms=7 * DAY_MS),
    TopicDefinition("user-sessions", partitions=4, cleanup_policy="compact"),
    TopicDefinition("ad-impressions", partitions=4, retention_ms=DAY_MS),
    TopicDefinition("ad-clicks", partitions=4, retention_ms=DAY_MS),
    TopicDefinition("ad-attributions", partitions=4, cleanup_policy="compact"),
    TopicDefinition("users", partitions=2, cleanup_policy="compact", extra_config=CHANGELOG_CONFIG),
    TopicDefinition("orders", partitions=2, cleanup_policy="compact", extra_config=CHANGELOG_CONFIG),
    TopicDefinition("user-view", partitions=2, cleanup_policy="compact"),
    TopicDefinition(
        "page-views-enriched", partitions=4, retention_ms=DAY_MS, cleanup_policy="compact,delete"
    ),
    TopicDefinition(DEAD_LETTER_TOPIC, partitions=1, retention_ms=7 * DAY_MS),
)

JOBS: tuple[JobDefinition, ...] = (
    JobDefinition(
        "clickstream-windows",
        "clickstream_windows",
        stateful=True,
        topics=(
            ("--input-topic", "page-views"),
            ("--output-topic", "page-views-per-url"),
            ("--windows-topic", "page-view-windows"),
            ("--late-topic", "page-views-late"),
        ),
        reads=("--input-topic",),
        writes=("--output-topic", "--windows-topic", "--late-topic"),
        settings=(
            "--window-duration",
            "10 seconds",
            "--hop-window-duration",
            "30 seconds",
            "--hop-slide",
            "10 seconds",
            "--session-gap",
            "30 seconds",
            "--watermark-delay",
            "5 seconds",
        ),
    ),
    JobDefinition(
        "sessionization",
        "sessionization",
        stateful=True,
        topics=(("--input-topic", "page-views"), ("--output-topic", "user-sessions")),
        reads=("--input-topic",),
        writes=("--output-topic",),
        settings=("--session-gap", "30 seconds", "--watermark-delay", "10 seconds"),
    ),
    JobDefinition(
        "ad-attribution",
        "ad_attribution",
        stateful=True,
        topics=(
            ("--impressions-topic", "ad-impressions"),
            ("--clicks-topic", "ad-clicks"),
            ("--output-topic", "ad-attributions"),
        ),
        reads=("--impressions-topic", "--clicks-topic"),
        writes=("--output-topic",),
        settings=("--attribution-window", "30 seconds", "--watermark-delay", "10 seconds"),
    ),
    # A stream-table join done per batch against the users topic read as a table: no state on executors.
    JobDefinition(
        "user-enrichment",
        "user_enrichment",
        stateful=False,
        topics=(
            ("--views-topic", "page-views"),
            ("--users-topic", "users"),
            ("--output-topic", "page-views-enriched"),
        ),
        reads=("--views-topic", "--users-topic"),
        writes=("--output-topic",),
    ),
    # foreachBatch recomputes the view from both changelogs and reads back the view topic to write only the
    # difference: it reads its own output, and keeps no Spark state.
    JobDefinition(
        "user-view",
        "user_view",
        stateful=False,
        topics=(("--users-topic", "users"), ("--orders-topic", "orders"), ("--output-topic", "user-view")),
        reads=("--users-topic", "--orders-topic", "--output-topic"),
        writes=("--output-topic",),
    ),
)


def topic_definitions() -> dict[str, TopicDefinition]:
    return {topic.name: topic for topic in TOPICS}


def job_definitions() -> dict[str, JobDefinition]:
    return {job.name: job for job in JOBS}
