"""What the fault tests (issue 15) share: the window job's settings under which its output, read as latest
value per key, equals an independent count of the events produced (tests.jobs.test_exactly_once's
`expected_counts`), however a fault splits the input into batches."""

from __future__ import annotations

from tests.jobs.test_exactly_once import WINDOW_SECONDS

COUNTING_SETTINGS: tuple[str, ...] = (
    "--window-duration",
    f"{WINDOW_SECONDS} seconds",
    # Nothing is late: the result must not depend on where batches happen to split.
    "--watermark-delay",
    "2 hours",
    "--shuffle-partitions",
    "2",
)
"""`settings` for tests.jobs.streaming_helpers.start_window_job (add a test's own flags after them)."""
