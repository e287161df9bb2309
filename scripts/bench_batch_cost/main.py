"""The benchmark's command line: Kafka, then each variant in a driver of its own, then the tables and JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scripts import bench_batch_cost
from scripts.bench_batch_cost.report import (
    MultiRow,
    Outcome,
    Row,
    markdown,
    multi_markdown,
    summarize,
)
from scripts.bench_batch_cost.run import Pace, Topics, driver, failure_text, job_config, run_queries
from scripts.bench_batch_cost.variants import (
    BASELINE,
    EXTRA_LEVERS,
    SINGLE_LEVERS,
    SIX,
    SIX_QUERIES,
    STATEFUL,
    STATELESS,
    Variant,
    best_combination,
)
from scripts.bench_local.main import ignore_stop_signals, interrupt_on_stop_signals, log
from scripts.bench_local.sampling import machine, versions
from streamstack import runtimes as runtime_cache
from streamstack.errors import StreamstackError
from streamstack.local.kafka import LocalKafka
from streamstack.paths import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "benchmarks"
GOALS_MS = (100.0, 200.0)  # issue 16: fixed cost per batch, stateless and stateful


class Bench:
    """The broker and the results so far; each variant gets its own topics, checkpoints and driver JVM."""

    def __init__(
        self,
        kafka: LocalKafka,
        workdir: Path,
        jars: list[str],
        pace: Pace,
        jfr_dir: Path | None = None,
        *,
        event_log_dir: Path | None = None,
    ) -> None:
        self.kafka = kafka
        self.workdir = workdir
        self.jars = jars
        self.pace = pace
        self.jfr_dir = jfr_dir
        self.event_log_dir = event_log_dir
        self.variants: list[dict[str, Any]] = []

    def measure(self, variant: Variant) -> dict[str, Any]:
        index = len(self.variants)
        if self.jfr_dir is not None:
            variant = with_flight_recording(variant, self.jfr_dir / f"{index:02d}-{variant.name}.jfr")
        if self.event_log_dir is not None:
            variant = with_event_log(variant, self.event_log_dir / f"{index:02d}-{variant.name}")
        log(f"variant {index + 1} {variant.name}: {variant.settings}")
        result: dict[str, Any] = {
            "variant": variant.name,
            "lever": variant.lever,
            "description": variant.description,
            "settings": dataclasses.asdict(variant),
            "load_before": list(os.getloadavg()),
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "runs": {},
        }
        started = time.monotonic()
        try:
            self._run(variant, index, result, started)
        except Exception as error:  # a variant that fails is recorded, and the others still run
            result["error"] = failure_text(error)
            log(f"  variant {variant.name} failed: {result['error'].splitlines()[0][:200]}")
        result["load_after"] = list(os.getloadavg())
        result["wall_seconds"] = time.monotonic() - started
        self.variants.append(result)
        return result

    def _run(self, variant: Variant, index: int, result: dict[str, Any], started: float) -> None:
        configs = {}
        for kind in variant.runs:
            topics = Topics.named(f"v{index:02d}-{kind}")
            topics.create(self.kafka)
            checkpoints = self.workdir / "checkpoints" / f"v{index:02d}-{variant.name}-{kind}"
            configs[kind] = (
                job_config(
                    variant,
                    bootstrap_servers=self.kafka.bootstrap_servers,
                    checkpoint_dir=checkpoints,
                    topics=topics,
                    pace=self.pace,
                    jars=self.jars,
                ),
                topics,
            )
        first_config = configs[variant.runs[0]][0]
        with driver(first_config.streaming, variant.progress_listener) as spark:
            result["spark_version"] = spark.version
            result["session_seconds"] = time.monotonic() - started
            for kind, (config, topics) in configs.items():
                result["runs"][kind] = run_queries(
                    spark,
                    kind,
                    config=config,
                    variant=variant,
                    topics=topics,
                    pace=self.pace,
                    kafka_pid=self.kafka.pid,
                    log=log,
                )

    def outcome(self, result: dict[str, Any], kind: str) -> Outcome:
        run = result["runs"].get(kind)
        if run is None and kind in result["settings"]["runs"]:
            return Outcome(error=result.get("error", "not run"))
        if run is None:
            return Outcome(skipped="not run: the lever cannot change this query")
        if "error" in run:
            return Outcome(error=run["error"], refused=bool(run.get("refused")))
        [query] = run["queries"].values()
        return Outcome(summary=summarize(query["progress"], self.pace.warmup, self.pace.batches))

    def medians(self, result: dict[str, Any]) -> tuple[float | None, float | None]:
        def median(kind: str) -> float | None:
            summary = self.outcome(result, kind).summary
            return summary.trigger.median if summary is not None and summary.trigger is not None else None

        return median(STATELESS), median(STATEFUL)

    def row(self, result: dict[str, Any]) -> Row:
        runs = result["runs"]
        return Row(
            variant=result["variant"],
            settings=_settings_text(result),
            stateless=self.outcome(result, STATELESS),
            stateful=self.outcome(result, STATEFUL),
            load_before=result["load_before"][0],
            load_after=result["load_after"][0],
            jvm_cpu_per_trigger=(
                runs.get(STATELESS, {}).get("jvm_cpu_per_trigger"),
                runs.get(STATEFUL, {}).get("jvm_cpu_per_trigger"),
            ),
            others_cores=_others_cores(result),
        )

    def multi_row(self, result: dict[str, Any]) -> MultiRow:
        run = result["runs"].get(SIX, {"queries": {}, "error": result.get("error", "not run")})
        queries = {
            name: summarize(query["progress"], self.pace.warmup, self.pace.batches)
            for name, query in run["queries"].items()
        }
        return MultiRow(
            variant=result["variant"],
            queries=queries,
            jvm_cpu_per_trigger=run.get("jvm_cpu_per_trigger"),
            load_before=result["load_before"][0],
            load_after=result["load_after"][0],
            others_cores=_others_cores(result),
            error=run.get("error"),
        )


def with_flight_recording(variant: Variant, recording: Path) -> Variant:
    """`variant` with JDK Flight Recorder on in its driver JVM (the `profile` settings: a Java stack sample
    every 10 ms of every thread running Java code, and parks and monitor waits over 10 ms), written to
    `recording` when the JVM exits; read it with `jfr print --events jdk.ExecutionSample <recording>`."""
    option = f"-XX:StartFlightRecording=filename={recording},settings=profile,dumponexit=true"
    return dataclasses.replace(
        variant, spark_conf={**variant.spark_conf, "spark.driver.extraJavaOptions": option}
    )


def with_event_log(variant: Variant, folder: Path) -> Variant:
    """`variant` with Spark's event log written uncompressed to `folder` (made here: Spark wants it to exist);
    read it with `python -m scripts.bench_batch_cost.event_log <folder>`."""
    folder.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(
        variant,
        spark_conf={
            **variant.spark_conf,
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": folder.resolve().as_uri(),
            "spark.eventLog.compress": "false",
        },
    )


def _others_cores(result: dict[str, Any]) -> float | None:
    """The most cores the rest of the machine used during one of the variant's runs."""
    others = [run["cores"]["others"] for run in result["runs"].values() if "cores" in run]
    return max(others) if others else None


def _settings_text(result: dict[str, Any]) -> str:
    settings = dict(result["settings"])
    settings["runs"] = tuple(settings["runs"])
    return Variant(**settings).settings


OPTIONAL_RUNS = ("best", "six-queries", "six-queries-best", "baseline-again")
"""What runs after the levers (with --only, only those named): the best combination (when a lever helped),
the six queries under the baseline and under the best combination, the baseline again (drift)."""


def run_plan(bench: Bench, only: set[str] | None) -> dict[str, Any]:
    """The baseline, each lever alone, then OPTIONAL_RUNS; with `only`, the baseline and what it names."""

    def wanted(name: str) -> bool:
        return only is None or name in only

    baseline = bench.measure(BASELINE)
    medians = {BASELINE.name: bench.medians(baseline)}
    levers = (
        list(SINGLE_LEVERS)
        if only is None
        else [variant for variant in (*SINGLE_LEVERS, *EXTRA_LEVERS) if variant.name in only]
    )
    for variant in levers:
        medians[variant.name] = bench.medians(bench.measure(variant))
    best, taken = best_combination(levers, medians)
    log(f"best combination: {', '.join(taken) or 'nothing helped'}")
    if taken and wanted("best"):
        bench.measure(best)
    if wanted("six-queries"):
        bench.measure(SIX_QUERIES)
    if taken and wanted("six-queries-best"):
        bench.measure(
            dataclasses.replace(
                best,
                name="six-queries-best",
                lever="six-best",
                description=f"the six queries under the best combination ({', '.join(taken)})",
                stateless_options={},  # the six queries are the job's own: no writer options
                runs=SIX_QUERIES.runs,
            )
        )
    if wanted("baseline-again"):
        bench.measure(
            dataclasses.replace(BASELINE, name="baseline-again", description="the baseline, last: drift")
        )
    return {"medians": medians, "best": dataclasses.asdict(best), "best_takes": taken}


def default_out() -> Path:
    return RESULTS_DIR / f"batch-cost-{datetime.now(UTC).strftime('%Y-%m-%d')}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench-batch-cost", description=(bench_batch_cost.__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--warmup", type=int, default=Pace.warmup, help="data batches left out first")
    parser.add_argument("--batches", type=int, default=Pace.batches, help="data batches measured per query")
    parser.add_argument("--records", type=int, default=Pace.records, help="page views produced per trigger")
    parser.add_argument("--trigger-seconds", type=float, default=Pace.trigger_seconds)
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated variants to run besides the baseline: levers (scripts/bench_batch_cost/"
        f"variants.py) and {', '.join(OPTIONAL_RUNS)} (default: all but the extra levers, such as retention)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="default: a new temporary one, removed after"
    )
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/batch-cost-<date>.json")
    parser.add_argument(
        "--jfr",
        type=Path,
        default=None,
        help="a folder for a JDK Flight Recording of each variant's driver JVM (<n>-<variant>.jfr)",
    )
    parser.add_argument(
        "--event-log",
        type=Path,
        default=None,
        help="a folder for Spark's event log of each variant's driver (<n>-<variant>/), read by "
        "`python -m scripts.bench_batch_cost.event_log`",
    )
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.batches < 2 or args.records < 1 or args.trigger_seconds <= 0:
        parser.error("need --warmup >= 1, --batches >= 2, --records >= 1 and --trigger-seconds > 0")
    pace = Pace(args.trigger_seconds, args.records, args.warmup, args.batches)
    only = set(args.only.split(",")) if args.only else None
    known = {variant.name for variant in (*SINGLE_LEVERS, *EXTRA_LEVERS)} | set(OPTIONAL_RUNS)
    if only is not None and not only <= known:
        parser.error(f"--only: unknown {', '.join(sorted(only - known))} (known: {', '.join(sorted(known))})")
    out = args.out or default_out()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="bench-batch-cost-"))).resolve()
    runtimes = runtime_cache.ensure(log=log)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["JAVA_HOME"] = str(runtimes.java.parent.parent)
    result: dict[str, Any] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(runtimes),
        "settings": {
            "pace": dataclasses.asdict(pace),
            "goals_ms": {"stateless": GOALS_MS[0], "stateful": GOALS_MS[1]},
            "workdir": str(workdir),
        },
    }
    started = time.monotonic()
    kafka = LocalKafka(runtimes, workdir / "kafka", port=0, java_options=())
    interrupt_on_stop_signals()
    try:
        log(f"starting Kafka in {workdir / 'kafka'}")
        kafka.start()
        jfr_dir = args.jfr.resolve() if args.jfr else None
        if jfr_dir is not None:
            jfr_dir.mkdir(parents=True, exist_ok=True)
        bench = Bench(
            kafka,
            workdir,
            [str(jar) for jar in runtimes.spark_kafka_jars],
            pace,
            jfr_dir,
            event_log_dir=args.event_log.resolve() if args.event_log else None,
        )
        try:
            result["plan"] = run_plan(bench, only)
        finally:
            result["variants"] = bench.variants
    except KeyboardInterrupt:
        log("interrupted: everything is stopped, no results written")
        return 130
    except StreamstackError as error:
        log(f"error: {error}")
        return 1
    finally:
        ignore_stop_signals()
        log("stopping Kafka")
        kafka.stop()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    result["wall_seconds"] = time.monotonic() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")  # the raw results first, whatever the tables do
    single = [bench.row(variant) for variant in bench.variants if SIX not in variant["runs"]]
    multi = [bench.multi_row(variant) for variant in bench.variants if SIX in variant["runs"]]
    table = markdown(single, GOALS_MS) + ("\n" + multi_markdown(multi) if multi else "")
    result["table"] = table
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table)
    print(f"raw results: {out} ({len(bench.variants)} variants, {result['wall_seconds']:.0f} s in all)")
    return 0
