"""The producers' malformed and late records, read back from real Kafka topics and judged by the jobs' own
decoders: the configured share of each, every malformed record the dead letter it is meant to be, every late
view behind the watermark of every job that reads page views."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from pyspark.sql import DataFrame, Row, SparkSession

from contracts.durations import duration_seconds
from contracts.pipeline import load_pipeline
from jobs.clickstream_windows.main import parse_args, start_queries
from jobs.clickstream_windows.transforms import late_views
from jobs.common.config import EventLimits
from jobs.common.events import DEAD_LETTER_REASONS, valid_events
from jobs.common.schemas import (
    decode_clicks,
    decode_impressions,
    decode_orders,
    decode_page_views,
    decode_profiles,
)
from jobs.producers import ads, changelog, clickstream
from jobs.producers.changelog import ChangelogGenerator, TableName
from jobs.producers.faults import DEFAULT_LATE_SECONDS, EventShape, FaultSchedule
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.conftest import repo_root
from tests.jobs.streaming_helpers import catalogue_command_line, create_job_topics, process_all, running

EVENTS = 400
MALFORMED_SHARE = 0.1
LATE_SHARE = 0.05
SEED = 3
Decode = Callable[[DataFrame, EventLimits], DataFrame]


def run_producer(kafka: LocalKafka, module: str, *flags: str, events: int = EVENTS, seed: int = SEED) -> str:
    command = [sys.executable, "-m", module, "--bootstrap-servers", kafka.bootstrap_servers]
    command += ["--rate", "2000", "--max-events", str(events), "--seed", str(seed), *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, cwd=repo_root())
    assert done.returncode == 0, done.stderr
    return done.stdout


def decoded(spark: SparkSession, kafka: LocalKafka, topic: str, decode: Decode) -> DataFrame:
    """Every record of the topic, decoded as a job decodes it, in offset order (one partition)."""
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .load()
    )
    return decode(records, EventLimits()).orderBy("partition", "offset")


def intended_reasons(shape: EventShape, malformed_share: float, late_share: float = 0.0) -> list[str | None]:
    """Per record sent, the dead-letter reason its producer meant it to get (None: a valid record)."""
    schedule = FaultSchedule(malformed_share, late_share)
    reasons = itertools.cycle(shape.malformed_kinds())
    return [next(reasons) if schedule.next_kind() == "malformed" else None for _ in range(EVENTS)]


def check_shares(reasons: Sequence[str | None], kinds: Sequence[str]) -> None:
    """The malformed share of the records, and every kind an equal part of them."""
    per_kind = Counter(reason for reason in reasons if reason is not None)
    assert abs(sum(per_kind.values()) - EVENTS * MALFORMED_SHARE) <= 1
    assert set(per_kind) == set(kinds)
    assert max(per_kind.values()) - min(per_kind.values()) <= 1


def test_the_producers_together_send_every_dead_letter_reason_a_producer_can() -> None:
    kinds = {
        kind
        for shape in (clickstream.SHAPE, ads.IMPRESSION_SHAPE, *changelog.SHAPES.values())
        for kind in shape.malformed_kinds()
    }
    # A changelog record without a key cannot be produced: compacted topics refuse it.
    assert kinds == set(DEAD_LETTER_REASONS) - {"missing_key"}


WINDOW_FLAGS = ("--window-duration", "--hop-window-duration", "--session-gap")


def test_late_views_trail_every_page_view_job_by_its_watermark_and_longest_window_and_a_minute() -> None:
    pipeline = load_pipeline()
    for job in pipeline.jobs:
        settings = dict(job.settings)
        if "clickstream-producer" not in job.producers or "--watermark-delay" not in settings:
            continue
        # A window or session is dropped once its end passes the watermark, so a view must trail by the
        # longest of them too; view-bursts' sliding window has no end: a view behind the watermark is late.
        windows = [duration_seconds(value) for flag, value in job.settings if flag in WINDOW_FLAGS] or [0.0]
        assert duration_seconds(settings["--watermark-delay"]) + max(windows) + 60 <= DEFAULT_LATE_SECONDS


@pytest.mark.integration
@pytest.mark.spark
def test_clickstream_producer_sends_its_shares_of_malformed_and_late_views(
    spark: SparkSession, kafka: LocalKafka, topic_name: str
) -> None:
    kafka.create_topics([TopicSpec(topic_name)])
    output = run_producer(
        kafka,
        "jobs.producers.clickstream",
        *("--topic", topic_name, "--malformed-share", str(MALFORMED_SHARE), "--late-share", str(LATE_SHARE)),
    )
    page_views = decoded(spark, kafka, topic_name, decode_page_views)
    rows = page_views.collect()

    reasons = [row["dead_letter_reason"] for row in rows]
    assert reasons == intended_reasons(clickstream.SHAPE, MALFORMED_SHARE, LATE_SHARE)
    check_shares(reasons, clickstream.SHAPE.malformed_kinds())
    valid = [row for row in rows if row["dead_letter_reason"] is None]
    behind = [row["timestamp"] - row["event"]["event_time"] for row in valid]
    late = [lag for lag in behind if lag >= timedelta(seconds=DEFAULT_LATE_SECONDS)]
    assert abs(len(late) - EVENTS * LATE_SHARE) <= 1
    assert max(lag for lag in behind if lag < timedelta(seconds=DEFAULT_LATE_SECONDS)) <= timedelta(seconds=4)
    malformed = EVENTS - len(valid)
    assert (
        output.strip() == f"sent {EVENTS} page views to {topic_name}; {malformed} malformed, {len(late)} late"
    )

    # The window job's late-view routing, at the watermark the views set, takes exactly the late ones.
    settings = dict(load_pipeline().job("clickstream-windows").settings)
    newest = max(row["event"]["event_time"] for row in valid)
    watermark = newest - timedelta(seconds=duration_seconds(settings["--watermark-delay"]))
    routed = late_views(
        valid_events(page_views), settings["--window-duration"], int(watermark.timestamp() * 1000)
    )
    assert routed.count() == len(late)


def late_rows_alert_threshold() -> float:
    """The share of dropped to input rows above which StreamstackLateRowsDropped goes pending."""
    rules = yaml.safe_load((repo_root() / "monitoring" / "rules" / "streamstack-jobs.yaml").read_text())
    [expr] = [
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "StreamstackLateRowsDropped"
    ]
    threshold = re.search(r">\s*([0-9.]+)\s*$", expr.strip())
    assert threshold is not None, expr
    return float(threshold.group(1))


@pytest.mark.integration
@pytest.mark.spark
def test_the_clickstream_producers_default_late_views_keep_every_window_query_under_the_late_rows_alert(
    spark: SparkSession, kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    """Spark counts a dropped row per state row a late view would have updated (after the query's own
    fan-out): the window job's hopping counts put each view under 2 dimensions in 3 windows. The demo's
    default share of late views has to stay under the alert in those units too."""
    topics = {flag: f"{topic_name}{flag.removeprefix('--')}" for flag in ("--input-topic", "--output-topic")}
    topics |= {flag: f"{topic_name}{flag.removeprefix('--')}" for flag in ("--windows-topic", "--late-topic")}
    config = parse_args(
        [
            *catalogue_command_line("clickstream-windows"),
            *("--bootstrap-servers", kafka.bootstrap_servers, "--checkpoint-dir", str(tmp_path)),
            *("--dead-letter-topic", f"{topic_name}-dead-letters", "--metrics-port", "0"),
            *("--trigger-interval", "500 milliseconds"),
            *(part for flag, topic in topics.items() for part in (flag, topic)),
        ]
    )
    create_job_topics(
        kafka,
        config.streaming,
        *(
            TopicSpec(topic, compact=flag in ("--output-topic", "--windows-topic"))
            for flag, topic in topics.items()
        ),
    )
    producer_flags = ("jobs.producers.clickstream", "--topic", config.input_topic)

    # The first views set the watermark; among the next, the late ones trail it and are dropped.
    run_producer(kafka, *producer_flags, events=200)
    with running(start_queries(spark, config)) as queries:
        process_all(queries)
        before = {query.name: len(query.recentProgress) for query in queries}
        run_producer(kafka, *producer_flags, events=2000, seed=SEED + 1)
        process_all(queries)
        measured = {query.name: query.recentProgress[before[query.name] :] for query in queries}

    threshold = late_rows_alert_threshold()
    shares = {}
    for name, progresses in measured.items():
        dropped = sum(op.numRowsDroppedByWatermark for p in progresses for op in p.stateOperators)
        shares[name] = dropped / sum(p.numInputRows for p in progresses)
    assert shares["clickstream-windows"] > 0  # late views were sent and dropped
    assert shares["clickstream-windows.hopping"] > shares["clickstream-windows.tumbling"]
    assert max(shares.values()) < threshold, shares


@pytest.mark.integration
@pytest.mark.spark
def test_ads_producer_sends_its_share_of_malformed_impressions(
    spark: SparkSession, kafka: LocalKafka, topic_name: str
) -> None:
    impressions, clicks = f"{topic_name}-impressions", f"{topic_name}-clicks"
    kafka.create_topics([TopicSpec(impressions), TopicSpec(clicks)])
    run_producer(
        kafka,
        "jobs.producers.ads",
        *("--topic", impressions, "--clicks-topic", clicks, "--malformed-share", str(MALFORMED_SHARE)),
        *("--min-click-delay-seconds", "0", "--max-click-delay-seconds", "0.1", "--click-probability", "0.5"),
    )
    rows = decoded(spark, kafka, impressions, decode_impressions).collect()

    reasons = [row["dead_letter_reason"] for row in rows]
    assert reasons == intended_reasons(ads.IMPRESSION_SHAPE, MALFORMED_SHARE)
    check_shares(reasons, ads.IMPRESSION_SHAPE.malformed_kinds())
    # Only well-formed impressions get clicks.
    clicked = {
        row["impression_id"] for row in valid_events(decoded(spark, kafka, clicks, decode_clicks)).collect()
    }
    assert clicked and clicked <= {row["event"]["impression_id"] for row in rows if row["event"] is not None}


@pytest.mark.integration
@pytest.mark.spark
def test_changelog_producer_sends_its_share_of_malformed_changes_and_the_same_changes(
    spark: SparkSession, kafka: LocalKafka, topic_name: str
) -> None:
    users, orders = f"{topic_name}-users", f"{topic_name}-orders"
    kafka.create_topics([TopicSpec(users, compact=True), TopicSpec(orders, compact=True)])
    run_producer(
        kafka,
        "jobs.producers.changelog",
        *("--topic", users, "--orders-topic", orders, "--users", "20"),
        *("--malformed-share", str(MALFORMED_SHARE)),
    )
    rows: dict[TableName, list[Row]] = {
        "users": decoded(spark, kafka, users, decode_profiles).collect(),
        "orders": decoded(spark, kafka, orders, decode_orders).collect(),
    }

    all_reasons: list[str | None] = []
    for table, table_rows in rows.items():
        malformed = [row for row in table_rows if row["key"].decode().startswith("malformed-")]
        # Each malformed record is keyed by the reason it is meant to get; every other record is valid.
        assert [row["dead_letter_reason"] for row in malformed] == [
            row["key"].decode().removeprefix("malformed-") for row in malformed
        ]
        assert all(row["dead_letter_reason"] is None for row in table_rows if row not in malformed)
        reasons = [row["dead_letter_reason"] for row in malformed]
        kinds = changelog.SHAPES[table].malformed_kinds()
        assert set(reasons) == set(kinds)
        per_kind = Counter(reasons)
        assert max(per_kind.values()) - min(per_kind.values()) <= 1
        all_reasons += reasons
    assert abs(len(all_reasons) - EVENTS * MALFORMED_SHARE) <= 1

    # The changes are those of a run without malformed records.
    generator = ChangelogGenerator(20, SEED)
    expected = [generator.next_change(0.0) for _ in range(EVENTS - len(all_reasons))]
    for table, table_rows in rows.items():
        sent = [row for row in table_rows if not row["key"].decode().startswith("malformed-")]
        assert [(row["key"].decode(), row["value"] is None) for row in sent] == [
            (change.key, change.row is None) for change in expected if change.table == table
        ]
