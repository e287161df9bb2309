"""The benchmark's command line: start the stack, wait, sample, stop it, then the table and the JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from scripts import bench_local
from scripts.bench_local.report import Goals, Sample, evaluate, markdown
from scripts.bench_local.sampling import CpuMeter, machine, promql, take_sample, versions
from streamstack import runtimes as runtime_cache
from streamstack.cli import SUPERVISE_EVERY_SECONDS
from streamstack.errors import StreamstackError
from streamstack.local.identity import ProcessIdentity
from streamstack.local.pipeline import streaming_pipeline
from streamstack.local.process import STOP_SIGNALS
from streamstack.local.stack import LocalStack, LocalStackOptions, job_statuses, stop_recorded_processes
from streamstack.paths import REPO_ROOT

DEFAULT_WARMUP_SECONDS = 300.0
DEFAULT_MEASURE_SECONDS = 300.0
DEFAULT_SAMPLE_SECONDS = 30.0
RESULTS_DIR = REPO_ROOT / "benchmarks"


def log(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def interrupt_on_stop_signals() -> None:
    """Ctrl-C, `kill` and a closed terminal raise KeyboardInterrupt, so the stack is stopped in `finally`."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    for signum in STOP_SIGNALS:
        signal.signal(signum, interrupt)


def ignore_stop_signals() -> None:
    """While the stack stops: a second Ctrl-C must not cut the teardown short."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


class Run:
    """The stack under measurement, supervised as `streamstack local up` supervises it."""

    def __init__(self, stack: LocalStack, state: dict[str, Any]) -> None:
        self.stack = stack
        self.state = state
        self.events: list[dict[str, Any]] = []

    def supervise_until(self, deadline: float) -> None:
        """Restart what the restart policy says until `deadline` (monotonic); StreamstackError if Kafka or
        Prometheus died."""
        while True:
            for event in self.stack.supervise():
                log(event)
                self.events.append({"at": time.time(), "event": event})
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(SUPERVISE_EVERY_SECONDS, left))

    def wait_until_running(self, timeout: float) -> None:
        """Until every job's main query reports itself active."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            statuses = job_statuses(self.state)
            if all(status.state == "running" for status in statuses):
                return
            if given_up := [status.name for status in statuses if status.state == "failed"]:
                raise StreamstackError(f"jobs failed while starting: {', '.join(given_up)}")
            self.supervise_until(time.monotonic() + 2.0)
        waiting = [f"{status.name} {status.state}" for status in job_statuses(self.state)]
        raise StreamstackError(f"not every job was running after {timeout:.0f} s: {', '.join(waiting)}")


def leftover_processes(workdir: Path) -> list[str]:
    """Live processes whose command line names the stack's work directory (none once it has stopped)."""
    ours = {os.getpid(), os.getppid()}  # a --workdir on our own command line, or make's, is no leftover
    leftovers = []
    for process_dir in Path("/proc").glob("[0-9]*"):
        identity = ProcessIdentity.of(int(process_dir.name))
        if identity is None or identity.pid in ours:
            continue
        if any(str(workdir) in arg for arg in identity.cmdline):
            leftovers.append(f"{identity.pid} {' '.join(identity.cmdline)[:120]}")
    return leftovers


def measure(args: argparse.Namespace, workdir: Path) -> tuple[dict[str, Any], list[Sample]]:
    """Start the stack at `local up`'s defaults (own work directory, free ports), wait for every job, warm up,
    sample, and stop everything, however this ends; the raw results and the samples."""
    runtimes = runtime_cache.ensure(log=log)
    options = LocalStackOptions.on_free_ports(workdir)
    pipeline = streaming_pipeline()
    if args.jobs:
        pipeline = pipeline.only(args.jobs.split(","))
    result: dict[str, Any] = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(runtimes),
        "settings": {
            "stack": {**dataclasses.asdict(options), "workdir": str(workdir)},
            "jobs": [job.name for job in pipeline.jobs],
            "producers": [producer.name for producer in pipeline.producers],
            "warmup_seconds": args.warmup_seconds,
            "measure_seconds": args.measure_seconds,
            "sample_seconds": args.sample_seconds,
            "goals": dataclasses.asdict(Goals()),
            "promql": promql(args.sample_seconds),
        },
    }
    stack = LocalStack(runtimes, pipeline, options)
    samples: list[Sample] = []
    run: Run | None = None
    started = time.monotonic()
    interrupt_on_stop_signals()
    try:
        log(f"starting the local stack in {workdir}")
        run = Run(stack, stack.up())
        result["stack_ready_seconds"] = time.monotonic() - started
        prometheus_url = run.state["prometheus"]["url"]
        log(f"stack ready after {result['stack_ready_seconds']:.0f} s; Prometheus {prometheus_url}")
        run.wait_until_running(args.start_timeout_seconds)
        running_at = time.monotonic()
        result["jobs_running_seconds"] = running_at - started
        log(f"every job running after {result['jobs_running_seconds']:.0f} s; warming up")
        run.supervise_until(running_at + args.warmup_seconds)
        cpu = CpuMeter()
        cpu.start(run.state["processes"])
        count = max(1, round(args.measure_seconds / args.sample_seconds))
        for index in range(1, count + 1):
            offset = args.warmup_seconds + index * args.sample_seconds
            run.supervise_until(running_at + offset)
            sample = take_sample(prometheus_url, cpu, run.state["processes"], offset, args.sample_seconds)
            samples.append(sample)
            highest = max((query.utilization_max or 0.0 for query in sample.queries.values()), default=0.0)
            log(
                f"sample {index}/{count}: utilization max {highest:.2f}, {len(sample.alerts)} alerts, "
                f"load {sample.load_average[0]:.2f}"
                + (f", errors: {'; '.join(sample.errors)}" if sample.errors else "")
            )
    finally:
        ignore_stop_signals()
        last_state = json.loads(json.dumps(run.state)) if run is not None else {}
        log("stopping the local stack ...")
        stack.down()
        stopped, skipped = stop_recorded_processes(last_state)
        running = leftover_processes(workdir)
        log(f"stopped; leftovers stopped afterwards: {', '.join(stopped) or 'none'}")
        for line in [*skipped, *running]:
            log(f"still running: {line}")
    result["children"] = last_state.get("children", {})
    result["supervisor_events"] = run.events if run is not None else []
    result["left_over_after_stop"] = {"stopped": stopped, "skipped": skipped, "running": running}
    result["wall_seconds"] = time.monotonic() - started
    result["samples"] = [dataclasses.asdict(sample) for sample in samples]
    return result, samples


def default_out(warmup: float, measure_seconds: float, sample: float) -> Path:
    """benchmarks/local-<date>.json at the default durations, else named after the durations."""
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    if (warmup, measure_seconds, sample) == (
        DEFAULT_WARMUP_SECONDS,
        DEFAULT_MEASURE_SECONDS,
        DEFAULT_SAMPLE_SECONDS,
    ):
        return RESULTS_DIR / f"local-{date}.json"
    return RESULTS_DIR / f"local-{date}-warmup{warmup:g}-measure{measure_seconds:g}-sample{sample:g}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench-local", description=(bench_local.__doc__ or "").splitlines()[0]
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=DEFAULT_WARMUP_SECONDS,
        help="after every job runs, before the first sample interval",
    )
    parser.add_argument(
        "--measure-seconds", type=float, default=DEFAULT_MEASURE_SECONDS, help="sampled after the warm-up"
    )
    parser.add_argument(
        "--sample-seconds", type=float, default=DEFAULT_SAMPLE_SECONDS, help="one sample per interval"
    )
    parser.add_argument(
        "--start-timeout-seconds", type=float, default=600.0, help="for every job to run once the stack is up"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="the stack's (default: a new temporary one, removed after)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="raw results JSON (default benchmarks/local-<date>.json)"
    )
    parser.add_argument(
        "--jobs",
        default=None,
        metavar="NAME[,NAME]",
        help="only these jobs and the producers they need (default all, as `make up`): a job's own cost",
    )
    args = parser.parse_args(argv)
    if args.jobs:
        try:
            streaming_pipeline().only(args.jobs.split(","))
        except StreamstackError as error:
            parser.error(str(error))
    if args.warmup_seconds < 0 or args.sample_seconds < 4 or args.measure_seconds < args.sample_seconds:
        parser.error(
            "need --warmup-seconds >= 0, --sample-seconds >= 4 (two scrapes) and <= --measure-seconds"
        )
    out = args.out or default_out(args.warmup_seconds, args.measure_seconds, args.sample_seconds)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="bench-local-"))).resolve()
    try:
        result, samples = measure(args, workdir)
    except KeyboardInterrupt:
        log("interrupted: everything is stopped, no results written")
        return 130
    except StreamstackError as error:
        log(f"error: {error} (the stack's logs: {workdir / 'run' / 'logs'})")
        return 1
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    evaluation = evaluate(samples, Goals())
    table = markdown(evaluation)
    result["evaluation"] = dataclasses.asdict(evaluation) | {
        "utilization_ok": evaluation.utilization_ok,
        "lag_ok": evaluation.lag_ok,
        "alerts_ok": evaluation.alerts_ok,
        "passed": evaluation.passed,
    }
    result["table"] = table
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table)
    print(f"raw results: {out} ({len(samples)} samples, {result['wall_seconds']:.0f} s in all)")
    return 0
