"""User enrichment's users table as Spark state: it survives restarts, it is whole whatever
--starting-offsets says, and a checkpoint without it is refused. Checked against the same plain-Python
reference as tests/jobs/test_user_enrichment.py (the contract's, not the job's)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming.tws_tester import TwsTester

from contracts.errors import ConfigError
from jobs.common.runner import run_streaming_job
from jobs.user_enrichment.config import EnrichmentJobConfig
from jobs.user_enrichment.main import start_queries
from jobs.user_enrichment.table import ProfileTable
from streamstack.local.kafka import LocalKafka
from tests.jobs.streaming_helpers import process_all, running
from tests.jobs.test_user_enrichment import (
    SNAPSHOT,
    batch_ends,
    expected_enriched,
    job_config,  # noqa: F401 (the fixture)
    profile,
    users_phase_one,
    users_phase_three,
    users_phase_two,
    view,
    views_phase_one,
    views_phase_three,
    views_phase_two,
)
from tests.kafka_helpers import Record, compact_snapshots, latest_per_key, produce, read_records

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_a_restarted_job_keeps_the_table_it_had_read(
    spark: SparkSession,
    kafka: LocalKafka,
    job_config: EnrichmentJobConfig,  # noqa: F811
) -> None:
    """Each phase in its own run of the job: after a restart the users source resumes where it stopped, so
    every profile read before comes from the checkpointed state alone."""
    bootstrap = kafka.bootstrap_servers
    users_topic, views_topic = job_config.users_topic, job_config.views_topic
    checkpoint = Path(job_config.streaming.checkpoint_for(job_config.streaming.query_name))

    users = compact_snapshots(kafka, {users_topic: SNAPSHOT}) + produce(
        bootstrap, users_topic, users_phase_one()
    )
    views = produce(bootstrap, views_topic, views_phase_one())
    phases: list[tuple[list[Record], list[Record]]] = [
        (users_phase_two(), views_phase_two()),
        (users_phase_three(), []),
        ([], views_phase_three()),
        ([profile("alice", "Alice", "FR", "platinum", 50)], [view("alice", "/after", 50)]),
    ]
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
    for phase_users, phase_views in phases:
        users += produce(bootstrap, users_topic, phase_users)
        views += produce(bootstrap, views_topic, phase_views)
        with running(start_queries(spark, job_config)) as queries:
            process_all(queries)

    expected = expected_enriched(views, users, batch_ends(checkpoint), datetime.now(UTC))
    output = read_records(bootstrap, job_config.output_topic)
    assert latest_per_key(output) == expected
    assert len(output) == len(expected)  # each view written once: no batch ran twice
    assert expected[views[-1].position]["tier"] == "platinum"
    assert {value["name"] for value in expected.values() if value["user_id"] == "dave"} == {"Dave"}


def test_the_users_table_is_read_whole_when_views_start_at_latest(
    spark: SparkSession,
    kafka: LocalKafka,
    job_config: EnrichmentJobConfig,  # noqa: F811
) -> None:
    """--starting-offsets latest skips the views already in Kafka, never the users table."""
    bootstrap = kafka.bootstrap_servers
    config = replace(job_config, streaming=replace(job_config.streaming, starting_offsets="latest"))
    users = produce(bootstrap, config.users_topic, users_phase_one())
    skipped = produce(bootstrap, config.views_topic, views_phase_one())
    checkpoint = Path(config.streaming.checkpoint_for(config.streaming.query_name))
    with running(start_queries(spark, config)) as queries:
        process_all(queries)
        views = produce(bootstrap, config.views_topic, [view("alice", "/late", 30), view("zoe", "/late", 31)])
        process_all(queries)

    expected = expected_enriched(views, users, batch_ends(checkpoint), datetime.now(UTC))
    output = read_records(bootstrap, config.output_topic)
    assert latest_per_key(output) == expected
    assert not {record.position for record in skipped} & set(expected)
    assert expected[views[0].position]["tier"] == "gold"


def test_a_checkpoint_of_the_stateless_job_is_refused(
    spark: SparkSession,
    job_config: EnrichmentJobConfig,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkpoint = Path(job_config.streaming.checkpoint_for(job_config.streaming.query_name))
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "0").write_text("v1\n" + json.dumps({"nextBatchWatermarkMs": 0}) + "\n")
    with pytest.raises(ConfigError, match="no state"):
        start_queries(spark, job_config)
    # Run as the job runs: one error line naming the checkpoint, exit code 2, no query left running.
    assert run_streaming_job("user-enrichment", job_config, start_queries) == 2
    assert f"user-enrichment: error: checkpoint {checkpoint} has committed batches but no state" in (
        capsys.readouterr().err
    )
    assert not spark.streams.active


def table_row(user: str, *, change: tuple[int, str | None] | None = None, view: str | None = None) -> Row:
    """An input row of `ProfileTable`: a change (offset, tier or None for a tombstone) or a view (url)."""
    offset, tier = change if change is not None else (None, None)
    return Row(
        user_id=user,
        is_change=change is not None,
        offset=offset,
        partition=0 if change is not None else None,
        source=f"views/0/{view}" if view is not None else None,
        url=view,
        event_time_us=1 if view is not None else None,
        deleted=change is not None and tier is None,
        name=user.title() if tier is not None else None,
        country="FR" if tier is not None else None,
        tier=tier,
        updated_at_us=offset if tier is not None else None,
    )


def test_profile_table_applies_a_batchs_changes_in_offset_order_before_its_views() -> None:
    """The processor alone (no Spark): one call per user and batch, state in memory."""
    tester = TwsTester(ProfileTable())

    def tiers(user: str, *rows: Row) -> list[str | None]:
        return [row["tier"] for row in tester.test(user, list(rows))]

    # Changes after the view in the batch count, by offset whatever the row order.
    assert tiers(
        "a", table_row("a", view="1"), table_row("a", change=(7, "gold")), table_row("a", change=(3, "free"))
    ) == ["gold"]
    assert tiers("a", table_row("a", view="2")) == ["gold"]  # from the state
    assert tiers("a", table_row("a", change=(9, None)), table_row("a", view="3")) == [None]  # deleted
    assert tester.peekValueState("profile", "a") is None
    assert tiers("a", table_row("a", change=(11, "basic"))) == []  # a change alone writes nothing
    assert tester.peekValueState("profile", "a") == ("A", "FR", "basic", 11)
    assert tiers("b", table_row("b", view="4"), table_row("b", view="4")) == [None, None]  # unknown, twice
