"""`streamstack`: set up the runtimes and run the pipeline locally.

streamstack setup                 fetch Kafka, the Spark Kafka connector and Prometheus into the cache
streamstack local up [--detach]   start Kafka, topics, producer, jobs and Prometheus; show live status
streamstack local status [--json] where everything is and how each job is doing
streamstack local down            stop a stack started with --detach (or clean up a stale one)
streamstack status [--json]       lag, status and backpressure of every job and consumer group
streamstack render --stack S --out DIR [--validate]  a Pulumi stack's manifests (under mocks), checked
streamstack panels --out F.png    the overview dashboard's lag, rate and utilization panels as a PNG
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

from streamstack import lag_status, panels, runtimes
from streamstack.errors import StreamstackError
from streamstack.flags import Flag, add_flags
from streamstack.local.live_status import open_status_display, trigger_interval_seconds
from streamstack.local.pipeline import Pipeline, streaming_pipeline
from streamstack.local.process import STOP_SIGNALS
from streamstack.local.restart_policy import RESTART_TYPES, RestartPolicy
from streamstack.local.stack import (
    CHANGELOG_SOURCES,
    DEFAULT_CHANGELOG_SOURCE,
    LocalStack,
    LocalStackOptions,
    job_statuses,
    read_state,
    require_running_state,
    state_path,
    status_document,
    stop_recorded_processes,
    supervisor_alive,
    supervisor_skipped,
)
from streamstack.local.status import render_children, render_table
from streamstack.paths import REPO_ROOT, default_workdir
from streamstack.rehearsal import run as rehearsal_run

DETACH_TIMEOUT_SECONDS = 240.0
SUPERVISE_EVERY_SECONDS = 0.5


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (and exit 2), not the whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


@dataclass(frozen=True)
class Command:
    """A subcommand: its flags and what runs it, or a group of subcommands. Every command of the CLI is an
    entry of COMMANDS, and nothing else registers one."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda _parser: None
    run: Callable[[argparse.Namespace], int] | None = None
    subcommands: tuple[Command, ...] = ()


def _add_commands(parser: argparse.ArgumentParser, dest: str, commands: Sequence[Command]) -> None:
    subparsers = parser.add_subparsers(dest=dest, required=True, parser_class=OneLineArgumentParser)
    for command in commands:
        subparser = subparsers.add_parser(command.name, help=command.help)
        command.add_arguments(subparser)
        if command.subcommands:
            _add_commands(subparser, f"{command.name}_command", command.subcommands)
        else:
            subparser.set_defaults(run=command.run)


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="streamstack", description=__doc__.splitlines()[0])
    _add_commands(parser, "command", COMMANDS)
    return parser


def _setup_arguments(setup: argparse.ArgumentParser) -> None:
    setup.add_argument("--check", action="store_true", help="only check that everything is present")
    setup.add_argument(
        "--kubernetes-tools",
        action="store_true",
        help="also build helm and actionlint (go install) and install checkov (Kubernetes-side checks)",
    )


def _setup(args: argparse.Namespace) -> int:
    return runtimes.main(
        [*(["--check"] if args.check else []), *(["--kubernetes-tools"] if args.kubernetes_tools else [])]
    )


def _stack_flags() -> tuple[Flag, ...]:
    """The flags of `local up` that shape the stack itself: a detached `up` hands each one that has a value
    on to the supervisor it starts."""
    policy = RestartPolicy()
    jobs = ", ".join(job.name for job in streaming_pipeline().jobs)
    return (
        Flag("--kafka-port", "0 picks a free port", int, 9092),
        Flag("--prometheus-port", "0 picks a free port", int, 9090),
        Flag("--metrics-port", "first job's metrics port; 0 picks free", int, 9401),
        Flag("--exporter-port", "lag exporter; 0 picks a free port", int, 9308),
        Flag("--supervisor-port", "the supervisor's restart metrics; 0 picks free", int, 9309),
        Flag("--rate", "events per second from each producer", float, 50.0),
        Flag(
            "--trigger-interval",
            "micro-batch trigger of the jobs: each job gets its own, 2%% of it apart, averaging this one",
            default="5 seconds",
        ),
        Flag("--jobs", f"run only these jobs (default all: {jobs})", metavar="NAME[,NAME]"),
        Flag(
            "--changelog-source",
            "where the users/orders changelogs come from: PostgreSQL through Debezium, or the synthetic "
            "changelog producer (no database)",
            default=DEFAULT_CHANGELOG_SOURCE,
            choices=CHANGELOG_SOURCES,
        ),
        Flag(
            "--restart-policy",
            "restartPolicy.type of charts/streaming-job: restart after any exit, a failure only, or never",
            default=policy.type,
            choices=RESTART_TYPES,
        ),
        Flag(
            "--restart-retries",
            "restarts after failures in a row; the next failure marks the child failed",
            int,
            policy.on_failure_retries,
            "N",
        ),
        Flag(
            "--restart-interval",
            "restartPolicy.onFailureRetryInterval: wait before the first restart, doubled per failure",
            float,
            policy.on_failure_retry_interval,
            "SECONDS",
        ),
    )


def _local_up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--workdir", type=Path, default=None, help="state, logs and data (default .streamstack/)")
    up.add_argument("--detach", action="store_true", help="start in the background and return")
    add_flags(up, _stack_flags())
    up.add_argument("--run-for", type=float, default=None, metavar="SECONDS", help="stop after this long")
    up.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)


def _workdir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir", type=Path, default=None, help="the local stack's (default .streamstack/)"
    )


def _local_status_arguments(status: argparse.ArgumentParser) -> None:
    _workdir_argument(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")


def _workdir(args: argparse.Namespace) -> Path:
    return (args.workdir or default_workdir()).resolve()


def _render_arguments(render: argparse.ArgumentParser) -> None:
    render.add_argument("--stack", required=True, help="the stack, e.g. dev or prod")
    render.add_argument("--out", type=Path, required=True, help="directory to write the manifests to")
    render.add_argument("--validate", action="store_true", help="check against the schemas; errors exit 1")
    render.add_argument(
        "--project-dir", type=Path, default=None, help="Pulumi.yaml's directory (default: repo)"
    )


def _rehearse(args: argparse.Namespace) -> int:
    _stop_on_signals()
    return rehearsal_run.main(args, runtimes.locate(), default_workdir().resolve() / "rehearsal")


LOCAL_COMMANDS = (
    Command("up", "start the local stack", _local_up_arguments, lambda args: _local_up(args, _workdir(args))),
    Command("down", "stop the local stack", _workdir_argument, lambda args: _local_down(_workdir(args))),
    Command(
        "status",
        "show the local stack",
        _local_status_arguments,
        lambda args: _local_status(_workdir(args), args.json),
    ),
)
COMMANDS = (
    Command("setup", "fetch and verify the pinned third-party runtimes", _setup_arguments, _setup),
    Command("local", "the pipeline on this machine", subcommands=LOCAL_COMMANDS),
    Command(
        "status",
        "lag, status and backpressure of jobs and consumer groups",
        lag_status.add_arguments,
        lag_status.run,
    ),
    Command(
        "panels",
        "render the overview panels to a PNG (no Grafana needed)",
        panels.add_arguments,
        lambda args: panels.run(args, _workdir(args)),
    ),
    Command(
        "rehearse",
        "run jobs as the cluster runs them (secured Kafka, Spark standalone), then report",
        rehearsal_run.add_arguments,
        _rehearse,
    ),
    Command(
        "render",
        "write a Pulumi stack's Kubernetes manifests (under mocks)",
        _render_arguments,
        lambda args: _render(args.stack, args.out, args.validate, args.project_dir),
    ),
)


def _stop_on_signals() -> None:
    """Ctrl-C, `kill` and a closed terminal all stop the stack (SIGINT too: a shell starting us in the
    background would otherwise have it ignored)."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    for signum in STOP_SIGNALS:
        signal.signal(signum, interrupt)


def _silence(stream: TextIO) -> None:
    """Point a stream whose reader has gone at /dev/null, so that neither the next write nor the flush at
    exit fails again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


def _say(message: str, stream: TextIO) -> None:
    try:
        print(message, file=stream, flush=True)
    except BrokenPipeError:
        _silence(stream)


def _endpoints(state: dict[str, Any]) -> str:
    lines = [
        f"Kafka bootstrap   {state['kafka']['bootstrap_servers']}",
        f"Prometheus        {state['prometheus']['url']}",
        f"lag exporter      {state['exporter']['metrics_url']}",
    ]
    if state.get("cdc"):
        lines += [
            f"PostgreSQL        {state['cdc']['postgres']}",
            f"Kafka Connect     {state['cdc']['connect_url']}  (connector {state['cdc']['connector']})",
        ]
    lines += [f"{job['name']:<17} {job['metrics_url']}  (log {job['log']})" for job in state["jobs"]]
    lines.append(f"state and logs    {state['workdir']}")
    return "\n".join(lines)


def _options(args: argparse.Namespace, workdir: Path) -> LocalStackOptions:
    if args.rate <= 0:
        raise StreamstackError(f"--rate {args.rate}: must be positive")
    return LocalStackOptions(
        workdir=workdir,
        kafka_port=args.kafka_port,
        prometheus_port=args.prometheus_port,
        metrics_port=args.metrics_port,
        exporter_port=args.exporter_port,
        supervisor_port=args.supervisor_port,
        rate=args.rate,
        trigger_interval=args.trigger_interval,
        changelog_source=args.changelog_source,
        restart_policy=RestartPolicy(
            type=args.restart_policy,
            on_failure_retries=args.restart_retries,
            on_failure_retry_interval=args.restart_interval,
        ),
    )


def _pipeline(args: argparse.Namespace) -> Pipeline:
    pipeline = streaming_pipeline()
    if args.jobs is None:
        return pipeline
    return pipeline.only([name.strip() for name in args.jobs.split(",") if name.strip()])


def _local_up(args: argparse.Namespace, workdir: Path) -> int:
    options = _options(args, workdir)
    _pipeline(args)  # a bad --jobs fails here, before anything starts
    found = runtimes.ensure(log=lambda line: print(line, file=sys.stderr))
    if args.detach:
        return _detach(args, workdir)
    _stop_on_signals()
    stack = LocalStack(found, _pipeline(args), options)
    display = open_status_display(sys.stdout, _status_tables, trigger_interval_seconds(args.trigger_interval))
    try:
        state = stack.up()
        if not args.supervised:
            print(_endpoints(state), flush=True)
            print("Ctrl-C stops everything.", flush=True)
        started = time.monotonic()
        next_render = started
        while args.run_for is None or time.monotonic() - started < args.run_for:
            for event in stack.supervise():
                display.writer.event(event)
            if not args.supervised and time.monotonic() >= next_render:
                next_render = time.monotonic() + display.every_seconds
                display.writer.frame(display.frame(state))
            time.sleep(SUPERVISE_EVERY_SECONDS)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # whoever read our output is gone (`up | tee`, then Ctrl-C): stop, as on SIGTERM
        _silence(sys.stdout)
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the teardown short
        _say("stopping the local stack ...", sys.stderr)
        stack.down()
        _say("stopped", sys.stderr)
    return 0


def _status_tables(state: dict[str, Any]) -> str:
    return render_table(job_statuses(state)) + "\n\n" + render_children(state.get("children", {}))


def _detach(args: argparse.Namespace, workdir: Path) -> int:
    """Start a supervisor in its own session, wait until it reports ready, print the endpoints."""
    existing = read_state(workdir)
    if existing is not None:
        word = "already running" if supervisor_alive(existing) else "stale state file"
        raise StreamstackError(f"{word}: {state_path(workdir)}; run `streamstack local down` first")
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "supervisor.log"
    argv = [sys.executable, "-m", "streamstack.cli", "local", "up", "--supervised", "--workdir", str(workdir)]
    for flag in _stack_flags():
        value = getattr(args, flag.dest)
        if value is not None:
            argv += [flag.name, str(value)]
    with log_path.open("ab") as log:
        supervisor = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + DETACH_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if supervisor.poll() is not None:
            last = (log_path.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise StreamstackError(f"the local stack did not start: {last} (log {log_path})")
        state = read_state(workdir)
        if state and state.get("ready"):
            print(_endpoints(state))
            print(f"running in the background (pid {supervisor.pid}); stop with `streamstack local down`")
            return 0
        time.sleep(0.5)
    supervisor.send_signal(signal.SIGTERM)
    supervisor.wait(timeout=60)
    raise StreamstackError(
        f"the local stack was not ready within {DETACH_TIMEOUT_SECONDS:.0f} s (log {log_path})"
    )


def _local_down(workdir: Path) -> int:
    state = read_state(workdir)
    if state is None:
        print(f"no local stack is running in {workdir}")
        return 0
    pid = int(state.get("supervisor_pid", 0))
    if supervisor_alive(state):
        signal_supervisor_and_wait(pid)
    elif (skipped_supervisor := supervisor_skipped(state)) is not None:
        print(skipped_supervisor)
    leftovers, skipped = stop_recorded_processes(state)
    for line in skipped:
        print(line)
    state_path(workdir).unlink(missing_ok=True)
    note = f" (also stopped leftover {', '.join(leftovers)})" if leftovers else ""
    print(f"local stack stopped{note}")
    return 0


def signal_supervisor_and_wait(pid: int, timeout: float = 90.0) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def _local_status(workdir: Path, as_json: bool) -> int:
    state = require_running_state(workdir)
    document = status_document(state)
    if as_json:
        print(json.dumps(document, indent=2))
    else:
        print(_endpoints(state))
        print()
        print(_status_tables(state))
    return 0


def _render(stack: str, out_dir: Path, validate: bool, project_dir: Path | None) -> int:
    from streamstack import render as manifests  # noqa: PLC0415 (Pulumi loads in a second: only for this command)

    rendered = manifests.render_stack(stack, project_dir=project_dir or REPO_ROOT)
    written = manifests.write_rendered(rendered, out_dir)
    print(
        f"stack {stack}: {len(rendered.manifests)} objects, {len(rendered.helm_releases)} Helm releases; "
        f"{len(written)} files in {out_dir}"
    )
    if not validate:
        return 0
    errors = manifests.validate_rendered(rendered)
    for error in errors:
        print(f"invalid: {error}", file=sys.stderr)
    print(
        f"validation against Kubernetes {rendered.kubernetes_version}, the CRDs and the charts' values: "
        + (f"{len(errors)} errors" if errors else "all valid")
    )
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StreamstackError as error:
        print(f"streamstack: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
