"""The cluster runs the pipeline that is tested locally: infra's catalogue (infra does not import
streamstack) describes the same topics and gives each job the same topic flags and settings as
streamstack/local/pipeline.py."""

from __future__ import annotations

from infra import catalogue
from streamstack.local.pipeline import streaming_pipeline


def pairs(arguments: tuple[str, ...]) -> dict[str, str]:
    assert len(arguments) % 2 == 0
    return dict(zip(arguments[::2], arguments[1::2], strict=True))


def test_topics_match_the_local_pipeline() -> None:
    local = {topic.name: topic for topic in streaming_pipeline().topics}
    cluster = catalogue.topic_definitions()
    assert set(cluster) == set(local)
    for name, definition in cluster.items():
        assert definition.partitions == local[name].partitions, name
        expected = {"cleanup.policy": "delete", **local[name].topic_config()}
        assert definition.topic_config() == expected, name


def test_jobs_match_the_local_pipeline() -> None:
    local = {job.name: job for job in streaming_pipeline().jobs}
    cluster = catalogue.job_definitions()
    assert set(cluster) == set(local)
    for name, definition in cluster.items():
        assert f"jobs.{definition.module}" == local[name].module
        assert {**dict(definition.topics), **pairs(definition.settings)} == pairs(local[name].args), name
        flags = {flag for flag, _ in definition.topics}
        assert set(definition.reads) | set(definition.writes) == flags, name
