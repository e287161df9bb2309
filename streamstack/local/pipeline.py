"""What the local pipeline runs: its topics, producers and streaming jobs.

To add a job: put its module in `jobs/<name>/` with a `__main__` taking the shared streaming flags, then add
a `JobSpec` to `streaming_pipeline` (and its topics and producer). `streamstack local up` starts it with its
own checkpoint directory and metrics port, and Prometheus scrapes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamstack.errors import StreamstackError
from streamstack.local.kafka import TopicSpec

DAY_MS = 24 * 60 * 60 * 1000
# Small segments and a short compaction lag so the local log cleaner keeps changelogs near table size; the
# CDC jobs re-read them every batch.
CHANGELOG_CONFIG = {"segment.ms": "60000", "min.compaction.lag.ms": "60000", "delete.retention.ms": "3600000"}


@dataclass(frozen=True)
class JobSpec:
    """A PySpark streaming job run as `python -m <module>` with the shared streaming flags plus `args`
    (its topics and settings), fed by the named producers."""

    name: str
    module: str
    args: tuple[str, ...] = ()
    producers: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProducerSpec:
    """A synthetic event producer run as `python -m <module>` with bootstrap servers, topic and rate;
    `extra_args` come last, so they may override the rate."""

    name: str
    module: str
    topic: str
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    topics: tuple[TopicSpec, ...]
    producers: tuple[ProducerSpec, ...]
    jobs: tuple[JobSpec, ...]

    def only(self, job_names: Sequence[str]) -> Pipeline:
        """The same topics, the chosen jobs and just the producers they need."""
        known = [job.name for job in self.jobs]
        unknown = [name for name in job_names if name not in known]
        if unknown:
            raise StreamstackError(f"--jobs: unknown job {', '.join(unknown)} (jobs: {', '.join(known)})")
        jobs = tuple(job for job in self.jobs if job.name in job_names)
        needed = {producer for job in jobs for producer in job.producers}
        return Pipeline(self.topics, tuple(p for p in self.producers if p.name in needed), jobs)


def streaming_pipeline() -> Pipeline:
    """Every job of the catalogue with the producers that feed it (see each job's runbook docstring)."""
    return Pipeline(
        topics=(
            TopicSpec("page-views", partitions=4, retention_ms=DAY_MS),
            TopicSpec("page-views-per-url", partitions=4, compact=True),
            TopicSpec("page-view-windows", partitions=4, compact=True),
            TopicSpec("page-views-late", partitions=1, retention_ms=7 * DAY_MS),
            TopicSpec("user-sessions", partitions=4, compact=True),
            TopicSpec("ad-impressions", partitions=4, retention_ms=DAY_MS),
            TopicSpec("ad-clicks", partitions=4, retention_ms=DAY_MS),
            TopicSpec("ad-attributions", partitions=4, compact=True),
            TopicSpec("users", partitions=2, compact=True, extra_config=CHANGELOG_CONFIG),
            TopicSpec("orders", partitions=2, compact=True, extra_config=CHANGELOG_CONFIG),
            TopicSpec("user-view", partitions=2, compact=True),
            TopicSpec(
                "page-views-enriched",
                partitions=4,
                retention_ms=DAY_MS,
                extra_config={"cleanup.policy": "compact,delete"},
            ),
            TopicSpec("dead-letters", partitions=1, retention_ms=7 * DAY_MS),
        ),
        producers=(
            ProducerSpec("clickstream-producer", "jobs.producers.clickstream", "page-views"),
            ProducerSpec(
                "ads-producer",
                "jobs.producers.ads",
                "ad-impressions",
                extra_args=("--clicks-topic", "ad-clicks"),
            ),
            # Table changes are rarer than clicks: 20/s whatever --rate says (the last --rate wins).
            ProducerSpec(
                "changelog-producer",
                "jobs.producers.changelog",
                "users",
                extra_args=("--orders-topic", "orders", "--rate", "20"),
            ),
        ),
        jobs=(
            JobSpec(
                "clickstream-windows",
                "jobs.clickstream_windows",
                args=(
                    "--input-topic",
                    "page-views",
                    "--output-topic",
                    "page-views-per-url",
                    "--windows-topic",
                    "page-view-windows",
                    "--late-topic",
                    "page-views-late",
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
                producers=("clickstream-producer",),
            ),
            JobSpec(
                "sessionization",
                "jobs.sessionization",
                args=(
                    "--input-topic",
                    "page-views",
                    "--output-topic",
                    "user-sessions",
                    "--session-gap",
                    "30 seconds",
                    "--watermark-delay",
                    "10 seconds",
                ),
                producers=("clickstream-producer",),
            ),
            JobSpec(
                "ad-attribution",
                "jobs.ad_attribution",
                args=(
                    "--impressions-topic",
                    "ad-impressions",
                    "--clicks-topic",
                    "ad-clicks",
                    "--output-topic",
                    "ad-attributions",
                    "--attribution-window",
                    "30 seconds",
                    "--watermark-delay",
                    "10 seconds",
                ),
                producers=("ads-producer",),
            ),
            JobSpec(
                "user-enrichment",
                "jobs.user_enrichment",
                args=(
                    "--views-topic",
                    "page-views",
                    "--users-topic",
                    "users",
                    "--output-topic",
                    "page-views-enriched",
                ),
                producers=("clickstream-producer", "changelog-producer"),
            ),
            JobSpec(
                "user-view",
                "jobs.user_view",
                args=("--users-topic", "users", "--orders-topic", "orders", "--output-topic", "user-view"),
                producers=("changelog-producer",),
            ),
        ),
    )
