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

    Per partition: its sample times as a tuple shared with every other partition sampled at the same times
    (the refresh loop samples all of them at once, so at 150,000 partitions there are one or two such tuples,
    not 150,000), the committed offsets and lags interleaved in one array (16 bytes a sample), and the latest
    commit time (the rules look at no earlier one). At 30,000 partitions of consumers and 31 samples each (a
    300 s window refreshed every 10 s) the former four arrays per partition (time, commit time, committed
    offset, lag) took ~45 MB, at 150,000 ~210 MB; this takes about half. `record_and_evaluate` applies the
    rules above to the arrays directly; `record` returns Sample objects (for tests and small uses), the
    earlier ones without their commit time.
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self._tracks: dict[Hashable, _Track] = {}
        # (id of a times tuple, a new sample time) -> (that tuple, the tuple with the time appended and the
        # samples older than the window's anchor dropped, how many were dropped). The first entry keeps the
        # tuple alive, so its id cannot be reused while the entry exists.
        self._grown: dict[tuple[int, float], tuple[tuple[float, ...], tuple[float, ...], int]] = {}

    def _append(self, key: Hashable, sample: Sample) -> _Track:
        track = self._tracks.get(key)
        before = track.times if track is not None else ()
        grown = self._grown.get((id(before), sample.at))
        if grown is None or grown[0] is not before:
            times = (*before, sample.at)
            start = sample.at - self.window
            drop, count = 0, len(times)
            while count - drop >= 2 and times[drop + 1] <= start:
                drop += 1
            if len(self._grown) >= 64:
                self._grown.clear()
            grown = self._grown[(id(before), sample.at)] = (before, times[drop:], drop)
        _, times, drop = grown
        commit = _NO_COMMIT if sample.last_commit is None else sample.last_commit
        if track is None:
            track = self._tracks[key] = _Track(times, commit, array("q", (sample.committed, sample.lag)))
            return track
        track.times, track.last_commit = times, commit
        values = track.values
        values.append(sample.committed)
        values.append(sample.lag)
        if drop:
            del values[: 2 * drop]
        return track

    def record(self, key: Hashable, sample: Sample) -> list[Sample]:
        track = self._append(key, sample)
        values, last = track.values, len(track.times) - 1
        commit = None if math.isnan(track.last_commit) else track.last_commit
        return [
            Sample(at, values[2 * index], values[2 * index + 1], commit if index == last else None)
            for index, at in enumerate(track.times)
        ]

    def record_and_evaluate(self, key: Hashable, sample: Sample, now: float) -> tuple[Status, float]:
        """Record `sample`; the partition's status and consumption rate (`evaluate_partition` and
        `consumption_rate` of the samples kept, computed on the arrays)."""
        return _evaluate_track(self._append(key, sample), now, self.window)

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget partitions that are no longer reported (deleted groups or topics)."""
        keep_only(self._tracks, set(keys))

    def clear(self) -> None:
        self._tracks.clear()
        self._grown.clear()

    def __len__(self) -> int:
        return len(self._tracks)


class _Track:
    """One partition's samples (see History)."""

    __slots__ = ("last_commit", "times", "values")

    def __init__(self, times: tuple[float, ...], last_commit: float, values: array[int]) -> None:
        self.times = times
        self.last_commit = last_commit  # time of the latest commit seen; NaN for none
        self.values = values  # committed offset and lag of each sample, interleaved


_NO_COMMIT = math.nan


def _evaluate_track(track: _Track, now: float, window: float) -> tuple[Status, float]:
    """evaluate_partition() and consumption_rate() on a track: the same rules, arithmetic and order."""
    times, values = track.times, track.values
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
            rate = max(0.0, (values[-2] - values[2 * first]) / elapsed)
    if count == 0:
        return Status.OK, rate
    lags = values[2 * first + 1 :: 2]
    if values[-1] == 0 or 0 in lags:
        return Status.OK, rate
    committed = values[2 * first :: 2]
    if any(later < earlier for earlier, later in itertools.pairwise(committed)):
        return Status.REWIND, rate
    if not complete or considered < 2:
        return Status.OK, rate
    if committed[0] == committed[-1] and all(value == committed[0] for value in committed):
        last_commit = track.last_commit
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
