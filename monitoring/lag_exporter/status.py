"""A Burrow-style consumer status, evaluated over a wall-clock window of samples kept by the refresh loop.

Burrow (linkedin/Burrow `core/internal/evaluator/caching.go`) evaluates the offsets a group committed; this
exporter has no ZooKeeper and no commit stream of its own, so each partition keeps the samples the loop
takes every refresh: (time, committed offset, lag, time of the latest commit seen). The window is the last
`--window` seconds; a window is *complete* once the oldest sample kept is at least that old (the newest
sample at or before the window start is kept as its anchor, so "for the window" means from the anchor on).

Partition rules, first match wins (Burrow's order):

1. OK when the current lag is 0 or any sample in the window had lag 0 (Burrow rule 1).
2. REWIND when the committed offset went down between two consecutive samples in the window (rule 2).
   Checked even before the window is complete.
3. OK when the window is not complete yet (not enough history to say more).
4. STOP when the committed offset did not change over the whole window and no commit was seen within the
   window (no commit time, or the last one older than the window start). Burrow's rule 3 says "no commits
   for longer than the spacing of the commits in the window"; we have a fixed window instead.
5. STALL when the committed offset did not change over the whole window but commits were seen within it
   (the consumer keeps committing the same offset while there is lag: Burrow's rule 4).
6. WARN when the committed offset moved over the window (the consumer commits) and the lag grew: the lag
   at the end of the window is higher than at its start and the least-squares slope of lag over time is
   positive. Burrow's rule 5 asks for lag never decreasing between consecutive commits; our samples come
   on our own clock, so a sample that falls between a producer's write and the consumer's next commit shows
   a dip that Burrow would not see, hence the trend instead.
7. OK otherwise.

Commit times come from the `__consumer_offsets` log for Kafka groups and from the modification time of the
newest `commits/<N>` file for Spark checkpoints. Without them (`--no-commit-log`, or no Read on that topic)
a partition whose offset does not move is STOP, never STALL.

Group status (Burrow): ERR when any partition is STOP, STALL or REWIND; else WARN when any partition is
WARN; else OK. Numeric codes are Burrow's: OK 1, WARN 2, ERR 3, STOP 4, STALL 5, REWIND 6.
"""

from __future__ import annotations

import enum
import itertools
import math
from array import array
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from contracts.metrics import STATUS_CODES
from monitoring.lag_exporter.pruning import keep_only


class Status(enum.Enum):
    OK = STATUS_CODES["OK"]
    WARN = STATUS_CODES["WARN"]
    ERR = STATUS_CODES["ERR"]
    STOP = STATUS_CODES["STOP"]
    STALL = STATUS_CODES["STALL"]
    REWIND = STATUS_CODES["REWIND"]

    @property
    def code(self) -> int:
        return self.value


PARTITION_STATUSES = (Status.OK, Status.WARN, Status.STOP, Status.STALL, Status.REWIND)
GROUP_STATUSES = (Status.OK, Status.WARN, Status.ERR)
_ERRORS = (Status.STOP, Status.STALL, Status.REWIND)


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation of a partition of a consumer, taken by the refresh loop."""

    at: float
    committed: int
    lag: int
    last_commit: float | None = None


def window_samples(samples: Sequence[Sample], now: float, window: float) -> tuple[list[Sample], bool]:
    """The samples of the window (anchor included) and whether the window is complete."""
    start = now - window
    anchor = None
    for index, sample in enumerate(samples):
        if sample.at <= start:
            anchor = index
        else:
            break
    if anchor is None:
        return list(samples), False
    return list(samples[anchor:]), True


def _slope(samples: Sequence[Sample]) -> float:
    count = len(samples)
    mean_t = sum(sample.at for sample in samples) / count
    mean_lag = sum(sample.lag for sample in samples) / count
    variance = sum((sample.at - mean_t) ** 2 for sample in samples)
    if variance == 0:
        return 0.0
    return sum((sample.at - mean_t) * (sample.lag - mean_lag) for sample in samples) / variance


def evaluate_partition(samples: Sequence[Sample], now: float, window: float) -> Status:
    """The status of one partition from its samples (oldest first); see the module docstring."""
    if not samples:
        return Status.OK
    considered, complete = window_samples(samples, now, window)
    if samples[-1].lag == 0 or any(sample.lag == 0 for sample in considered):
        return Status.OK
    if any(later.committed < earlier.committed for earlier, later in itertools.pairwise(considered)):
        return Status.REWIND
    if not complete or len(considered) < 2:
        return Status.OK
    first, last = considered[0], considered[-1]
    if first.committed == last.committed and all(s.committed == first.committed for s in considered):
        last_commit = last.last_commit
        if last_commit is not None and last_commit > now - window:
            return Status.STALL
        return Status.STOP
    if last.lag > first.lag and _slope(considered) > 0:
        return Status.WARN
    return Status.OK


def evaluate_group(statuses: Iterable[Status]) -> Status:
    """ERR if any partition is STOP, STALL or REWIND; WARN if any is WARN; OK otherwise (Burrow)."""
    result = Status.OK
    for status in statuses:
        if status in _ERRORS:
            return Status.ERR
        if status is Status.WARN:
            result = Status.WARN
    return result


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe partition status by Burrow's code (REWIND > STALL > STOP > WARN > OK)."""
    return max(statuses, key=lambda status: status.code, default=Status.OK)


def consumption_rate(samples: Sequence[Sample], now: float, window: float) -> float:
    """Records per second the consumer committed over the window (or the history so far); 0 if unknown."""
    considered, _ = window_samples(samples, now, window)
    if len(considered) < 2:
        return 0.0
    first, last = considered[0], considered[-1]
    elapsed = last.at - first.at
    if elapsed <= 0:
        return 0.0
    return max(0.0, (last.committed - first.committed) / elapsed)


class History:
    """The samples of every (source, group, topic, partition), pruned to the window plus its anchor.

    Kept as four arrays per partition (time, commit time, committed offset, lag: 32 bytes a sample) rather
    than a Python object per sample and value: at 30,000 partitions of consumers and 31 samples each (a 300 s
    window refreshed every 10 s) ~45 MB instead of ~200 MB; each array stays below the small-object
    allocator's 512 bytes up to 56 samples. `record_and_evaluate` applies the rules above to the columns
    directly; `record` returns Sample objects (for tests and small uses).
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self._columns: dict[Hashable, _Columns] = {}

    def _append(self, key: Hashable, sample: Sample) -> _Columns:
        columns = self._columns.get(key)
        if columns is None:
            columns = self._columns[key] = _Columns(array("d"), array("d"), array("q"), array("q"))
        times, commits, committed, lags = columns
        times.append(sample.at)
        commits.append(_NO_COMMIT if sample.last_commit is None else sample.last_commit)
        committed.append(sample.committed)
        lags.append(sample.lag)
        start = sample.at - self.window
        drop, count = 0, len(times)
        while count - drop >= 2 and times[drop + 1] <= start:
            drop += 1
        if drop:
            for column in columns:
                del column[:drop]
        return columns

    def record(self, key: Hashable, sample: Sample) -> list[Sample]:
        times, commits, committed, lags = self._append(key, sample)
        return [
            Sample(at, offset, lag, None if math.isnan(commit) else commit)
            for at, commit, offset, lag in zip(times, commits, committed, lags, strict=True)
        ]

    def record_and_evaluate(self, key: Hashable, sample: Sample, now: float) -> tuple[Status, float]:
        """Record `sample`; the partition's status and consumption rate (`evaluate_partition` and
        `consumption_rate` of the samples kept, computed on the columns)."""
        return _evaluate_columns(self._append(key, sample), now, self.window)

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget partitions that are no longer reported (deleted groups or topics)."""
        keep_only(self._columns, set(keys))

    def clear(self) -> None:
        self._columns.clear()

    def __len__(self) -> int:
        return len(self._columns)


class _Columns(NamedTuple):
    times: array[float]
    commits: array[float]  # time of the latest commit seen; NaN for none (Sample.last_commit None)
    committed: array[int]
    lags: array[int]


_NO_COMMIT = math.nan


def _evaluate_columns(columns: _Columns, now: float, window: float) -> tuple[Status, float]:
    """evaluate_partition() and consumption_rate() on columns: the same rules, arithmetic and order."""
    times, commits, committed_column, lag_column = columns
    count = len(times)
    start = now - window
    anchor = None
    for index in range(count):
        if times[index] <= start:
            anchor = index
        else:
            break
    complete = anchor is not None
    first = anchor if anchor is not None else 0
    considered = count - first
    rate = 0.0
    if considered >= 2:
        elapsed = times[-1] - times[first]
        if elapsed > 0:
            rate = max(0.0, (committed_column[-1] - committed_column[first]) / elapsed)
    if count == 0:
        return Status.OK, rate
    lags = lag_column[first:]
    if lag_column[-1] == 0 or 0 in lags:
        return Status.OK, rate
    committed = committed_column[first:]
    if any(later < earlier for earlier, later in itertools.pairwise(committed)):
        return Status.REWIND, rate
    if not complete or considered < 2:
        return Status.OK, rate
    if committed[0] == committed[-1] and all(value == committed[0] for value in committed):
        last_commit = commits[-1]
        if not math.isnan(last_commit) and last_commit > now - window:
            return Status.STALL, rate
        return Status.STOP, rate
    if lags[-1] > lags[0]:
        at = times[first:]
        mean_t = sum(value for value in at) / considered
        mean_lag = sum(value for value in lags) / considered
        variance = sum((value - mean_t) ** 2 for value in at)
        if variance != 0:
            slope = sum((t - mean_t) * (lag - mean_lag) for t, lag in zip(at, lags, strict=True)) / variance
            if slope > 0:
                return Status.WARN, rate
    return Status.OK, rate
