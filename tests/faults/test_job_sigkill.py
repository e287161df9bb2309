"""SIGKILL of a supervised job (issue 15): restarted, resumes from its checkpoint, output exact.

A LocalStack in this process runs the catalogue's clickstream-windows job alone (pipeline.yaml's topics and
settings, no producer), so the test alone writes its input: a fixed event set, one second of event time at a
time. After a few batches the job's process group (driver and JVM) is SIGKILLed, as a node failure would,
while a batch is in flight if one is; the rest of the input is produced while it restarts. The test keeps
calling `supervise()`, as `local up` does, until the job is back and has read the whole input, then checks:
one restart, in the supervisor's state and metrics; the restarted driver's first batch is the one after the
last batch committed before the kill (it resumed from its checkpoint: a fresh one begins at batch 0); the
output topic read as latest value per key equals an independent count with the window the job really uses.
The times from the kill to the restarted driver's first batch and to the complete output are printed, not
asserted (they vary several-fold with the machine's load).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from contracts.durations import duration_seconds
from contracts.pipeline import load_pipeline
from streamstack.local.pipeline import Pipeline, streaming_pipeline
from streamstack.local.process import process_group_alive
from streamstack.local.restart_policy import RestartPolicy
from streamstack.local.stack import LocalStack, LocalStackOptions
from streamstack.local.status import read_job_status
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import iso, views_per_key
from tests.jobs.test_exactly_once import BASE, batch_files, events, produce_fast
from tests.kafka_helpers import metric_sum, read_records, scrape, wait_for
from tests.streamstack.local.test_restarts import RESTARTS
from tests.streamstack.local.test_supervision import MARKER, kill_leftovers, stack_processes

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "clickstream-windows"
EVENTS = 4_000  # 80 s of event time, 50 events a second (tests.jobs.test_exactly_once.events)
AFTER_KILL = 1_000  # at least these last events are produced after the kill
CHUNK = 50  # one second of event time (events() shuffles within it), flushed before the next is sent
CHUNK_SECONDS = 1.0
CHUNK_INTERVAL = 0.2  # wall-clock seconds between chunks before the kill
AHEAD = 400  # events produced before the kill run ahead of the job's planned batches by this at most
BATCHES_BEFORE_KILL = 3
RESTART_INTERVAL = 1.0


def catalogue_setting_seconds(flag: str) -> float:
    """A duration setting of the job as pipeline.yaml gives it, the one `local up` passes."""
    return duration_seconds(dict(load_pipeline().job(JOB).settings)[flag])


def views_per_window(sent: list[tuple[str, str, float]], window_seconds: float) -> dict[str, int]:
    """The independent count: each event's time in whole milliseconds (as produce_fast writes it), its
    tumbling window aligned to the epoch (as Spark aligns windows), views per `<window start>|<url>`."""
    window_ms = round(window_seconds * 1000)
    base_ms = round(BASE.timestamp() * 1000)
    counts: Counter[str] = Counter()
    for _, url, seconds in sent:
        event_ms = base_ms + round(seconds * 1000)
        start = datetime.fromtimestamp((event_ms - event_ms % window_ms) / 1000, UTC)
        counts[f"{iso(start)}|{url}"] += 1
    return dict(counts)


def commits_since(query_checkpoint: Path, since: float) -> list[int]:
    """Batches whose commit was written after `since` (Unix time), in order."""
    commits = query_checkpoint / "commits"
    return sorted(
        batch
        for batch in batch_files(query_checkpoint, "commits")
        if (commits / str(batch)).stat().st_mtime > since
    )


@pytest.fixture
def stack_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A marker in the environment that every process of the stack inherits; whatever is left is killed."""
    marker = str(tmp_path)
    monkeypatch.setenv(MARKER, marker)
    try:
        yield marker
    finally:
        kill_leftovers(marker)


@pytest.mark.timeout(900)
def test_a_sigkilled_job_is_restarted_by_the_supervisor_and_resumes_to_the_exact_output(
    runtimes: Runtimes, tmp_path: Path, stack_marker: str
) -> None:
    window_seconds = catalogue_setting_seconds("--window-duration")
    # While a chunk is produced, an event not yet read trails the newest one read by under a chunk's span.
    assert catalogue_setting_seconds("--watermark-delay") >= CHUNK_SECONDS, (
        "the catalogue's watermark delay is under the test's disorder: the count would depend on timing"
    )
    catalogue = streaming_pipeline()
    options = LocalStackOptions.on_free_ports(
        tmp_path / "stack",
        trigger_interval="1 second",
        restart_policy=RestartPolicy(on_failure_retry_interval=RESTART_INTERVAL),
    )
    stack = LocalStack(runtimes, Pipeline(catalogue.topics, (), catalogue.only([JOB]).jobs), options)
    try:
        _kill_and_resume(stack, stack.up(), events()[:EVENTS], window_seconds)
    finally:
        stack.down()
    assert stack_processes(stack_marker) == []


def _kill_and_resume(
    stack: LocalStack, state: dict[str, Any], sent: list[tuple[str, str, float]], window_seconds: float
) -> None:
    job_topics = dict(load_pipeline().job(JOB).topics)
    input_topic, output_topic = job_topics["--input-topic"], job_topics["--output-topic"]
    bootstrap = state["kafka"]["bootstrap_servers"]
    [job] = state["jobs"]  # updated in place by the supervisor: a restarted job's pid
    query_checkpoint = Path(job["checkpoint_dir"]) / JOB
    log: list[str] = []

    def supervised(condition: Callable[[], bool]) -> Callable[[], bool]:
        """A round of supervision, a check that the job was restarted at most once, then `condition`."""

        def check() -> bool:
            log.extend(stack.supervise())
            child = state["children"][JOB]
            assert child["state"] != "failed" and child["restarts"] <= 1, f"{child}; supervisor: {log}"
            return condition()

        return check

    def offsets_read() -> float:
        return metric_sum(scrape(job["metrics_url"]), "streamstack_query_source_end_offset", query=JOB)

    # Once the query runs, a chunk at a time and a few chunks ahead of the job, so that batches stay small
    # and the next one has input, until a few batches are committed and one is in flight (or, once the
    # events before the kill are all sent, until a few are committed).
    wait_for(
        supervised(lambda: read_job_status(JOB, job["metrics_url"], True).state == "running"),
        timeout=240,
        what=f"the job's query to start (log {job['log']})",
    )
    before_kill, produced = EVENTS - AFTER_KILL, 0

    def kill_point() -> bool:
        planned, committed = (
            batch_files(query_checkpoint, "offsets"),
            batch_files(query_checkpoint, "commits"),
        )
        return len(committed) >= BATCHES_BEFORE_KILL and (
            bool(planned - committed) or produced == before_kill
        )

    paced_from = time.monotonic()
    while not supervised(kill_point)():
        assert time.monotonic() - paced_from < 240, (
            f"no kill point in 240 s: batches committed {sorted(batch_files(query_checkpoint, 'commits'))}, "
            f"log {job['log']}"
        )
        if produced < min(before_kill, AHEAD * (len(batch_files(query_checkpoint, "offsets")) + 1)):
            produce_fast(bootstrap, input_topic, sent[produced : produced + CHUNK])
            produced += CHUNK
        time.sleep(max(0.1, paced_from + CHUNK_INTERVAL * produced / CHUNK - time.monotonic()))

    old_pid = int(job["pid"])
    assert state["children"][JOB]["restarts"] == 0 and process_group_alive(old_pid)
    os.killpg(old_pid, signal.SIGKILL)
    killed, killed_at = time.monotonic(), time.time()
    wait_for(lambda: not process_group_alive(old_pid), timeout=30, what="the killed job's processes to die")
    planned, committed = batch_files(query_checkpoint, "offsets"), batch_files(query_checkpoint, "commits")
    last_committed = max(committed)
    where = f"batches {sorted(planned - committed)} in flight" if planned - committed else "between batches"

    restarted: list[float] = []

    def restart_seen() -> bool:
        if not restarted and state["children"][JOB]["restarts"] == 1:
            restarted.append(time.monotonic() - killed)
        return bool(restarted)

    for start in range(produced, EVENTS, CHUNK):
        produce_fast(bootstrap, input_topic, sent[start : start + CHUNK])
        supervised(restart_seen)()
    wait_for(supervised(restart_seen), timeout=120, what="the supervisor to restart the job", interval=0.1)
    wait_for(
        supervised(lambda: bool(commits_since(query_checkpoint, killed_at))),
        timeout=300,
        what=f"the restarted job's first batch (log {job['log']})",
        interval=0.2,
    )
    first_batch = commits_since(query_checkpoint, killed_at)[0]
    first_batch_after = (query_checkpoint / "commits" / str(first_batch)).stat().st_mtime - killed_at
    wait_for(
        supervised(lambda: offsets_read() == EVENTS),
        timeout=300,
        what=f"the restarted job to read all {EVENTS} events (log {job['log']})",
    )
    complete_after = time.monotonic() - killed
    print(
        f"\nSIGKILL after batch {last_committed} committed, {where}, {produced} of {EVENTS} events produced; "
        f"restarted {restarted[0]:.1f} s after the kill; its first batch ({first_batch}) committed after "
        f"{first_batch_after:.1f} s; all events read, output complete after {complete_after:.1f} s"
    )

    assert [event.split(";")[0] for event in log] == [
        f"{JOB} exited with code -9",
        f"{JOB} restarted (restart 1, pid {job['pid']})",
    ]
    assert (state["children"][JOB]["state"], state["children"][JOB]["restarts"]) == ("running", 1)
    assert scrape(state["supervisor_metrics_url"])[f'{RESTARTS}{{child="{JOB}",kind="job"}}'] == 1
    # Resumed from its checkpoint: the batch after the last one committed (re-run if it was in flight).
    assert last_committed >= BATCHES_BEFORE_KILL - 1
    assert first_batch == last_committed + 1
    # The test's premise, that no event is late for the watermark, checked where the job routes late events.
    assert read_records(bootstrap, job_topics["--late-topic"]) == []
    assert views_per_key(bootstrap, output_topic) == views_per_window(sent, window_seconds)
