"""The batch-cost benchmark's pure parts: which batches count, summaries, the variants and the
best combination, the plan, the jobs' config per variant, the writer options, the tables and when records
are produced; from synthetic progress and stand-ins, no Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from jobs.common.config import StreamingJobConfig
from scripts.bench_batch_cost.event_log import batches as event_log_batches
from scripts.bench_batch_cost.event_log import read_events
from scripts.bench_batch_cost.event_log import report as event_log_report
from scripts.bench_batch_cost.jfr import aggregate, report, thread_group
from scripts.bench_batch_cost.main import Bench, run_plan, with_event_log, with_flight_recording
from scripts.bench_batch_cost.report import (
    MultiRow,
    Outcome,
    Row,
    markdown,
    measured_batches,
    multi_markdown,
    summarize,
)
from scripts.bench_batch_cost.run import Pace, Topics, job_config, next_round_at
from scripts.bench_batch_cost.variants import (
    ASYNC_PROGRESS,
    BASELINE,
    EXTRA_LEVERS,
    ROCKSDB,
    SECOND_ROUND,
    SINGLE_LEVERS,
    SIX,
    STATEFUL,
    STATELESS,
    Variant,
    best_combination,
)


def progress(batch_id: int, rows: int, trigger: int, **phases: int) -> dict[str, Any]:
    return {
        "batchId": batch_id,
        "numInputRows": rows,
        "timestamp": f"2026-11-25T20:00:{batch_id:02d}.000Z",
        "durationMs": {"triggerExecution": trigger, **phases},
    }


def test_warmup_and_no_data_batches_are_counted_apart() -> None:
    progresses = [
        progress(0, 0, 3000),  # the first trigger on an empty topic
        progress(1, 5, 900),  # warm-up
        progress(2, 5, 400),  # warm-up
        progress(3, 0, 50),  # a no-data batch before the first measured one: left out
        progress(4, 5, 300),
        progress(5, 0, 60),  # between measured data batches: counted
        progress(6, 10, 200),
        progress(7, 5, 100),
        progress(8, 0, 70),  # after the last measured batch: left out
        progress(9, 5, 999),  # beyond the count
    ]
    # Out of order and one repeated, as a reader may see them.
    data, no_data = measured_batches([*reversed(progresses), progresses[4]], warmup=2, count=3)
    assert [batch.batch_id for batch in data] == [4, 6, 7]
    assert [batch.batch_id for batch in no_data] == [5]


def test_summary_medians_p90_and_dominant_phases() -> None:
    progresses = [progress(0, 5, 5000, addBatch=4000, walCommit=500)] + [
        progress(
            batch_id,
            5 if batch_id % 2 else 7,
            100 * batch_id,
            addBatch=60 * batch_id,
            walCommit=20 * batch_id,
            commitOffsets=10 * batch_id,
            latestOffset=5,
        )
        for batch_id in range(1, 11)
    ]

    summary = summarize(progresses, warmup=1, count=20)

    assert (summary.batches, summary.no_data_batches) == (10, 0)
    assert summary.trigger is not None
    assert summary.trigger.median == 550.0  # batches 1..10: 100..1000 ms
    assert summary.trigger.p90 == pytest.approx(910.0)
    assert summary.phases["addBatch"].median == 330.0
    assert summary.phases["latestOffset"].p90 == 5.0
    assert "getBatch" not in summary.phases  # not reported, not invented
    assert summary.input_rows_median == 6.0
    assert summary.dominant_phases() == [("addBatch", 330.0), ("walCommit", 110.0)]
    assert summary.no_data_trigger is None


def test_best_combination_takes_what_helped_per_lever() -> None:
    shuffle_1 = Variant("shuffle-1", "shuffle", "", shuffle_partitions=1, runs=(STATEFUL,))
    shuffle_2 = Variant("shuffle-2", "shuffle", "", shuffle_partitions=2, runs=(STATEFUL,))
    rocksdb = Variant(
        "rocksdb", "state-store", "", spark_conf={"spark.sql.streaming.stateStore.providerClass": ROCKSDB}
    )
    asynchronous = Variant("async", "async", "", stateless_options=ASYNC_PROGRESS, runs=(STATELESS,))
    aqe = Variant("aqe-off", "aqe", "", spark_conf={"spark.sql.adaptive.enabled": "false"})
    fetch = Variant("fetch", "fetch-wait", "", fetch_max_wait_ms=50)
    medians: dict[str, tuple[float | None, float | None]] = {
        BASELINE.name: (300.0, 400.0),
        "shuffle-1": (None, 300.0),
        "shuffle-2": (None, 280.0),  # the larger gain of the two shuffle variants
        "rocksdb": (None, 380.0),  # 5 %: within the drift, not taken
        "async": (200.0, None),
        "aqe-off": (None, 410.0),
        "fetch": (100.0, 390.0),  # helped the stateless query only: the fetch wait is every query's
    }

    best, taken = best_combination([shuffle_1, shuffle_2, rocksdb, asynchronous, aqe, fetch], medians)

    assert taken == ["async", "fetch", "shuffle-2"]
    assert best.description == "every lever that helped: async, fetch, shuffle-2"
    assert best.shuffle_partitions == 2
    assert best.fetch_max_wait_ms == 50
    assert best.spark_conf == {}
    assert best.stateless_options == ASYNC_PROGRESS
    assert best.runs == (STATELESS, STATEFUL)
    assert best.settings == (
        "spark.sql.shuffle.partitions=2, --kafka-fetch-max-wait-ms 50, "
        "stateless asyncProgressTrackingEnabled=true"
    )

    # Kafka's default fetch wait no longer helps: the combination keeps the jobs' 1 ms.
    [default_wait] = [variant for variant in SINGLE_LEVERS if variant.lever == "fetch-wait"]
    kept, kept_taken = best_combination(
        [default_wait], {BASELINE.name: (300.0, 400.0), default_wait.name: (900.0, 1000.0)}
    )
    assert kept_taken == []
    assert kept.fetch_max_wait_ms == 1

    nothing, none_taken = best_combination([aqe], {BASELINE.name: (300.0, 400.0), "aqe-off": (None, 395.0)})
    assert none_taken == []
    assert nothing.settings == "the jobs' current settings"


def test_tables() -> None:
    fast = summarize([progress(i, 5, 80 + i, addBatch=50 + i, walCommit=20) for i in range(4)], 1, 10)
    rows = [
        Row(
            "baseline",
            BASELINE.settings,
            Outcome(summary=fast),
            Outcome(summary=fast),
            1.0,
            1.5,
            (0.2, 0.3),
            0.4,
        ),
        Row(
            "async-progress",
            "stateful asyncProgressTrackingEnabled=true",
            Outcome(skipped="not run"),
            Outcome(error="Stateful streaming queries does not support async progress", refused=True),
            1.5,
            1.25,
        ),
    ]
    lines = markdown(rows).splitlines()
    assert lines[0].startswith("| variant | stateless trigger median / p90 ms (goal 100) | stateful")
    assert lines[2] == (
        "| baseline | 82 / 83 | 82 / 83 | addBatch 52, walCommit 20 | addBatch 52, walCommit 20 | 0.20; 0.30 "
        "| 0.40 | 1.00 → 1.50 | the jobs' current settings |"
    )
    assert lines[3] == (
        "| async-progress | n/a | refused | - | - | -; - | - | 1.50 → 1.25 "
        "| stateful asyncProgressTrackingEnabled=true |"
    )

    multi = multi_markdown(
        [
            MultiRow("six-queries", {"a": fast, "b": fast}, 1.6, 2.0, 3.0, 0.5),
            MultiRow("six-queries-best", {}, None, 3.0, 3.0, error="Query a failed\nat ..."),
        ]
    ).splitlines()
    assert multi[2] == "| six-queries | a | 82 / 83 | 3 | 1.60 | 0.50 | 2.00 → 3.00 |"
    assert multi[3] == "| six-queries | b | 82 / 83 | 3 | 1.60 | 0.50 | 2.00 → 3.00 |"
    assert multi[4] == "| six-queries-best | - | failed: Query a failed | - | - | - | 3.00 → 3.00 |"


def test_records_arrive_mid_interval() -> None:
    assert next_round_at(10.2, 1.0) == 10.5
    assert next_round_at(10.5, 1.0) == 11.5
    assert next_round_at(10.6, 1.0) == 11.5
    assert next_round_at(101.0, 2.0) == 103.0
    assert next_round_at(103.5, 2.0) == 105.0


def test_the_baseline_is_the_jobs_settings_and_the_lever_their_old_fetch_wait() -> None:
    assert (BASELINE.shuffle_partitions, BASELINE.fetch_max_wait_ms) == (4, 1)
    assert StreamingJobConfig.fetch_max_wait_ms == 1
    assert BASELINE.settings == "the jobs' current settings"
    levers = {variant.name: variant for variant in SINGLE_LEVERS}
    default_wait = levers["kafka-default-fetch-wait"]
    assert default_wait.fetch_max_wait_ms == 500
    assert default_wait.runs == (STATELESS, STATEFUL)
    assert default_wait.settings == "--kafka-fetch-max-wait-ms 500"
    ten = {variant.name: variant for variant in EXTRA_LEVERS}["fetch-wait-10"]
    assert (ten.fetch_max_wait_ms, ten.runs, ten.settings) == (
        10,
        (STATELESS, STATEFUL),
        "--kafka-fetch-max-wait-ms 10",
    )
    # Spark refuses async progress tracking for a stateful query: the lever runs the stateless one only.
    assert levers["async-progress"].runs == (STATELESS,)
    assert all(not variant.stateless_options or variant.runs == (STATELESS,) for variant in SINGLE_LEVERS)


def test_a_variant_runs_the_window_job_with_its_flags(tmp_path: Path) -> None:
    topics = Topics.named("v03-six")
    variant = Variant(
        "v",
        "lever",
        "",
        spark_conf={"spark.sql.adaptive.enabled": "false"},
        shuffle_partitions=2,
        fetch_max_wait_ms=500,
    )

    config = job_config(
        variant,
        bootstrap_servers="127.0.0.1:9092",
        checkpoint_dir=tmp_path,
        topics=topics,
        pace=Pace(trigger_seconds=0.5),
        jars=["a.jar", "b.jar"],
    )

    streaming = config.streaming
    assert streaming.fetch_max_wait_ms == 500
    assert streaming.shuffle_partitions == 2
    assert streaming.spark_conf["spark.sql.adaptive.enabled"] == "false"
    assert streaming.spark_conf["spark.ui.enabled"] == "false"
    assert streaming.trigger_interval == "500 milliseconds"
    assert streaming.extra_jars == ("a.jar", "b.jar")
    assert (config.input_topic, config.output_topic) == ("v03-six-views", "v03-six-per-url")
    assert (config.windows_topic, config.late_topic) == ("v03-six-windows", "v03-six-late")
    assert streaming.dead_letter_topic == "v03-six-dl"
    baseline = job_config(
        BASELINE,
        bootstrap_servers="127.0.0.1:9092",
        checkpoint_dir=tmp_path,
        topics=topics,
        pace=Pace(),
        jars=[],
    )
    assert baseline.streaming.fetch_max_wait_ms == StreamingJobConfig.fetch_max_wait_ms


class FakeBench:
    """Records what the plan measures; every variant's medians come from `medians`."""

    def __init__(self, medians: dict[str, tuple[float | None, float | None]]) -> None:
        self.measured: list[Variant] = []
        self._medians = medians

    def measure(self, variant: Variant) -> dict[str, Any]:
        self.measured.append(variant)
        return {"variant": variant.name}

    def medians(self, result: dict[str, Any]) -> tuple[float | None, float | None]:
        return self._medians.get(result["variant"], (None, None))


def test_the_plan() -> None:
    shuffle_helps = FakeBench({"baseline": (300.0, 400.0), "shuffle-2": (None, 200.0)})

    plan = run_plan(cast(Bench, shuffle_helps), None)

    names = [variant.name for variant in shuffle_helps.measured]
    assert names == [
        "baseline",
        *(variant.name for variant in SINGLE_LEVERS),
        "best",
        "six-queries",
        "six-queries-best",
        "baseline-again",
    ]
    assert plan["best_takes"] == ["shuffle-2"]
    six_best = shuffle_helps.measured[-2]
    assert (six_best.runs, six_best.shuffle_partitions, six_best.fetch_max_wait_ms) == ((SIX,), 2, 1)
    assert shuffle_helps.measured[-1].settings == "the jobs' current settings"

    nothing_helps = FakeBench({"baseline": (300.0, 400.0), "kafka-default-fetch-wait": (900.0, 1000.0)})
    run_plan(cast(Bench, nothing_helps), {"kafka-default-fetch-wait"})
    assert [variant.name for variant in nothing_helps.measured] == ["baseline", "kafka-default-fetch-wait"]

    with_six = FakeBench({"baseline": (300.0, 400.0)})
    run_plan(cast(Bench, with_six), {"retention", "six-queries", "baseline-again"})
    assert [variant.name for variant in with_six.measured] == [
        "baseline",
        "retention",
        "six-queries",
        "baseline-again",
    ]


def test_the_second_round_levers_and_their_settings() -> None:
    levers = {variant.name: variant for variant in SECOND_ROUND}
    assert set(levers) <= {variant.name for variant in EXTRA_LEVERS}  # run only when named with --only
    raw = levers["raw-local-fs"]
    assert raw.spark_conf == {
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    }
    assert raw.runs == (STATELESS, STATEFUL)
    assert levers["locality-wait-0"].runs == (STATEFUL,)  # no shuffle or state in the stateless query
    assert levers["no-progress-listener"].settings == "no progress listener"
    assert not levers["no-progress-listener"].progress_listener
    combined = levers["state-combined"]
    assert (combined.shuffle_partitions, combined.spark_conf["spark.locality.wait"]) == (1, "0s")
    # Hadoop's checksummed default, the jobs' settings before: one lever group, so never both combined.
    assert levers["checksum-fs"].spark_conf == {
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
    }
    assert levers["checksum-fs"].lever == raw.lever
    assert len({variant.lever for variant in SECOND_ROUND}) == len(SECOND_ROUND) - 1


def test_a_flight_recording_is_a_driver_java_option(tmp_path: Path) -> None:
    recorded = with_flight_recording(BASELINE, tmp_path / "00-baseline.jfr")

    option = recorded.spark_conf["spark.driver.extraJavaOptions"]
    assert option == (
        f"-XX:StartFlightRecording=filename={tmp_path / '00-baseline.jfr'},settings=profile,dumponexit=true"
    )
    assert BASELINE.spark_conf == {}  # the variant itself is unchanged


def _frame(owner: str, method: str) -> dict[str, Any]:
    return {"method": {"type": {"name": owner}, "name": method}}


def test_flight_recording_time_per_thread_group() -> None:
    stream = "stream execution thread for clickstream-windows [id = 0f3e, runId = 9a1]"
    events: list[dict[str, Any]] = [
        {
            "type": "jdk.ExecutionSample",
            "values": {
                "sampledThread": {"javaName": stream},
                "stackTrace": {
                    "frames": [
                        _frame("java.io.FileOutputStream", "write"),
                        _frame("org.apache.spark.sql.execution.streaming.HDFSMetadataLog", "add"),
                    ]
                },
            },
        }
        for _ in range(3)
    ]
    events.append(
        {
            "type": "jdk.ExecutionSample",
            "values": {
                "sampledThread": {
                    "javaName": "Executor task launch worker for task 1.0 in stage 4.0 (TID 7)"
                },
                "stackTrace": {"frames": [_frame("org.apache.spark.executor.Executor$TaskRunner", "run")]},
            },
        }
    )
    events.append(
        {
            "type": "jdk.ThreadPark",
            "values": {"eventThread": {"javaName": stream}, "duration": "PT0.25S"},
        }
    )
    events.append(
        {
            "type": "jdk.JavaMonitorWait",
            "values": {"eventThread": {"javaName": stream}, "duration": 50_000_000},
        }
    )

    groups = aggregate(events)

    stream_group = groups[thread_group(stream)]
    assert thread_group(stream) == "stream execution thread for clickstream-windows [id = #]"
    assert stream_group.samples == 3
    assert stream_group.cpu_s == pytest.approx(0.03)
    assert stream_group.waits_s == {"jdk.ThreadPark": 0.25, "jdk.JavaMonitorWait": 0.05}
    assert stream_group.top_spark.most_common(1) == [
        ("org.apache.spark.sql.execution.streaming.HDFSMetadataLog.add", 3)
    ]
    worker = groups["Executor task launch worker for task #.# in stage #.# (TID #)"]
    assert worker.samples == 1
    text = report(groups, batches=2)
    assert "CPU 15; waits JavaMonitorWait 25, ThreadPark 125" in text


def _job_start(job: int, stages: list[int], at: int, description: str | None) -> dict[str, Any]:
    properties = {"spark.job.description": description} if description else {}
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job,
        "Submission Time": at,
        "Stage IDs": stages,
        "Properties": properties,
    }


def _task_end(stage: int, launched: int, run: int, cpu_ms: int, records: int) -> dict[str, Any]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Task Info": {"Launch Time": launched},
        "Task Metrics": {
            "Executor Run Time": run,
            "Executor CPU Time": cpu_ms * 1_000_000,
            "Executor Deserialize Time": 2,
            "Input Metrics": {"Records Read": records},
        },
    }


def test_an_event_log_gives_each_batchs_jobs_and_task_waits(tmp_path: Path) -> None:
    recorded = with_event_log(BASELINE, tmp_path / "00-baseline")
    assert recorded.spark_conf == {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": (tmp_path / "00-baseline").as_uri(),
        "spark.eventLog.compress": "false",
    }
    assert (tmp_path / "00-baseline").is_dir()  # Spark refuses an event log folder that does not exist

    def description(batch: int) -> str:
        return f"decoded-views\nid = 62be\nrunId = 14ad\nbatch = {batch}"

    first = [
        _job_start(0, [0], 1_000, description(0)),
        _task_end(0, 1_005, 20, 5, 2),
        _task_end(0, 1_007, 30, 6, 3),
        {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": 1_040},
        _job_start(1, [1], 1_050, None),  # not a streaming batch's job: left out
        _task_end(1, 1_051, 500, 500, 9),
        {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 1_600},
    ]
    second = [
        _job_start(2, [2], 3_000, description(1)),
        _task_end(2, 3_010, 40, 10, 0),  # no records read: not a data batch
        {"Event": "SparkListenerJobEnd", "Job ID": 2, "Completion Time": 3_050},
    ]
    folder = tmp_path / "00-baseline" / "eventlog_v2_local-1"
    folder.mkdir()
    (folder / "events_2_local-1").write_text(
        "\n".join(json.dumps(event) for event in second) + '\n{"Event": "Sp'
    )
    (folder / "events_1_local-1").write_text("\n".join(json.dumps(event) for event in first) + "\n")

    measured = event_log_batches(read_events(tmp_path / "00-baseline"))

    assert [(batch.query, batch.batch) for batch in measured] == [("decoded-views", 0), ("decoded-views", 1)]
    data = measured[0]
    assert (data.jobs_ms, data.to_first_task_ms, data.tasks, data.records_read) == (40, 5, 2, 5)
    assert (data.run_ms, data.cpu_ms, data.waiting_ms, data.deserialize_ms) == (50, 11, 39, 4)
    table = event_log_report(measured, last=20).splitlines()
    assert table[2] == "| decoded-views | 1 | 40.0 | 5.0 | 2.0 | 50.0 | 11.0 | 39.0 | 4.0 |"
