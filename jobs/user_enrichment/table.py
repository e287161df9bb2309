"""The users table as Spark state: one profile per user, kept by `transformWithState`.

The job groups a batch's rows by user id: the user's profile changes (valid users-changelog records) and
views (valid page views), in one schema (`transforms.profile_changes`, `transforms.views_for_table`) and told
apart by `is_change`. Per user and batch `ProfileTable` first applies the batch's changes in (offset,
partition) order, so only the last one counts (a tombstone clears the profile), then emits each of the
batch's views with the profile that results, or nulls when there is none. State: a ValueState `profile`
per user that has one (`PROFILE_STATE`); a user without views or changes in a batch costs that batch
nothing. Times travel as epoch microseconds (longs), so no time zone or pandas timestamp type comes into
play.

Python runs here because Spark offers keyed state with an arbitrary per-key program to Python only this
way; it sees the batch's rows, never the table. It is the row-based `transformWithState` (Spark 4.1+), not
`transformWithStateInPandas`: most groups hold one or two rows, and a pandas DataFrame per group costs more
than the work; reading 100k users into state took 123 s with pandas and 40 s with rows (scripts/bench_tables
on 2 cores). pandas is still needed: pyspark builds the operator as a pandas UDF.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import LongType, StringType, StructField, StructType

from jobs.common.changelog import PROFILE_FIELDS

# A user's current profile: the profile fields and updated_at (epoch microseconds).
PROFILE_STATE = StructType(
    [*(StructField(name, StringType()) for name in PROFILE_FIELDS), StructField("updated_at_us", LongType())]
)
# What the processor emits: each view with the profile it saw (nulls for none).
ENRICHED_VIEW = StructType(
    [
        StructField("source", StringType()),
        StructField("user_id", StringType()),
        StructField("url", StringType()),
        StructField("event_time_us", LongType()),
        *PROFILE_STATE.fields,
    ]
)
VIEW_COLUMNS = ("source", "user_id", "url", "event_time_us")
PROFILE_COLUMNS = tuple(PROFILE_STATE.fieldNames())


class ProfileTable(StatefulProcessor):
    """Per user: apply the batch's profile changes, then enrich the batch's views (see the module)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.profile = handle.getValueState("profile", PROFILE_STATE)

    def handleInputRows(  # noqa: N802 (Spark's method names)
        self,
        key: Any,
        rows: Any,
        timerValues: Any,  # noqa: N803
    ) -> Iterator[Row]:
        last_change: Row | None = None
        views: list[Row] = []
        for row in rows:
            if not row["is_change"]:
                views.append(row)
            elif last_change is None or (row["offset"], row["partition"]) > (
                last_change["offset"],
                last_change["partition"],
            ):
                last_change = row
        current: tuple[Any, ...] | None = None
        if last_change is not None:
            if last_change["deleted"]:
                self.profile.clear()
            else:
                current = tuple(last_change[name] for name in PROFILE_COLUMNS)
                self.profile.update(current)
        elif views:
            current = self.profile.get()
        profile = dict(zip(PROFILE_COLUMNS, current or (None,) * len(PROFILE_COLUMNS), strict=True))
        for view in views:
            yield Row(**{name: view[name] for name in VIEW_COLUMNS}, **profile)

    def close(self) -> None:
        pass
