"""Shadow groups: the consumer groups the jobs commit their progress to, so that lag tools can see Spark.

Spark never commits its Kafka offsets. After each batch a job commits the batch's end offsets to the group
`<prefix><query name>` (jobs/common/shadow_group.py); the lag exporter labels groups with the prefix
`source="shadow"`, and the Pulumi program grants each job's KafkaUser its own groups and the exporter
Describe on all of them. A job's queries are named after the job (`<job>` or `<job>.<query>`), so the
prefix `<prefix><job>` covers every shadow group of a job.
"""

from __future__ import annotations

SHADOW_GROUP_PREFIX = "streamstack-"


def shadow_group(query_name: str, prefix: str = SHADOW_GROUP_PREFIX) -> str:
    """The shadow group a query commits to."""
    return f"{prefix}{query_name}"


def job_shadow_groups(job_name: str, prefix: str = SHADOW_GROUP_PREFIX) -> str:
    """The group-name prefix that covers the shadow groups of every query of a job."""
    return f"{prefix}{job_name}"
