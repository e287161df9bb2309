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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.jvm.gateway import in_columns, jvm_class

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


def enrich_with_profile_state(profile_changes: DataFrame, views: DataFrame) -> DataFrame:
    """Each view with its user's profile as the state holds it after the batch's changes.

    `profile_changes`: user_id, position (offset), deleted, the profile fields and updated_at, valid records
    only. `views`: source, user_id, url, event_time. Returns source, user_id, url, event_time, the profile
    fields and profile_updated_at (null when the user is unknown or deleted)."""
    spark = views.sparkSession
    changes = in_columns(profile_changes, CHANGE_COLUMNS, {"is_view": False}).unionByName(
        in_columns(views, CHANGE_COLUMNS, {"is_view": True})
    )
    enriched = jvm_class(spark, PROFILE_TABLE_CLASS).enrich(changes._jdf)
    return DataFrame(enriched, spark).withColumns(
        {
            "event_time": F.timestamp_micros("event_time"),
            "profile_updated_at": F.timestamp_micros("profile_updated_at"),
        }
    )
