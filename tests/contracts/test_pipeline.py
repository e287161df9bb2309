"""The pipeline catalogue (`pipeline.yaml`): what it accepts, what it refuses by name, and that it is the only
place the pipeline's topics are written down."""

from __future__ import annotations

import ast
import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.pipeline import CATALOGUE_PATH, CatalogueError, load_pipeline, parse_pipeline
from contracts.record_sizes import (
    DEAD_LETTER_MAX_MESSAGE_BYTES,
    INPUT_MAX_MESSAGE_BYTES,
    MAX_DEAD_LETTER_DETAIL_CHARS,
)
from streamstack.local.pipeline import local_pipeline

REPO = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = ("infra", "streamstack", "monitoring", "scripts", "contracts")


def _document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(CATALOGUE_PATH.read_text(encoding="utf-8"))
    return document


def test_the_repositorys_catalogue_loads_with_every_job_reading_a_declared_topic() -> None:
    pipeline = load_pipeline()
    topics = {topic.name for topic in pipeline.topics}
    assert pipeline.dead_letter_topic in topics
    assert {job.name for job in pipeline.jobs} >= {"clickstream-windows", "user-view"}
    for job in pipeline.jobs:
        assert set(job.topics_of(job.reads)) <= topics
        assert set(job.producers) <= {producer.name for producer in pipeline.producers}
    assert pipeline.topic("users").topic_config()["cleanup.policy"] == "compact"


def test_the_dead_letter_topic_takes_the_largest_input_record_with_its_key_and_headers() -> None:
    pipeline = load_pipeline()
    dead_letters = pipeline.topic(pipeline.dead_letter_topic).topic_config()
    assert dead_letters["max.message.bytes"] == str(DEAD_LETTER_MAX_MESSAGE_BYTES)
    assert DEAD_LETTER_MAX_MESSAGE_BYTES - INPUT_MAX_MESSAGE_BYTES >= 4 * MAX_DEAD_LETTER_DETAIL_CHARS + 4096
    inputs = {topic for job in pipeline.jobs for topic in job.topics_of(job.reads)}
    assert all("max.message.bytes" not in pipeline.topic(topic).topic_config() for topic in inputs)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["jobs"]["user-view"].update(reads=["--nope"]),
            "jobs.user-view.reads: --nope is not one",
        ),
        (
            lambda d: d["jobs"]["user-view"]["topics"].update({"--users-topic": "people"}),
            "jobs.user-view.topics.--users-topic: people",
        ),
        (lambda d: d["jobs"]["user-view"].pop("stateful"), "jobs.user-view.stateful: required"),
        (lambda d: d["jobs"]["user-view"].update(replicas=3), "jobs.user-view.replicas: unknown field"),
        (lambda d: d["jobs"]["user-view"].update(producers=["nobody"]), "jobs.user-view.producers: nobody"),
        (lambda d: d["topics"]["users"].update(cleanupPolicy="keep"), "topics.users.cleanupPolicy: 'keep'"),
        (lambda d: d["topics"]["users"].update(partitions=0), "topics.users.partitions: 0 is not"),
        (lambda d: d.update(deadLetterTopic="graveyard"), "deadLetterTopic: graveyard is not a topic"),
        (
            lambda d: d["topics"]["page-views"].update(config={"max.message.bytes": "2000000"}),
            "topics.page-views.config.max.message.bytes: '2000000' is not a number of bytes up to 1048588",
        ),
        (
            lambda d: d["topics"]["dead-letters"].update(config={"max.message.bytes": "1"}),
            "topics.dead-letters.config.max.message.bytes: set from contracts/record_sizes.py",
        ),
        (
            lambda d: d["jobs"]["sessionization"]["settings"].update({"--output-topic": "x"}),
            "jobs.sessionization.settings.--output-topic: a topic flag",
        ),
    ],
)
def test_a_mistake_fails_on_load_naming_the_field(mutate: Any, message: str) -> None:
    document = copy.deepcopy(_document())
    mutate(document)
    with pytest.raises(CatalogueError, match=re.escape(f"pipeline.yaml: {message}")):
        parse_pipeline(document)


def test_a_new_job_in_the_catalogue_is_what_the_local_runtime_runs() -> None:
    document = copy.deepcopy(_document())
    document["jobs"]["page-view-audit"] = {
        "module": "clickstream_windows",
        "stateful": True,
        "topics": {"--input-topic": "page-views", "--output-topic": "page-views-per-url"},
        "reads": ["--input-topic"],
        "writes": ["--output-topic"],
        "settings": {"--watermark-delay": "1 minute"},
        "producers": ["clickstream-producer"],
    }
    local = local_pipeline(parse_pipeline(document)).only(["page-view-audit"])
    [job] = local.jobs
    assert job.module == "jobs.clickstream_windows"
    assert job.args == (
        "--dead-letter-topic",
        "dead-letters",
        "--input-topic",
        "page-views",
        "--output-topic",
        "page-views-per-url",
        "--watermark-delay",
        "1 minute",
    )
    assert [producer.name for producer in local.producers] == ["clickstream-producer"]


def test_no_topic_name_is_written_in_the_program_the_runtime_or_the_exporter() -> None:
    """infra, streamstack, monitoring and scripts take every topic from the catalogue (jobs: as flags)."""
    sources = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SOURCE_ROOTS],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    topics = {topic.name for topic in load_pipeline().topics}
    found = [
        f"{path}:{node.lineno}: {node.value}"
        for path in sources
        if path.endswith(".py") and (REPO / path).is_file()
        for node in ast.walk(ast.parse((REPO / path).read_text("utf-8")))
        if isinstance(node, ast.Constant) and node.value in topics
    ]
    assert len(sources) > 50
    assert found == []
