"""`enrich_with_profile_state`: a batch's views enriched with the users table kept as Spark state.

The stateful step is the JVM `ProfileTable` (`flatMapGroupsWithState` keyed by user, Java): per user and
batch it applies the batch's valid profile changes in offset order, then emits the batch's views with the
resulting profile. Not a Python stateful operator: `transformWithState` starts a driver-side Python worker
that Spark 4.3 gives a hardcoded 10 s to connect back, which a loaded node misses, and
`applyInPandasWithState` converts every user's rows to pandas (measured: ~1.6 ms a user, 13 minutes of CPU
to load a million users).

Needs the jobs' jar on the classpath of the driver and the executors, as `jobs.jvm.decoder` does.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

PROFILE_TABLE_CLASS = "streamstack.jvm.ProfileTable"

# ProfileTable's input columns, in its order, and their types: both kinds of row share them.
CHANGE_COLUMNS = {
    "user_id": "string",
    "is_view": "boolean",
    "position": "long",
    "deleted": "boolean",
    "name": "string",
    "country": "string",
    "tier": "string",
    "updated_at": "timestamp",
    "source": "string",
    "url": "string",
    "event_time": "timestamp",
}


def _as_changes(rows: DataFrame, *, is_view: bool) -> DataFrame:
    """`rows` in ProfileTable's input columns: the ones it lacks null, timestamps as microseconds (Java sees
    plain longs)."""
    present = set(rows.columns)

    def column(name: str, kind: str) -> Column:
        if name == "is_view":
            return F.lit(is_view)
        if name not in present:
            return F.lit(None).cast("long" if kind == "timestamp" else kind)
        return F.unix_micros(F.col(name)) if kind == "timestamp" else F.col(name)

    return rows.select(*[column(name, kind).alias(name) for name, kind in CHANGE_COLUMNS.items()])


def enrich_with_profile_state(profile_changes: DataFrame, views: DataFrame) -> DataFrame:
    """Each view with its user's profile as the state holds it after the batch's changes.

    `profile_changes`: user_id, position (offset), deleted, the profile fields and updated_at, valid records
    only. `views`: source, user_id, url, event_time. Returns source, user_id, url, event_time, the profile
    fields and profile_updated_at (null when the user is unknown or deleted)."""
    spark = views.sparkSession
    changes = _as_changes(profile_changes, is_view=False).unionByName(_as_changes(views, is_view=True))
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        enriched = getattr(jvm, PROFILE_TABLE_CLASS).enrich(changes._jdf)
    except TypeError as error:  # py4j: a JavaPackage, not a class, when the jar is not on the classpath
        raise RuntimeError(
            f"{PROFILE_TABLE_CLASS} is not on the Spark driver's classpath: build the jar "
            "(`python -m jobs.jvm.build`) and add it to spark.jars"
        ) from error
    return DataFrame(enriched, spark).withColumns(
        {
            "event_time": F.timestamp_micros("event_time"),
            "profile_updated_at": F.timestamp_micros("profile_updated_at"),
        }
    )
