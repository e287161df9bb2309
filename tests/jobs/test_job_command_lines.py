"""Every job takes its topics and settings from the pipeline catalogue, and has none of its own: the command
line the local runtime and the chart build from pipeline.yaml is what the job runs with, and a job started
without one of its topic or duration flags stops with a usage error naming that flag."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import pytest

from contracts.pipeline import load_pipeline
from jobs.common.kafka_io import kafka_source_options
from tests.jobs.streaming_helpers import catalogue_command_line

JOBS = [job.name for job in load_pipeline().jobs]


def job_parser(job: str) -> Callable[[list[str]], Any]:
    main = importlib.import_module(f"{load_pipeline().job(job).python_module}.main")
    parse_args: Callable[[list[str]], Any] = main.parse_args
    return parse_args


@pytest.mark.parametrize("job", JOBS)
def test_the_catalogue_command_line_gives_the_job_its_topics_and_settings(job: str) -> None:
    entry = load_pipeline().job(job)

    config = job_parser(job)(catalogue_command_line(job))

    assert config.topics_by_flag() == dict(entry.topics)
    assert config.streaming.dead_letter_topic == load_pipeline().dead_letter_topic
    assert config.streaming.query_name == job
    for flag, value in entry.settings:
        field_name = flag.removeprefix("--").replace("-", "_")
        assert getattr(config, field_name) == value


@pytest.mark.parametrize("job", JOBS)
def test_a_missing_topic_or_setting_is_a_usage_error_naming_its_flag(
    job: str, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = load_pipeline().job(job)
    command_line = catalogue_command_line(job)
    config_fields = dataclasses.fields(job_parser(job)(command_line))
    optional = {field.metadata["flag"] for field in config_fields if field.metadata.get("optional")}
    required_flags = ["--dead-letter-topic", *(flag for flag, _ in (*entry.topics, *entry.settings))]

    for flag in (flag for flag in required_flags if flag not in optional):
        at = command_line.index(flag)
        with pytest.raises(SystemExit) as stopped:
            job_parser(job)(command_line[:at] + command_line[at + 2 :])
        assert stopped.value.code == 2
        assert flag in capsys.readouterr().err


@pytest.mark.parametrize("job", JOBS)
def test_every_kafka_source_waits_at_most_the_fetch_wait_the_job_was_given(job: str) -> None:
    """Every task of a micro-batch waits the fetch wait once, however small the batch: Spark's reader asks
    for the partition's offsets behind the consumer's fetch ahead, which the broker holds for the whole
    wait (make bench-batch-cost). The jobs' sources wait 1 ms unless told otherwise, in every deployment,
    since the driver builds its sources from this code."""
    command_line = catalogue_command_line(job)

    default = job_parser(job)(command_line).streaming
    chosen = job_parser(job)([*command_line, "--kafka-fetch-max-wait-ms", "50"]).streaming

    assert kafka_source_options(default)["kafka.fetch.max.wait.ms"] == "1"
    assert kafka_source_options(chosen)["kafka.fetch.max.wait.ms"] == "50"
    assert kafka_source_options(chosen)["kafka.bootstrap.servers"] == chosen.bootstrap_servers


def test_a_fetch_wait_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    command_line = catalogue_command_line(JOBS[0])
    for value in ("-1", "501"):
        with pytest.raises(SystemExit) as stopped:
            job_parser(JOBS[0])([*command_line, "--kafka-fetch-max-wait-ms", value])
        assert stopped.value.code == 2
        assert f"--kafka-fetch-max-wait-ms {value}: must be 0 to 500" in capsys.readouterr().err
