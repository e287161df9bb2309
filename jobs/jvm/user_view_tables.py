"""`changed_view_rows`: user-view's per-user view kept as Spark state, the rows a batch changes.

The stateful steps are the JVM `UserViewTables` (two `flatMapGroupsWithState` operators, Java): keyed by
order, the orders table, which turns an order's change into changes of the users that held and hold it (an
order's tombstone names no user); keyed by user, the profile and the user's orders, from which the view row
is computed before and after the batch's changes and emitted when it differs. In the JVM for the reasons
jobs.jvm.profile_table gives.

Needs the jobs' jar on the classpath of the driver and the executors, as `jobs.jvm.decoder` does.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.common.schemas import AMOUNT_TYPE
from jobs.jvm.gateway import in_columns, jvm_class

USER_VIEW_TABLES_CLASS = "streamstack.jvm.UserViewTables"

# UserViewTables' input columns, in its order, and their types: profile and order changes share them.
CHANGE_COLUMNS = {
    "is_order": "boolean",
    "record_key": "string",
    "position": "long",
    "deleted": "boolean",
    "user_id": "string",
    "name": "string",
    "country": "string",
    "tier": "string",
    "amount": AMOUNT_TYPE,
    "updated_at": "timestamp",
}


def changed_view_rows(changes: DataFrame) -> DataFrame:
    """The view rows the batch's changes alter, one per user whose row differs from before the batch.

    `changes`: valid records of both changelogs (dead letters left out): is_order, record_key (the order or
    user id), position (offset), deleted (tombstone), user_id (an order's user; a profile's own id), the
    profile fields, amount (orders) and updated_at. Returns user_id, present (false: the user left the
    view), the profile fields, order_count, order_total (decimal), updated_at (timestamp)."""
    spark = changes.sparkSession
    rows = jvm_class(spark, USER_VIEW_TABLES_CLASS).changedRows(in_columns(changes, CHANGE_COLUMNS, {})._jdf)
    return DataFrame(rows, spark).withColumn("updated_at", F.timestamp_micros("updated_at"))
