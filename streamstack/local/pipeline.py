"""What the local pipeline runs: the catalogue's topics, producers and streaming jobs (`pipeline.yaml`).

`streamstack local up` starts each job as `python -m jobs.<module>` with the shared streaming flags plus the
catalogue's arguments for it, with its own checkpoint directory and metrics port, and the producers that feed
it. To add a job, add it to `pipeline.yaml`: the cluster (infra/) and this runtime read the same entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from contracts.pipeline import DEAD_LETTER_FLAG, Producer, load_pipeline
from contracts.pipeline import Pipeline as Catalogue
from streamstack.errors import StreamstackError
from streamstack.local.kafka import TopicSpec
from streamstack.paths import REPO_ROOT

DEV_STACK_CONFIG = REPO_ROOT / "Pulumi.dev.yaml"


@dataclass(frozen=True)
class JobSpec:
    """A PySpark streaming job run as `python -m <module>` with the shared streaming flags plus `args`
    (its topics and settings), fed by the named producers."""

    name: str
    module: str
    args: tuple[str, ...] = ()
    producers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    topics: tuple[TopicSpec, ...]
    # Each runs as `python -m <module>` with bootstrap servers, topic and rate, then its `arguments` (which
    # may override the rate).
    producers: tuple[Producer, ...]
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


def local_pipeline(catalogue: Catalogue) -> Pipeline:
    """The catalogue as the local runtime runs it: every job with the producers that feed it."""
    return Pipeline(
        topics=tuple(
            TopicSpec(topic.name, partitions=topic.partitions, extra_config=topic.topic_config())
            for topic in catalogue.topics
        ),
        producers=catalogue.producers,
        jobs=tuple(
            JobSpec(
                job.name,
                job.python_module,
                (DEAD_LETTER_FLAG, catalogue.dead_letter_topic, *job.arguments()),
                job.producers,
            )
            for job in catalogue.jobs
        ),
    )


def streaming_pipeline() -> Pipeline:
    """Every job of the catalogue with the producers that feed it (see each job's runbook docstring)."""
    return local_pipeline(load_pipeline())


def dev_stack_job_arguments(config_path: Path = DEV_STACK_CONFIG) -> tuple[str, ...]:
    """The flags the dev stack's `streamstack:jobDefaults` give every job in the cluster and that the local
    runtime gives its jobs too: `--shuffle-partitions`, which is also the number of each stateful query's
    state partitions (the trigger interval is `local up`'s own flag)."""
    config = yaml.safe_load(config_path.read_text())["config"]
    partitions = config.get("streamstack:jobDefaults", {}).get("shufflePartitions")
    if not isinstance(partitions, int) or partitions < 1:
        raise StreamstackError(
            f"{config_path.name}: streamstack:jobDefaults.shufflePartitions must be a positive integer"
            f" (got {partitions!r})"
        )
    return ("--shuffle-partitions", str(partitions))
