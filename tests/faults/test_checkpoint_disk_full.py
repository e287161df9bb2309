"""The checkpoint directory on a full filesystem (issue 15): the window job checkpoints on a small tmpfs.
The job processes the first part of the input; a filler file then takes every free block, and the second part
is produced. The batch that should checkpoint it cannot: the job must exit non-zero with one line naming the
checkpoint path and the cause. The filler is removed (space returns), the job is restarted from the same
checkpoint, and it must read back only complete log files and end with output equal to an independent count
of all the input.

Needs root (mount/umount), as CI has. The test stops every process it starts and unmounts what it mounts.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from contracts.offset_log import parse_offset_log
from streamstack.local.kafka import LocalKafka, TopicSpec
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes
from tests.jobs.streaming_helpers import start_window_job, views_per_key
from tests.jobs.test_exactly_once import WINDOW_SECONDS, events, expected_counts, produce_fast
from tests.kafka_helpers import metric_sum, scrape, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

JOB = "clickstream-windows"
BEFORE, AFTER = 2_000, 2_000  # events produced before the filesystem fills up and after
TMPFS_SIZE = "16m"
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"
# A query checkpoint's files that Spark reads back, relative to it; the rest must be temp files of a write,
# `.<target>.<uuid>.tmp` (Spark lists log and state directories by name and skips them), or checksums.
READ_BACK = re.compile(
    r"metadata|(?:offsets|commits)/\d+|sources/\d+/\d+"
    r"|state/\d+/(?:_metadata/\w+|\d+/(?:_metadata/\w+|\d+\.(?:delta|snapshot)))"
)
TEMP_FILE = re.compile(r"\.(\w[^/]*?)\.[0-9a-f-]{36}(?:\.TID\d+)?\.tmp")
CHECKSUM_FILE = re.compile(r"\..+\.crc")


@contextmanager
def tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `directory`, unmounted on the way out (lazily if still busy)."""
    directory.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], check=True)


def fill(filesystem: Path) -> Path:
    """Take every free block of `filesystem` with one file; returns the file."""
    filler = filesystem / "filler"
    chunk = b"\0" * 65_536
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        while True:
            os.write(descriptor, chunk)
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
    finally:
        os.close(descriptor)
    assert os.statvfs(filesystem).f_bavail == 0
    return filler


def check_read_back_files(query_checkpoint: Path) -> list[str]:
    """Every file of the query checkpoint that Spark reads back on restart is complete (the offset and commit
    logs parse, the rest is not empty); any other file is a temp file, which Spark never reads, and the file
    it was meant to become does not exist. Returns the temp files (checksum sidecars aside)."""
    temp_files = []
    for path in sorted(query_checkpoint.rglob("*")):
        relative = str(path.relative_to(query_checkpoint))
        if path.is_dir() or CHECKSUM_FILE.fullmatch(path.name):
            continue
        if READ_BACK.fullmatch(relative) is None:
            temp = TEMP_FILE.fullmatch(path.name)
            assert temp is not None, f"{path}: neither read back by Spark nor a temp file"
            assert not (path.parent / temp.group(1)).exists(), f"{path}: its target exists too"
            temp_files.append(relative)
        elif path.parent.name == "offsets":
            parse_offset_log(path.read_text(), str(path))
        elif path.parent.name == "commits":
            version, metadata, *_ = [*path.read_text().split("\n"), "", ""]
            assert version == "v1" and isinstance(json.loads(metadata), dict), f"{path}: incomplete"
        else:
            assert path.stat().st_size > 0, f"{path}: empty"
    return temp_files


def read_up_to(metrics_url: str) -> float:
    """Input records the job's main query has read, from its last batch's end offsets."""
    return metric_sum(scrape(metrics_url), "streamstack_query_source_end_offset", query=JOB)


def error_lines(job: ManagedProcess) -> list[str]:
    """The job driver's own one-line errors in its log (Spark's log and tracebacks are the other lines)."""
    text = job.log_path.read_text(errors="replace")
    return [line for line in text.splitlines() if line.startswith(f"{JOB}: error: ")]


@pytest.mark.timeout(600)
def test_full_checkpoint_filesystem_fails_the_job_clearly_and_it_recovers(
    runtimes: Runtimes, kafka: LocalKafka, topic_name: str, tmp_path: Path
) -> None:
    topics = (f"{topic_name}-views", f"{topic_name}-per-url", f"{topic_name}-dead-letters")
    input_topic, output_topic, dead_letters = topics
    kafka.create_topics(
        [
            TopicSpec(input_topic, partitions=2),
            TopicSpec(output_topic, partitions=2, compact=True),
            TopicSpec(dead_letters, partitions=1),
        ]
    )
    sent = events()[: BEFORE + AFTER]

    with tmpfs(tmp_path / "mnt", TMPFS_SIZE) as mount:
        checkpoint_root = mount / "checkpoints"

        def start(log: str) -> tuple[ManagedProcess, str]:
            return start_window_job(
                runtimes,
                kafka.bootstrap_servers,
                checkpoint_dir=checkpoint_root,
                log_path=tmp_path / log,
                topics=topics,
                settings=(
                    *("--window-duration", f"{WINDOW_SECONDS} seconds"),
                    # Nothing is late: the result must not depend on where batches happen to split.
                    *("--watermark-delay", "2 hours"),
                    *("--max-offsets-per-trigger", "500"),
                    *("--shuffle-partitions", "2"),
                ),
            )

        job, metrics_url = start("job.log")
        try:
            produce_fast(kafka.bootstrap_servers, input_topic, sent[:BEFORE])
            wait_for(
                lambda: read_up_to(metrics_url) == BEFORE,
                timeout=150,
                what=f"the job to process the first {BEFORE} events (log {job.log_path})",
            )
            filler = fill(mount)
            produce_fast(kafka.bootstrap_servers, input_topic, sent[BEFORE:])
            wait_for(lambda: not job.is_running(), timeout=90, what="the job to fail on the full filesystem")
        finally:
            job.stop(timeout=30)
        exit_code = job.exit_code()
        lines = error_lines(job)
        print(f"\nexit code {exit_code}; error lines: {lines}")
        assert exit_code not in (0, None)
        assert len(lines) == 1, f"expected one error line in {job.log_path}:\n{job.log_tail(40)}"
        assert str(checkpoint_root) in lines[0] and NO_SPACE in lines[0]

        # The interrupted writes left temp files only: nothing half-written under a name Spark reads.
        for query in sorted(checkpoint_root.iterdir()):
            print(f"temp files left in {query.name}: {check_read_back_files(query)}")

        filler.unlink()
        restarted_at = time.monotonic()
        job, metrics_url = start("restarted-job.log")
        try:
            wait_for(
                lambda: read_up_to(metrics_url) == BEFORE + AFTER,
                timeout=150,
                what=f"the restarted job to reach the end of the input (log {job.log_path})",
            )
            counts = views_per_key(kafka.bootstrap_servers, output_topic)
            assert job.is_running(), f"the restarted job exited; see {job.log_path}"
        finally:
            job.stop(timeout=30)
        print(f"recovery: output correct {time.monotonic() - restarted_at:.1f} s after the restart")
        assert counts == expected_counts(sent)
        assert error_lines(job) == []
