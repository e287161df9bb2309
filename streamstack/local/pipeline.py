"""What the local pipeline runs: its topics, producers and streaming jobs.

To add a job: put its module in `jobs/<name>/` with a `__main__` taking the shared streaming flags, then add
a `JobSpec` here (and its topics). `streamstack local up` starts it with its own checkpoint directory and
metrics port, and Prometheus scrapes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamstack.local.kafka import TopicSpec

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class JobSpec:
    """A PySpark streaming job run as `python -m <module>` with the shared streaming flags."""

    name: str
    module: str
    input_topic: str
    output_topic: str
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProducerSpec:
    """A synthetic event producer run as `python -m <module>` with bootstrap servers, topic and rate."""

    name: str
    module: str
    topic: str
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    topics: tuple[TopicSpec, ...]
    producers: tuple[ProducerSpec, ...]
    jobs: tuple[JobSpec, ...]


def clickstream_pipeline(window_duration: str = "10 seconds", watermark_delay: str = "5 seconds") -> Pipeline:
    return Pipeline(
        topics=(
            TopicSpec("page-views", partitions=4, retention_ms=DAY_MS),
            TopicSpec("page-views-per-url", partitions=4, compact=True),
        ),
        producers=(ProducerSpec("clickstream-producer", "jobs.producers.clickstream", "page-views"),),
        jobs=(
            JobSpec(
                "clickstream-windows",
                "jobs.clickstream_windows",
                input_topic="page-views",
                output_topic="page-views-per-url",
                extra_args=("--window-duration", window_duration, "--watermark-delay", watermark_delay),
            ),
        ),
    )
