"""Ad attribution against real Kafka, checked against a plain-Python simulation of the join's contract.

The reference below is written from the job's contract, not from its code: a click matches an impression
with the same impression id and ad id when impression time <= click time <= impression time + WINDOW; per
impression the earliest matching click wins (ties: smallest click id) and distinct click ids are counted.
An event at or behind the watermark when it arrives is dropped. After each phase the watermark is the
smaller of the two inputs' largest event times less DELAY, and every impression whose time + WINDOW is
behind it is final and emitted once, clicked or not; the others stay pending.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from jobs.ad_attribution.config import AttributionJobConfig
from jobs.ad_attribution.main import parse_args, start_queries
from jobs.ad_attribution.transforms import attribute_clicks, attributions_as_records
from jobs.producers import ads as ads_producer
from streamstack.local.kafka import LocalKafka, TopicSpec
from tests.jobs.streaming_helpers import (
    catalogue_command_line,
    check_appended_once,
    create_job_topics,
    dropped_by_watermark,
    process_all,
    running,
    streaming_config,
)
from tests.kafka_helpers import count_and_latest, produce, read_all, read_dead_letters, read_records, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

WINDOW_SECONDS = 30.0
DELAY_SECONDS = 10.0
# Events and expiries this close to a watermark would depend on Spark's boundary rules: the scenario
# keeps clear of them, and the reference checks that it does.
MARGIN_SECONDS = 2.0
# Event times near now: the job dead-letters events more than 7 days from their Kafka timestamp.
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=30)


def iso(seconds: float) -> str:
    return (BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def encoded(event: Impression | Click) -> tuple[bytes, bytes]:
    """Keyed by impression id; the event's fields in order, then its event time."""
    fields = {name: value for name, value in asdict(event).items() if name != "seconds"}
    body = {**fields, "event_time": iso(event.seconds)}
    return event.impression_id.encode(), json.dumps(body).encode()


@dataclass(frozen=True)
class Impression:
    impression_id: str
    ad_id: str
    user_id: str
    seconds: float  # after BASE


@dataclass(frozen=True)
class Click:
    click_id: str
    impression_id: str
    ad_id: str
    user_id: str
    seconds: float  # after BASE


@dataclass(frozen=True)
class Phase:
    impressions: tuple[Impression, ...]
    clicks: tuple[Click, ...]


# --- the reference -------------------------------------------------------------------------------------


def expected_attribution(impression: Impression, clicks: Sequence[Click]) -> dict[str, object]:
    """The output value for an impression, given every click that reached the join."""
    matching = [
        click
        for click in clicks
        if click.impression_id == impression.impression_id
        and click.ad_id == impression.ad_id
        and impression.seconds <= click.seconds <= impression.seconds + WINDOW_SECONDS
    ]
    first = min(matching, key=lambda click: (click.seconds, click.click_id), default=None)
    return {
        "impression_id": impression.impression_id,
        "ad_id": impression.ad_id,
        "user_id": impression.user_id,
        "impression_time": iso(impression.seconds),
        "click_id": None if first is None else first.click_id,
        "click_time": None if first is None else iso(first.seconds),
        "clicked": first is not None,
        "seconds_to_click": None if first is None else round(float(first.seconds - impression.seconds), 3),
        "click_count": len({click.click_id for click in matching}),
    }


@dataclass
class Reference:
    emitted_after_phase: list[dict[str, dict[str, object]]]
    late: list[Impression | Click]
    pending: set[str]


def simulate(phases: Sequence[Phase]) -> Reference:
    """The first phase is processed in one batch (sent before the query starts); a later phase may be
    split into batches, so it either leaves the watermark where it was or lies wholly ahead of it."""
    watermark = float("-inf")
    largest = {"impressions": float("-inf"), "clicks": float("-inf")}
    impressions: dict[str, Impression] = {}
    clicks: list[Click] = []
    pending: set[str] = set()
    emitted: list[dict[str, dict[str, object]]] = []
    late: list[Impression | Click] = []
    for index, phase in enumerate(phases):
        largest["impressions"] = max([largest["impressions"], *(i.seconds for i in phase.impressions)])
        largest["clicks"] = max([largest["clicks"], *(c.seconds for c in phase.clicks)])
        next_watermark = max(watermark, min(largest.values()) - DELAY_SECONDS)
        events: list[Impression | Click] = [*phase.impressions, *phase.clicks]
        if index > 0:
            assert next_watermark == watermark or all(
                e.seconds > next_watermark + MARGIN_SECONDS for e in events
            ), "a later phase must not move the watermark past its own events"
        for event in events:
            if event.seconds <= watermark:
                assert event.seconds < watermark - MARGIN_SECONDS, f"{event} is too close to the watermark"
                late.append(event)
            elif isinstance(event, Impression):
                assert event.seconds > watermark + MARGIN_SECONDS, f"{event} is too close to the watermark"
                impressions[event.impression_id] = event
                pending.add(event.impression_id)
            else:
                assert event.seconds > watermark + MARGIN_SECONDS, f"{event} is too close to the watermark"
                clicks.append(event)
        watermark = next_watermark
        final: dict[str, dict[str, object]] = {}
        for impression_id in sorted(pending):
            impression = impressions[impression_id]
            expires = impression.seconds + WINDOW_SECONDS
            assert abs(expires - watermark) > MARGIN_SECONDS, (
                f"{impression} expires too close to the watermark"
            )
            if expires < watermark:
                final[impression_id] = expected_attribution(impression, clicks)
        pending -= final.keys()
        emitted.append(final)
    return Reference(emitted, late, pending)


# --- the scenario ----------------------------------------------------------------------------------------


def first_phase() -> Phase:
    """Sent before the job starts, so processed in one batch; afterwards the watermark is
    min(199, 200) - 10 = 189 and every impression before 159 (+ 30 < 189) is final."""
    impressions = [
        Impression("imp-01", "ad-1", "user-1", 10),  # clicked 5 s later
        Impression("imp-02", "ad-2", "user-2", 20),  # clicked 35 s later: past the window
        Impression("imp-03", "ad-1", "user-3", 30),  # clicked exactly at the end of the window
        Impression("imp-04", "ad-3", "user-4", 40),  # clicked half a second before it was shown
        Impression("imp-05", "ad-2", "user-5", 50),  # clicked in the same millisecond, by another user id
        Impression("imp-06", "ad-1", "user-6", 60),  # two clicks, one of them sent twice
        Impression("imp-07", "ad-4", "user-7", 70),  # two clicks at the same time
        Impression("imp-09", "ad-5", "user-9", 90),  # a click with its id but another ad
        Impression("imp-10", "ad-2", "user-1", 100),  # its click is sent first
        Impression("imp-14", "ad-3", "user-4", 120),  # the impression is sent twice
        Impression("imp-14", "ad-3", "user-4", 120),
        Impression("imp-17", "ad-1", "user-7", 140),  # final after this phase; a late click follows
        Impression("imp-15", "ad-4", "user-5", 175),  # still open; its click comes late
        Impression("imp-13", "ad-2", "user-3", 178),  # its click is sent again in the second phase
        Impression("imp-12", "ad-1", "user-2", 185),  # its click comes in the second phase
        Impression("imp-18", "ad-5", "user-8", 199),
    ]
    clicks = [
        Click("clk-10", "imp-10", "ad-2", "user-1", 105),
        Click("clk-01", "imp-01", "ad-1", "user-1", 15),
        Click("clk-02", "imp-02", "ad-2", "user-2", 55),
        Click("clk-03", "imp-03", "ad-1", "user-3", 60),
        Click("clk-04", "imp-04", "ad-3", "user-4", 39.5),
        Click("clk-05", "imp-05", "ad-2", "user-x", 50),
        Click("clk-06b", "imp-06", "ad-1", "user-6", 75),
        Click("clk-06a", "imp-06", "ad-1", "user-6", 68),
        Click("clk-06a", "imp-06", "ad-1", "user-6", 68),
        Click("clk-07z", "imp-07", "ad-4", "user-7", 80),
        Click("clk-07m", "imp-07", "ad-4", "user-7", 80),
        Click("clk-08", "imp-unknown", "ad-1", "user-8", 85),  # no such impression
        Click("clk-09", "imp-09", "ad-6", "user-9", 95),
        Click("clk-14", "imp-14", "ad-3", "user-4", 125),
        Click("clk-13", "imp-13", "ad-2", "user-3", 192),
        Click("clk-11", "imp-11", "ad-3", "user-6", 197),  # before its impression arrives (next phase)
        Click("clk-18", "imp-18", "ad-5", "user-8", 200),
    ]
    shuffler = random.Random(5)
    shuffler.shuffle(impressions)
    shuffler.shuffle(clicks)
    return Phase(tuple(impressions), tuple(clicks))


def second_phase() -> Phase:
    """No event after 199 (impressions) or 200 (clicks): the watermark stays 189 however this phase
    splits into batches."""
    return Phase(
        impressions=(
            Impression("imp-11", "ad-3", "user-6", 194),  # on time; its click arrived a phase earlier
            Impression("imp-16", "ad-2", "user-9", 130),  # late: dropped, never emitted
        ),
        clicks=(
            Click("clk-12", "imp-12", "ad-1", "user-2", 196),
            Click("clk-13", "imp-13", "ad-2", "user-3", 192),  # the same click again, on time
            Click("clk-15", "imp-15", "ad-4", "user-5", 182),  # late: imp-15 stays unclicked
            Click("clk-16", "imp-16", "ad-2", "user-9", 135),  # late
            Click("clk-17", "imp-17", "ad-1", "user-7", 150),  # late, and imp-17 is already final
        ),
    )


def clock_phase() -> Phase:
    """Far ahead on both inputs: the watermark moves to 990 and every earlier impression becomes final;
    the clock's own impression and click stay pending."""
    return Phase(
        impressions=(Impression("imp-clock", "ad-clock", "user-clock", 1000),),
        clicks=(Click("clk-clock", "imp-clock", "ad-clock", "user-clock", 1001),),
    )


# Malformed input on each topic (sent with the second phase) and the dead-letter reason each must get.
BAD_IMPRESSIONS = {
    b'{"impression_id": "imp-x", "ad_id": "ad-1"': "malformed_json",
    json.dumps({"impression_id": "imp-x", "user_id": "u", "event_time": iso(190)}).encode(): "missing_field",
    json.dumps(
        {"impression_id": "imp-x", "ad_id": 7, "user_id": "u", "event_time": iso(190)}
    ).encode(): "wrong_type",
}
BAD_CLICKS = {
    b"[1, 2, 3]": "not_an_object",
    json.dumps(
        {"click_id": "c", "impression_id": "imp-x", "ad_id": "a", "user_id": "u", "event_time": "soon"}
    ).encode(): "bad_timestamp",
    json.dumps(
        {
            "click_id": "c",
            "impression_id": "imp-x",
            "ad_id": "a",
            "user_id": "u",
            "event_time": "2999-01-01T00:00:00Z",
        }
    ).encode(): "event_time_out_of_range",
}


# --- helpers -----------------------------------------------------------------------------------------------


def send(bootstrap_servers: str, config: AttributionJobConfig, phase: Phase) -> None:
    produce(bootstrap_servers, config.impressions_topic, map(encoded, phase.impressions))
    produce(bootstrap_servers, config.clicks_topic, map(encoded, phase.clicks))


@pytest.fixture
def job_config(kafka: LocalKafka, topic_name: str, tmp_path: Path) -> AttributionJobConfig:
    config = AttributionJobConfig(
        streaming=streaming_config("ad-attribution", kafka.bootstrap_servers, tmp_path, topic_name),
        impressions_topic=f"{topic_name}-impressions",
        clicks_topic=f"{topic_name}-clicks",
        output_topic=f"{topic_name}-attributions",
        attribution_window=f"{WINDOW_SECONDS:.0f} seconds",
        watermark_delay=f"{DELAY_SECONDS:.0f} seconds",
    )
    create_job_topics(
        kafka,
        config.streaming,
        TopicSpec(config.impressions_topic, partitions=2),
        TopicSpec(config.clicks_topic, partitions=2),
        TopicSpec(config.output_topic, partitions=2, compact=True),
    )
    return config


# --- tests -------------------------------------------------------------------------------------------------


def test_attributions_read_back_from_kafka_match_the_simulation(
    spark: SparkSession, kafka: LocalKafka, job_config: AttributionJobConfig
) -> None:
    bootstrap = kafka.bootstrap_servers
    phases = [first_phase(), second_phase(), clock_phase()]
    reference = simulate(phases)

    send(bootstrap, job_config, phases[0])
    outputs = []  # (records, latest value per key) after each phase
    with running(start_queries(spark, job_config)) as queries:
        process_all(queries)
        outputs.append(count_and_latest(bootstrap, job_config.output_topic))

        send(bootstrap, job_config, phases[1])
        produce(bootstrap, job_config.impressions_topic, ((None, bad) for bad in BAD_IMPRESSIONS))
        produce(bootstrap, job_config.clicks_topic, ((None, bad) for bad in BAD_CLICKS))
        process_all(queries)
        outputs.append(count_and_latest(bootstrap, job_config.output_topic))

        send(bootstrap, job_config, phases[2])
        process_all(queries)
        attribution_query = next(q for q in queries if q.name == "ad-attribution")
        dropped = dropped_by_watermark(attribution_query)
    outputs.append(count_and_latest(bootstrap, job_config.output_topic))
    final = outputs[-1][1]

    # An impression appears once the watermark passes its time + window, and only then. Append mode: each
    # impression is written exactly once, however many clicks or copies it had.
    check_appended_once(outputs, reference.emitted_after_phase)
    # The scenario exercises what it claims to.
    clicked = {key for key, value in final.items() if value["clicked"]}
    assert clicked == {f"imp-{n}" for n in ("01", "03", "05", "06", "07", "10", "11", "12", "13", "14", "18")}
    assert {"imp-02", "imp-04", "imp-09", "imp-15", "imp-17"} <= final.keys() - clicked
    assert final["imp-06"]["click_id"] == "clk-06a" and final["imp-06"]["click_count"] == 2
    assert final["imp-07"]["click_id"] == "clk-07m" and final["imp-07"]["click_count"] == 2
    assert final["imp-13"]["click_count"] == 1
    assert "imp-16" not in final and reference.pending == {"imp-clock"}
    # Late rows are dropped by the join and counted, one each.
    assert len(reference.late) == 4
    assert dropped == len(reference.late)

    dead_letters = read_dead_letters(bootstrap, job_config.streaming.dead_letter_topic)
    expected_reasons = {
        **{(job_config.impressions_topic, value): reason for value, reason in BAD_IMPRESSIONS.items()},
        **{(job_config.clicks_topic, value): reason for value, reason in BAD_CLICKS.items()},
    }
    assert {(letter.source_topic, letter.value): letter.reason for letter in dead_letters} == expected_reasons
    positions = {
        (topic, record.value): record.position
        for topic in (job_config.impressions_topic, job_config.clicks_topic)
        for record in read_records(bootstrap, topic)
    }
    assert sorted(letter.origin for letter in dead_letters) == sorted(
        positions[origin] for origin in expected_reasons
    )


def test_window_bounds_and_first_click_on_static_frames(spark: SparkSession) -> None:
    """Static check of the join condition to the millisecond, the first-click rule and the encoding."""
    impressions = [
        Impression("i-1", "ad-1", "u-1", 100),
        Impression("i-2", "ad-1", "u-2", 100),
        Impression("i-3", "ad-2", "u-3", 100),
    ]
    clicks = [
        Click("c-1", "i-1", "ad-1", "u-1", 99.999),  # a millisecond early
        Click("c-2", "i-1", "ad-1", "u-1", 130.001),  # a millisecond past the window
        Click("c-3", "i-2", "ad-1", "u-2", 100),  # at the impression
        Click("c-4", "i-2", "ad-1", "u-2", 130),  # at the end of the window
        Click("c-0", "i-2", "ad-1", "u-2", 130),  # the same time, a smaller id: counted, not first
        Click("c-5", "i-3", "ad-1", "u-3", 110),  # another ad
    ]

    def timestamp(seconds: float) -> datetime:
        return (BASE + timedelta(seconds=seconds)).replace(tzinfo=None)

    impression_frame = spark.createDataFrame(
        [(i.impression_id, i.ad_id, i.user_id, timestamp(i.seconds)) for i in impressions],
        "impression_id string, ad_id string, user_id string, impression_time timestamp",
    )
    click_frame = spark.createDataFrame(
        [(c.click_id, c.impression_id, c.ad_id, timestamp(c.seconds)) for c in clicks],
        "click_id string, click_impression_id string, click_ad_id string, click_time timestamp",
    )

    records = attributions_as_records(
        attribute_clicks(impression_frame, click_frame, "30 seconds", "1 minute")
    )

    expected = [
        (i.impression_id, json.dumps(expected_attribution(i, clicks), separators=(",", ":")))
        for i in impressions
    ]
    assertDataFrameEqual(records, spark.createDataFrame(expected, "key string, value string"))


def test_command_line_rejects_a_bad_window_and_clicks_read_from_the_impressions_topic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    command_line = catalogue_command_line("ad-attribution")
    impressions = parse_args(command_line).impressions_topic

    with pytest.raises(SystemExit):
        parse_args([*command_line, "--attribution-window", "half a minute"])
    assert "--attribution-window 'half a minute'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args([*command_line, "--clicks-topic", impressions])
    assert f"--clicks-topic {impressions!r}: must differ from --impressions-topic" in capsys.readouterr().err


# --- the producer ---------------------------------------------------------------------------------------


def produced(bootstrap_servers: str, topic: str) -> list[dict[str, str]]:
    return [json.loads(value) for _, value in read_all(bootstrap_servers, topic) if value is not None]


def test_producer_sends_seeded_impressions_and_their_clicks(kafka: LocalKafka, topic_name: str) -> None:
    bootstrap = kafka.bootstrap_servers
    runs = []
    for run in ("a", "b"):
        impressions_topic, clicks_topic = f"{topic_name}-{run}-impressions", f"{topic_name}-{run}-clicks"
        kafka.create_topics([TopicSpec(impressions_topic), TopicSpec(clicks_topic)])
        argv = [
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            impressions_topic,
            "--clicks-topic",
            clicks_topic,
        ]
        argv += ["--rate", "200", "--max-events", "40", "--click-probability", "0.5", "--seed", "3"]
        argv += ["--min-click-delay-seconds", "0.1", "--max-click-delay-seconds", "0.4", "--run-id", "t"]
        argv += ["--malformed-share", "0"]
        assert ads_producer.main(argv) == 0
        runs.append((produced(bootstrap, impressions_topic), produced(bootstrap, clicks_topic)))

    (impressions, clicks), (impressions_again, clicks_again) = runs
    assert len(impressions) == 40
    assert len({i["impression_id"] for i in impressions}) == 40
    assert 0 < len(clicks) < 40
    by_id = {i["impression_id"]: i for i in impressions}
    for click in clicks:
        impression = by_id[click["impression_id"]]
        assert (click["ad_id"], click["user_id"]) == (impression["ad_id"], impression["user_id"])
        delay = datetime.fromisoformat(click["event_time"]) - datetime.fromisoformat(impression["event_time"])
        assert timedelta(seconds=0.099) <= delay <= timedelta(seconds=0.401)

    # Seeded: the same ads, users and click decisions on every run (event times are wall-clock).
    def without_times(events: list[dict[str, str]]) -> list[tuple[str, ...]]:
        return sorted(tuple(v for k, v in e.items() if k != "event_time") for e in events)

    assert without_times(impressions) == without_times(impressions_again)
    assert without_times(clicks) == without_times(clicks_again)


def test_producer_stops_cleanly_on_sigterm(kafka: LocalKafka, topic_name: str) -> None:
    kafka.create_topics([TopicSpec(f"{topic_name}-impressions"), TopicSpec(f"{topic_name}-clicks")])
    argv = ["--bootstrap-servers", kafka.bootstrap_servers, "--topic", f"{topic_name}-impressions"]
    argv += ["--clicks-topic", f"{topic_name}-clicks", "--rate", "50", "--click-probability", "1"]
    argv += ["--malformed-share", "0"]
    process = subprocess.Popen(
        [sys.executable, "-m", "jobs.producers.ads", *argv], stdout=subprocess.PIPE, text=True
    )
    try:
        wait_for(
            lambda: len(read_all(kafka.bootstrap_servers, f"{topic_name}-impressions")) > 0,
            timeout=30,
            what="the producer's first impressions",
        )
        process.terminate()
        stdout, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    # Every impression and due click sent before the signal is flushed; clicks not yet due are dropped.
    summary = re.search(r"sent (\d+) impressions .* and (\d+) clicks .*; dropped (\d+) clicks", stdout)
    assert summary is not None, stdout
    impressions, clicks, dropped = (int(group) for group in summary.groups())
    assert impressions == len(read_all(kafka.bootstrap_servers, f"{topic_name}-impressions"))
    assert clicks == len(read_all(kafka.bootstrap_servers, f"{topic_name}-clicks"))
    assert clicks + dropped == impressions
