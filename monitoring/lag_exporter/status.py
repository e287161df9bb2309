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
from typing import Any

import numpy as np
import numpy.typing as npt

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


class ScalarHistory:
    """The samples of some (source, group, topic, partition), pruned to the window plus its anchor, one
    partition at a time: the reference `History` is checked against, and where `History` keeps a partition
    that missed a collection.

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
        keep_only(self._tracks, keys if isinstance(keys, set) else set(keys))

    def __contains__(self, key: Hashable) -> bool:
        return key in self._tracks

    def samples(self, key: Hashable) -> list[Sample]:
        """The samples kept for `key` (the latest with its commit time), without recording one."""
        track = self._tracks.get(key)
        if track is None:
            return []
        values, last = track.values, len(track.times) - 1
        commit = None if math.isnan(track.last_commit) else track.last_commit
        return [
            Sample(at, values[2 * index], values[2 * index + 1], commit if index == last else None)
            for index, at in enumerate(track.times)
        ]

    def adopt(
        self,
        key: Hashable,
        times: tuple[float, ...],
        committed: Sequence[int],
        lags: Sequence[int],
        last_commit: float | None,
    ) -> None:
        """Take over a partition's samples (oldest first) kept elsewhere."""
        values = array("q", itertools.chain.from_iterable(zip(committed, lags, strict=True)))
        self._tracks[key] = _Track(times, _NO_COMMIT if last_commit is None else last_commit, values)

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


_OK, _WARN, _STOP, _STALL, _REWIND = (status.code for status in PARTITION_STATUSES)
_INT32_MAX = 2**31 - 1
STATUS_BY_CODE = {status.code: status for status in Status}


_WHOLE = 2**31  # the last part of the code of a key that is not (..., partition number)
_WHOLE_KEY = object()  # marks the prefix of such a key


class KeyIndex:
    """The column of each key History keeps in its columns, without a Python object per key (the keys'
    tuples, their dict and the columns' ints took 21 MB at 150,000 keys, kept for good).

    A key is coded as one int64: the id of its prefix, shifted left 32 bits, or its last part. A tuple
    key ending in an int in [0, 2**31) (a partition number: History's keys are (source, group, topic,
    partition)) has the tuple without it as its prefix, so 150,000 keys share 15,000 prefixes; any other key
    is a prefix of its own, with last part 2**31. Prefixes are kept while a column uses them. Codes are
    found in a sorted array (numpy's searchsorted), sorted again after columns changed."""

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}  # prefix -> id
        self._prefixes: list[Any] = []  # id -> prefix (None: free)
        self._free_ids: list[int] = []
        self._users = np.zeros(0, np.int64)  # per prefix id: columns whose key has it
        self._code = np.zeros(0, np.int64)  # per column: its key's code; -1 for a free column
        self._sorted = np.zeros(0, np.int64)  # the codes of the used columns, sorted
        self._sorted_columns = np.zeros(0, np.int64)  # their columns
        self._changed = False

    def grow(self, columns: int) -> None:
        if columns > len(self._code):
            self._code = np.concatenate([self._code, np.full(columns - len(self._code), -1, np.int64)])

    def codes(self, keys: Sequence[Hashable], create: bool = False) -> npt.NDArray[np.int64]:
        """Each key's code; -1 for a key whose prefix is not kept (unless `create`: then it is)."""
        ids = self._ids

        def code_of(key: Hashable) -> int:
            if key.__class__ is tuple and key:
                last = key[-1]
                if last.__class__ is int and 0 <= last < _WHOLE:
                    prefix, tail = key[:-1], last
                else:
                    prefix, tail = (_WHOLE_KEY, key), _WHOLE
            else:
                prefix, tail = (_WHOLE_KEY, key), _WHOLE
            id_ = ids.get(prefix)
            if id_ is None:
                if not create:
                    return -1
                id_ = self._new_prefix(prefix)
            return (id_ << 32) | tail

        # straight into the array: a list of 150,000 Python ints (~6 MB) is not made first
        return np.fromiter(map(code_of, keys), np.int64, len(keys))

    def _new_prefix(self, prefix: Hashable) -> int:
        if self._free_ids:
            id_ = self._free_ids.pop()
            self._prefixes[id_] = prefix
        else:
            id_ = len(self._prefixes)
            self._prefixes.append(prefix)
            if id_ >= len(self._users):
                self._users = np.concatenate([self._users, np.zeros(max(16, len(self._users)), np.int64)])
        self._ids[prefix] = id_
        return id_

    def columns(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The column of each code; -1 where no column has it."""
        if self._changed:
            used = np.flatnonzero(self._code >= 0)
            order = np.argsort(self._code[used], kind="stable")
            self._sorted, self._sorted_columns = self._code[used][order], used[order]
            self._changed = False
        result = np.full(len(codes), -1, np.int64)
        if not len(self._sorted) or not len(codes):
            return result
        at = np.minimum(np.searchsorted(self._sorted, codes), len(self._sorted) - 1)
        found = (self._sorted[at] == codes) & (codes >= 0)
        result[found] = self._sorted_columns[at[found]]
        return result

    def assign(self, columns: Sequence[int], keys: Sequence[Hashable]) -> None:
        """Give these free columns these keys (not kept yet)."""
        if not len(columns):
            return
        self.assign_codes(columns, self.codes(keys, create=True))

    def prefix_id(self, prefix: Hashable) -> int:
        """The id of this prefix of keys (kept from now on while a column's code has it)."""
        id_ = self._ids.get(prefix)
        return self._new_prefix(prefix) if id_ is None else id_

    def prefix(self, id_: int) -> Any:
        return self._prefixes[id_]

    def column_codes(self, columns: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        codes: npt.NDArray[np.int64] = self._code[columns]
        return codes

    def assign_codes(self, columns: Sequence[int], codes: npt.NDArray[np.int64]) -> None:
        """Give these free columns these codes (made by `codes(..., create=True)` or from `prefix_id`)."""
        self._code[np.asarray(columns, np.int64)] = codes
        np.add.at(self._users, codes >> 32, 1)
        self._changed = True

    def release(self, columns: Sequence[int]) -> None:
        """Free these columns; prefixes no column uses any more are forgotten."""
        if not len(columns):
            return
        where = np.asarray(columns, np.int64)
        ids = self._code[where] >> 32
        self._code[where] = -1
        np.subtract.at(self._users, ids, 1)
        for id_ in np.unique(ids[self._users[ids] == 0]).tolist():
            del self._ids[self._prefixes[id_]]
            self._prefixes[id_] = None
            self._free_ids.append(id_)
        self._changed = True

    def used(self) -> npt.NDArray[np.int64]:
        """The columns that have a key."""
        return np.flatnonzero(self._code >= 0)

    def keyed(self, columns: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether each of these columns has a key."""
        keyed: npt.NDArray[np.bool_] = self._code[columns] >= 0
        return keyed

    def key(self, column: int) -> Hashable:
        code = int(self._code[column])
        prefix, tail = self._prefixes[code >> 32], code & 0xFFFFFFFF
        if tail == _WHOLE:
            key: Hashable = prefix[1]
            return key
        return (*prefix, tail)


def _pick(keys: Sequence[Hashable], positions: list[int]) -> list[Hashable]:
    """`[keys[p] for p in positions]` (ascending): when many are wanted, in one pass over `keys`, whose
    iteration may be much cheaper than indexing one at a time (a snapshot's keys are built from its
    columns: the 300,000 lookups took 0.5-0.7 s of a first collection at 150,000 keys)."""
    if len(positions) * 16 < len(keys):
        return [keys[position] for position in positions]
    wanted = np.zeros(len(keys), bool)
    wanted[positions] = True
    return list(itertools.compress(keys, wanted.tolist()))


class History:
    """The samples of every (source, group, topic, partition), as columns: a ring of collections (one sample
    time per collection) x partitions, committed offsets as int32 while every value recorded fits (the arrays
    become int64 for good at the first value that does not: exact either way), and per partition the first
    collection it keeps (the window's anchor or its first sample) and its latest commit time.

    Lags are not kept per group-partition: a lag is max(0, latest offset - committed offset), and the groups
    reading a topic partition all see its one latest offset, so a second ring keeps the latest offset of each
    (topic, partition) (50,000 rows at 50,000 x 500, where lags took 150,000: ~16 MB less at a full window),
    and each column the row of its partition. A sample whose lag the row does not give back exactly (another
    latest offset for the same partition in one collection, a caller's lag of another kind) gets a row of its
    own, its past values copied: the lags are the ones recorded either way.

    `record` appends one collection for many partitions and applies the rules above to all of them at once,
    with numpy: the same rules, arithmetic and order as `evaluate_partition` and `consumption_rate` on the
    partition's samples (sums of floats are added one sample after the other, as Python's `sum` does).

    A partition keeps a sample of every collection from its first on. One that misses a collection (its
    offsets could not be read) moves to a `ScalarHistory` and is evaluated there from then on (rare; exact).
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self._index = KeyIndex()  # key <-> column
        self._free: array[int] = array("q")  # free columns, last out first (no int object each)
        self._times: list[float] = []  # per kept collection, oldest first
        self._head = 0  # ring slot of the oldest kept collection
        self._committed: npt.NDArray[np.int32 | np.int64] = np.zeros((0, 0), np.int32)  # (slots, columns)
        # (slots, partition rows): the latest offset of each (topic, partition), or a column's own row
        self._latest: npt.NDArray[np.int32 | np.int64] = np.zeros((0, 0), np.int32)
        self._part = np.zeros(0, np.int64)  # per column: its row in _latest (-1: none)
        self._parts = KeyIndex()  # (topic, partition) <-> row of _latest
        self._part_users = np.zeros(0, np.int64)  # per row of _latest: columns using it
        self._free_parts: array[int] = array("q")
        self._first = np.zeros(0, np.int64)  # per column: index in _times of its first kept sample
        self._last_commit = np.zeros(0, np.float64)  # per column; NaN for none
        self._used = np.zeros(0, bool)  # per column: whether it holds a partition
        self._scalar = ScalarHistory(window)
        self._recorded_apart: list[Hashable] = []  # keys the last record() evaluated in _scalar

    # -- storage -------------------------------------------------------------------------------------------

    def _slot(self, index: int) -> int:
        return (self._head + index) % int(self._committed.shape[0])

    def _reserve(self, slots: int, columns: int, parts: int = 0) -> None:
        capacity, width = self._committed.shape
        part_width = self._latest.shape[1]
        if slots <= capacity and columns <= width and parts <= part_width:
            return
        # a window's worth of collections at the pace so far, and a few more: the ring is allocated at its
        # final size once the pace is known rather than grown (and copied) a few slots at a time
        new_capacity = max(slots, min(self._window_slots(), 8 * slots)) + 4 if slots > capacity else capacity
        new_width = max(width, columns + columns // 8) if columns > width else width
        new_part_width = max(part_width, parts + parts // 8) if parts > part_width else part_width
        count = len(self._times) if capacity else 0
        # one at a time, copied slice by slice: no temporary copies
        for name, old_width, wide in (
            ("_committed", width, new_width),
            ("_latest", part_width, new_part_width),
        ):
            old = getattr(self, name)
            if (new_capacity, wide) == old.shape:
                continue
            new = np.zeros((new_capacity, wide), old.dtype)
            if new_capacity == capacity:  # wider only: the same slots
                new[:, :old_width] = old
            else:  # the kept collections from slot 0 on
                head_part = min(count, capacity - self._head)
                new[:head_part, :old_width] = old[self._head : self._head + head_part]
                new[head_part:count, :old_width] = old[: count - head_part]
            setattr(self, name, new)
            del old, new
        if new_capacity != capacity:
            self._head = 0
        if new_part_width > part_width:
            self._part_users = np.concatenate(
                [self._part_users, np.zeros(new_part_width - part_width, np.int64)]
            )
            self._free_parts.extend(range(new_part_width - 1, part_width - 1, -1))
            self._parts.grow(new_part_width)
        if new_width > width:
            self._first = np.concatenate([self._first, np.zeros(new_width - width, np.int64)])
            self._last_commit = np.concatenate([self._last_commit, np.full(new_width - width, math.nan)])
            self._used = np.concatenate([self._used, np.zeros(new_width - width, bool)])
            self._part = np.concatenate([self._part, np.full(new_width - width, -1, np.int64)])
            self._free.extend(range(new_width - 1, width - 1, -1))
            self._index.grow(new_width)

    def _window_slots(self) -> int:
        """Collections a window holds at the mean pace of the kept ones, with its anchor and the one being
        added (0 while the pace is not known)."""
        times = self._times
        if len(times) < 2 or times[-1] <= times[0]:
            return 0
        interval = (times[-1] - times[0]) / (len(times) - 1)
        return math.ceil(self.window / interval) + 2

    def _widen(self, *values: npt.NDArray[np.int64]) -> None:
        """int64 storage from now on if any of `values` does not fit int32 (or is negative)."""
        if self._committed.dtype == np.int64:
            return
        if any(len(array) and (array.min() < 0 or array.max() > _INT32_MAX) for array in values):
            self._committed = self._committed.astype(np.int64)
            self._latest = self._latest.astype(np.int64)

    def _to_scalar(self, columns: list[int]) -> None:
        """Move these columns' samples to the scalar history (they missed a collection)."""
        for column in columns:
            key = self._index.key(column)
            first = int(self._first[column])
            slots = [self._slot(index) for index in range(first, len(self._times))]
            commit = float(self._last_commit[column])
            self._scalar.adopt(
                key,
                tuple(self._times[first:]),
                self._committed[slots, column].tolist(),
                self._lags(slots, column).tolist(),
                None if math.isnan(commit) else commit,
            )
        self._release(columns)

    def _release(self, columns: list[int]) -> None:
        self._index.release(columns)
        self._used[columns] = False
        self._free.extend(columns)
        self._detach(np.asarray(columns, np.int64))

    def _lags(self, slots: Any, column: int) -> npt.NDArray[np.int64]:
        """A column's lags at these slots."""
        latest = self._latest[slots, int(self._part[column])].astype(np.int64)
        lags: npt.NDArray[np.int64] = np.maximum(0, latest - self._committed[slots, column])
        return lags

    def _attach(self, columns: list[int]) -> None:
        """Give these new columns (their keys assigned) the row of their key's (topic, partition), made if no
        column has it; a key not of the shape (source, group, topic, partition) gets a row of its own. Worked
        out from the keys' codes and their prefixes (15,000 at 50,000 x 500), no tuple made per key."""
        where = np.asarray(columns, np.int64)
        codes = self._index.column_codes(where)
        tails = codes & 0xFFFFFFFF
        prefix_ids, inverse = np.unique(codes >> 32, return_inverse=True)
        parts = self._parts
        part_prefix = np.full(len(prefix_ids), -1, np.int64)
        for position, id_ in enumerate(prefix_ids.tolist()):
            prefix = self._index.prefix(id_)
            if len(prefix) == 3 and prefix[0] is not _WHOLE_KEY:  # (source, group, topic)
                part_prefix[position] = parts.prefix_id((prefix[2],))
        part_prefix = part_prefix[inverse.reshape(-1)]
        shared = (part_prefix >= 0) & (tails < _WHOLE)
        if not shared.all():
            self._own_rows(where[~shared])
        if not shared.any():
            return
        part_codes = (part_prefix[shared] << 32) | tails[shared]
        del part_prefix, tails, codes
        rows = parts.columns(part_codes)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            distinct, inverse = np.unique(part_codes[missing], return_inverse=True)
            self._reserve(0, 0, int(np.count_nonzero(self._part_users)) + len(distinct))
            taken = [self._free_parts.pop() for _ in range(len(distinct))]
            parts.assign_codes(taken, distinct)
            rows[missing] = np.asarray(taken, np.int64)[inverse.reshape(-1)]
        self._part[where[shared]] = rows
        np.add.at(self._part_users, rows, 1)

    def _own_rows(self, columns: npt.NDArray[np.int64]) -> None:
        """A row of _latest of their own for these columns, with the values of the row they had (if any)."""
        self._reserve(0, 0, int(np.count_nonzero(self._part_users)) + len(columns))
        taken = np.array([self._free_parts.pop() for _ in range(len(columns))], np.int64)
        before = self._part[columns]
        had = before >= 0
        for row, old in zip(taken[had].tolist(), before[had].tolist(), strict=True):
            self._latest[:, row] = self._latest[:, old]
        self._detach(columns)
        self._part[columns] = taken
        self._part_users[taken] = 1

    def _detach(self, columns: npt.NDArray[np.int64]) -> None:
        """These columns no longer use their rows of _latest; rows no column uses are freed."""
        rows = self._part[columns]
        rows = rows[rows >= 0]
        self._part[columns] = -1
        if not len(rows):
            return
        np.subtract.at(self._part_users, rows, 1)
        unused = np.unique(rows[self._part_users[rows] == 0])
        if len(unused):
            keyed = unused[self._parts.keyed(unused)]
            self._parts.release(keyed.tolist())
            self._free_parts.extend(unused.tolist())

    # -- recording and evaluating ----------------------------------------------------------------------------

    def record(
        self,
        keys: Sequence[Hashable],
        committed: npt.NDArray[np.int64],
        lag: npt.NDArray[np.int64],
        last_commit: npt.NDArray[np.float64],
        now: float,
        *,
        latest: npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float64]]:
        """Append a sample taken at `now` for each of `keys` (distinct); each one's status code and
        consumption rate, in the order of `keys`. Lags are at least 0; `latest`, each key's partition's
        latest offset (`lag` is max(0, latest - committed)), lets the groups of a partition share its row:
        without it, committed + lag is taken for it."""
        if len(lag) and lag.min() < 0:
            raise ValueError("a lag below 0")
        count = len(keys)
        codes = np.full(count, _OK, np.int8)
        rates = np.zeros(count, np.float64)
        scalar, key_index = self._scalar, self._index
        columns = key_index.columns(key_index.codes(keys))
        new: list[int] = []
        new_keys: list[Hashable] = []
        in_scalar: list[int] = []
        missing = np.flatnonzero(columns < 0).tolist()
        for position, key in zip(missing, _pick(keys, missing), strict=True):
            if key in scalar:
                in_scalar.append(position)
            else:
                new.append(position)
                new_keys.append(key)
        del missing
        sampled = columns[columns >= 0]
        kept = int(np.count_nonzero(self._used))
        if len(sampled) < kept:  # kept partitions this collection has no sample for
            mask = np.zeros(len(self._used), bool)
            mask[sampled] = True
            self._to_scalar(np.flatnonzero(self._used & ~mask).tolist())
            kept = len(sampled)
        slots = len(self._times) + 1
        self._reserve(slots, kept + len(new))
        last = len(self._times)
        if new:
            taken = [self._free.pop() for _ in new]
            columns[new] = taken
            self._used[taken] = True
            self._first[taken] = last
            key_index.assign(taken, new_keys)
            self._attach(taken)
        del new_keys
        self._times.append(now)
        column_mask = columns >= 0
        where = columns if column_mask.all() else columns[column_mask]
        if len(self._times) > self._committed.shape[0]:
            self._reserve(len(self._times), 0)
        slot = self._slot(last)
        everyone = len(where) == count  # the usual case: the columns themselves, no copies of the values
        committed_now = committed if everyone else committed[column_mask]
        lag_now = lag if everyone else lag[column_mask]
        if latest is None:
            latest_now = committed_now + lag_now
        else:
            latest_now = latest if everyone else latest[column_mask]
        self._widen(committed_now, lag_now, latest_now)
        self._committed[slot, where] = committed_now
        rows = self._part[where]
        self._latest[slot, rows] = latest_now
        del latest_now
        wrong = np.flatnonzero(np.maximum(0, self._latest[slot, rows] - committed_now) != lag_now)
        if len(wrong):  # the partition's row does not give these lags back: rows of their own
            own = committed_now[wrong] + lag_now[wrong]
            self._widen(own)
            self._own_rows(where[wrong])
            self._latest[slot, self._part[where[wrong]]] = own
        del rows, committed_now, lag_now
        self._last_commit[where] = last_commit if everyone else last_commit[column_mask]
        self._prune(now)
        if everyone and count:
            del codes, rates, columns, column_mask  # the evaluation's arrays are the result: no copies
            codes, rates = self._evaluate(where, now)
        elif len(where):
            codes[column_mask], rates[column_mask] = self._evaluate(where, now)
        self._recorded_apart = [keys[index] for index in in_scalar]
        for index in in_scalar:
            commit = float(last_commit[index])
            status, rate = scalar.record_and_evaluate(
                keys[index],
                Sample(now, int(committed[index]), int(lag[index]), None if math.isnan(commit) else commit),
                now,
            )
            codes[index], rates[index] = status.code, rate
        return codes, rates

    def _prune(self, now: float) -> None:
        """Drop each partition's samples before its window's anchor, then the collections no one keeps."""
        times, start = self._times, now - self.window
        last = len(times) - 1
        # per collection: the first collection at or after it whose time is after the window's start
        next_late = np.empty(len(times), np.int64)
        following = len(times)
        for index in range(last, -1, -1):
            if times[index] > start:
                following = index
            next_late[index] = following
        used = self._used
        first = self._first
        # ScalarHistory's pruning: drop the first sample while the next one is at or before the start (and
        # is not the last): the new first is the end of the run of such samples from the second kept on
        late = next_late[np.minimum(first + 1, last)]
        first[:] = np.where(used & (first < last), np.minimum(late - 1, last), first)
        keep_from = int(first[used].min()) if used.any() else last
        if keep_from > 0:
            del times[:keep_from]
            self._head = self._slot(keep_from)
            first[used] -= keep_from
            first[~used] = 0

    def _evaluate(
        self, columns: npt.NDArray[np.int64], now: float
    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float64]]:
        # Each per-column array is freed as soon as it has served (1.2 MB each at 150,000 columns: a dozen of
        # them alive at once made this the collection's peak), and the columns' own arrays are taken as
        # views in the usual order.
        times, start, window = self._times, now - self.window, self.window
        last = len(times) - 1
        count = len(columns)
        slot_of = np.array([self._slot(index) for index in range(last + 1)], np.int64)
        if np.array_equal(columns, np.arange(count)):  # the usual order: views, no copies
            committed = self._committed[:, :count]
            first, part = self._first[:count], self._part[:count]
        else:
            committed = self._committed[:, columns]
            first, part = self._first[columns], self._part[columns]
        latest = self._latest

        def lags_at(slot: int) -> npt.NDArray[np.int64]:
            lags: npt.NDArray[np.int64] = np.maximum(0, latest[slot][part] - committed[slot])
            return lags

        first_slot = slot_of[first]
        positions = np.arange(count)
        committed_first = committed[first_slot, positions]
        lag_first = np.maximum(0, latest[first_slot, part] - committed_first)
        del first_slot, positions
        last_slot = slot_of[last]
        committed_last, lag_last = committed[last_slot], lags_at(last_slot)
        times_array = np.array(times, np.float64)
        first_time = times_array[first]
        considered = last - first + 1
        elapsed = times_array[last] - first_time
        moving = (considered >= 2) & (elapsed > 0)
        rates = np.zeros(count, np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            rates[moving] = np.maximum(0.0, (committed_last - committed_first)[moving] / elapsed[moving])
        del elapsed, moving
        judged = (first_time <= start) & (considered >= 2)  # complete windows of two samples or more
        del first_time, considered
        zero = lag_last == 0
        rewind = np.zeros(count, bool)
        constant = np.ones(count, bool)
        previous = None
        for index in range(last + 1):
            slot = slot_of[index]
            inside = first <= index
            lag_now, committed_now = lags_at(slot), committed[slot]
            zero |= inside & (lag_now == 0)
            del lag_now
            constant &= ~inside | (committed_now == committed_first)
            if previous is not None:
                rewind |= (first <= index - 1) & (committed_now < previous)
            previous = committed_now
        del previous, committed_first
        codes = np.full(count, _OK, np.int8)
        codes[~zero & rewind] = _REWIND
        judged &= ~zero & ~rewind
        del zero, rewind
        stalled = np.flatnonzero(judged & constant)
        last_commit = self._last_commit[columns[stalled]]
        codes[stalled] = np.where(last_commit > now - window, _STALL, _STOP)
        del stalled, last_commit
        candidates = np.flatnonzero(judged & ~constant & (lag_last > lag_first))
        del judged, constant, lag_first, lag_last
        if len(candidates):
            lags = np.maximum(0, latest[:, part[candidates]] - committed[:, candidates])
            codes[candidates[self._growing(candidates, first, slot_of, lags, times_array)]] = _WARN
        return codes, rates

    def _growing(
        self,
        candidates: npt.NDArray[np.int64],
        first_all: npt.NDArray[np.int64],
        slot_of: npt.NDArray[np.int64],
        lags: npt.NDArray[np.int32 | np.int64],
        times: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.bool_]:
        """Whether the least-squares slope of lag over time is positive, for the candidate columns: the
        arithmetic of `_slope`, each sum taken one sample after the other. `lags`: (slots, candidates)."""
        first = first_all[candidates]
        last = len(times) - 1
        considered = (last - first + 1).astype(np.float64)
        sum_t = np.zeros(len(candidates))
        sum_lag = np.zeros(len(candidates), np.int64)
        for index in range(last + 1):
            inside = first <= index
            sum_t = np.where(inside, sum_t + times[index], sum_t)
            sum_lag = np.where(inside, sum_lag + lags[slot_of[index]], sum_lag)
        mean_t = sum_t / considered
        mean_lag = sum_lag / (last - first + 1)
        variance = np.zeros(len(candidates))
        covariance = np.zeros(len(candidates))
        for index in range(last + 1):
            inside = first <= index
            deviation = times[index] - mean_t
            variance = np.where(inside, variance + deviation**2, variance)
            covariance = np.where(
                inside, covariance + deviation * (lags[slot_of[index]] - mean_lag), covariance
            )
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = covariance / variance
        growing: npt.NDArray[np.bool_] = (variance != 0) & (slope > 0)
        return growing

    def retain(self, keys: Iterable[Hashable]) -> None:
        """Forget partitions that are no longer reported (deleted groups or topics)."""
        keep = keys if isinstance(keys, set) else set(keys)
        kept = self._index.columns(self._index.codes(list(keep)))
        mask = np.zeros(len(self._used), bool)
        mask[kept[kept >= 0]] = True
        self._release(np.flatnonzero(self._used & ~mask).tolist())
        self._scalar.retain(keep)

    def retain_recorded(self) -> None:
        """Forget every partition the last `record` had no sample for: `retain` with the keys of the last
        `record`, without a set of them (150,000 at 50,000 x 500). Every partition kept in the columns was
        recorded then (those it had no sample for moved apart), so only those kept apart are looked at."""
        self._scalar.retain(set(self._recorded_apart))

    def samples(self, key: Hashable) -> list[Sample]:
        """The samples kept for `key`, oldest first (the latest with its commit time): for tests."""
        column = int(self._index.columns(self._index.codes([key]))[0])
        if column < 0:
            return self._scalar.samples(key)
        first = int(self._first[column])
        commit = float(self._last_commit[column])
        last = len(self._times) - 1
        return [
            Sample(
                self._times[index],
                int(self._committed[self._slot(index), column]),
                int(self._lags(self._slot(index), column)),
                None if index < last or math.isnan(commit) else commit,
            )
            for index in range(first, last + 1)
        ]

    def clear(self) -> None:
        self.__init__(self.window)  # type: ignore[misc]

    def __len__(self) -> int:
        return int(np.count_nonzero(self._used)) + len(self._scalar)
