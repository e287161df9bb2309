"""Pure steps of the view-bursts job: per user, the largest number of page views within any sliding window
of `window_ms` (views less than `window_ms` apart in event time), kept by Spark's arbitrary stateful
processing (`applyInPandasWithState`, event-time timeout); plus the encoding of bursts, alerts and late views.

`advance` is the whole per-user algorithm in plain Python (the pandas function only adapts it to Spark's
GroupState), so it can be read, and is tested, on its own.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from jobs.common.encoding import iso_millis, json_value
from jobs.common.events import valid_events

# Per user: the event times (epoch ms, ascending) that an on-time view could still share a window with,
# the largest burst so far (views, first and last view's time) and the user's newest view.
# The buffer is packed as 8-byte integers: pyspark 4.3's Python worker cannot read an array type in a state
# schema (`ArrayType.fromJson` KeyError 'elementType'), and packed it is also smaller.
STATE_SCHEMA = "buffer binary, views bigint, first_ms bigint, last_ms bigint, newest_ms bigint"
BURST_SCHEMA = "user_id string, views bigint, first_ms bigint, last_ms bigint"


@dataclass(frozen=True)
class Burst:
    """`views` views, the first at `first_ms` and the last at `last_ms` (last - first < the window)."""

    views: int
    first_ms: int
    last_ms: int


@dataclass(frozen=True)
class UserState:
    buffer: tuple[int, ...]
    best: Burst
    newest_ms: int


def pack(times: tuple[int, ...]) -> bytes:
    return array("q", times).tobytes()


def unpack(packed: bytes) -> tuple[int, ...]:
    times = array("q")
    times.frombytes(bytes(packed))
    return tuple(times)


def largest_window(times: list[int], window_ms: int) -> Burst:
    """The largest run of `times` (ascending) whose last and first are less than `window_ms` apart; of equal
    runs, the one that ends first."""
    best = Burst(0, 0, 0)
    start = 0
    for end, last in enumerate(times):
        while last - times[start] >= window_ms:
            start += 1
        if end - start + 1 > best.views:
            best = Burst(end - start + 1, times[start], last)
    return best


def advance(
    previous: UserState | None, new_times: Iterable[int], watermark_ms: int, window_ms: int
) -> tuple[UserState | None, Burst | None]:
    """A user's state after a batch brought `new_times` (all after the watermark: Spark drops older
    views before this step) and the watermark moved to `watermark_ms`.

    Returns the new state and the burst to emit: the largest burst when it is larger than before (a tie
    keeps the burst already emitted). The buffer keeps only times after `watermark_ms - window_ms`: an
    on-time view comes after the watermark, so it shares no window with an older one. None as state: the
    buffer is empty and there is nothing new (the caller decides when to forget the user)."""
    buffer = list(previous.buffer) if previous else []
    best = previous.best if previous else Burst(0, 0, 0)
    newest = previous.newest_ms if previous else None
    added = sorted(new_times)
    for time in added:
        bisect.insort(buffer, time)
    emitted = None
    if added:
        candidate = largest_window(buffer, window_ms)
        if candidate.views > best.views:
            best = emitted = candidate
        newest = max(added[-1], newest) if newest is not None else added[-1]
    kept = buffer[bisect.bisect_right(buffer, watermark_ms - window_ms) :]
    if newest is None:
        return None, emitted
    return UserState(tuple(kept), best, newest), emitted


def burst_state_function(
    window_ms: int, retention_ms: int
) -> Callable[[Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The function `applyInPandasWithState` calls per user with that user's new views (`view_ms`), or
    with none when the user's event-time timeout fires.

    Timeout: while the buffer holds views, at the newest one + the window (then the buffer empties);
    then at the user's newest view + `retention_ms`, when the user's state is removed."""

    def update(key: Any, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (user_id,) = key
        new_times = [int(time) for batch in batches for time in batch["view_ms"]]
        previous = None
        if state.exists:
            buffer, views, first_ms, last_ms, newest_ms = state.get
            previous = UserState(unpack(buffer), Burst(views, first_ms, last_ms), newest_ms)
        watermark = max(int(state.getCurrentWatermarkMs()), 0)
        if previous is not None and previous.newest_ms + retention_ms <= watermark:
            # Forgotten, whether its timeout fired in an earlier batch or new views came first.
            previous = None
        current, emitted = advance(previous, new_times, watermark, window_ms)
        if current is None:
            state.remove()
        else:
            best = current.best
            state.update((pack(current.buffer), best.views, best.first_ms, best.last_ms, current.newest_ms))
            wake = current.buffer[-1] + window_ms if current.buffer else current.newest_ms + retention_ms
            state.setTimeoutTimestamp(max(wake, watermark + 1))
        if emitted is not None:
            yield pd.DataFrame(
                {
                    "user_id": [user_id],
                    "views": [emitted.views],
                    "first_ms": [emitted.first_ms],
                    "last_ms": [emitted.last_ms],
                }
            )

    return update


def page_views(decoded: DataFrame) -> DataFrame:
    """The valid page views: user_id, url, event_time."""
    return valid_events(decoded)


def largest_bursts(
    page_views: DataFrame, window_ms: int, watermark_delay: str, retention_ms: int
) -> DataFrame:
    """Per user, each time it grows, the largest number of views within any `window_ms` of event time:
    user_id, views, first_view, last_view (update mode). Views at or before the watermark are dropped
    (and counted) by Spark before the state function sees them."""
    return (
        page_views.withWatermark("event_time", watermark_delay)
        .select("user_id", "event_time", F.unix_millis("event_time").alias("view_ms"))
        .groupBy("user_id")
        .applyInPandasWithState(
            burst_state_function(window_ms, retention_ms),
            outputStructType=BURST_SCHEMA,
            stateStructType=STATE_SCHEMA,
            outputMode="update",
            timeoutConf=GroupStateTimeout.EventTimeTimeout,
        )
        .select(
            "user_id",
            "views",
            F.timestamp_millis("first_ms").alias("first_view"),
            F.timestamp_millis("last_ms").alias("last_view"),
        )
    )


def bursts_as_records(bursts: DataFrame, threshold: int) -> DataFrame:
    """Kafka key `<user_id>` (compacted: the latest is the largest) and a JSON value; `over_threshold` when
    the burst has more views than `threshold`."""
    return bursts.select(
        F.col("user_id").alias("key"),
        json_value(
            F.col("user_id"),
            F.col("views"),
            iso_millis("first_view").alias("first_view"),
            iso_millis("last_view").alias("last_view"),
            (F.col("views") > F.lit(threshold)).alias("over_threshold"),
        ),
    )


def alerts(burst_records: DataFrame) -> DataFrame:
    """The burst records (the output topic read back) whose burst is over the threshold, as they were."""
    over = F.try_variant_get(F.try_parse_json(F.col("value").cast("string")), "$.over_threshold", "boolean")
    return burst_records.where(F.coalesce(over, F.lit(False))).select("key", "value")


# --- Late views: routed to a topic for corrections --------------------------------------------------------


def late_views(view_records: DataFrame, watermark_ms: int) -> DataFrame:
    """The views the burst state drops at this watermark: event time at or before it (per batch)."""
    return view_records.where(F.col("event_time") <= F.timestamp_millis(F.lit(watermark_ms)))
