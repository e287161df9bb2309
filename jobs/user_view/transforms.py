"""Pure DataFrame -> DataFrame steps of the user view job: decode the changelogs, build the view, diff it
against what the view topic holds."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.common.changelog import current_rows, decode_changelog
from jobs.common.config import EventLimits
from jobs.common.encoding import iso_millis, json_value
from jobs.common.schemas import ORDER, ORDER_KEY_FIELD

# Money is summed as decimal, so a total does not depend on the order rows are added in (a re-run batch
# writes the same value) and 0.10 + 0.20 is 0.30. Amounts are rounded half up to cents.
AMOUNT_TYPE = "decimal(18,2)"
AMOUNT_LIMIT = 10**16


def decode_orders(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Orders changelog records with a typed order, a tombstone or a dead-letter reason; an amount that
    does not fit `AMOUNT_TYPE` is a dead letter too (`out_of_range`)."""
    decoded = decode_changelog(kafka_records, ORDER, ORDER_KEY_FIELD, limits)
    amount = F.col("event.amount")
    out_of_range = F.col("dead_letter_reason").isNull() & amount.isNotNull() & _amount(amount).isNull()
    return decoded.withColumns(
        {
            "event": F.when(~out_of_range, F.col("event")),
            "dead_letter_reason": F.when(out_of_range, F.lit("out_of_range")).otherwise(
                F.col("dead_letter_reason")
            ),
            "dead_letter_detail": F.when(
                out_of_range,
                F.format_string(f"field 'amount' is %s, limit ±{AMOUNT_LIMIT:.0e}", amount.cast("string")),
            ).otherwise(F.col("dead_letter_detail")),
        }
    )


def _amount(amount: Column) -> Column:
    return amount.try_cast(AMOUNT_TYPE)


def current_profiles(decoded_profiles: DataFrame) -> DataFrame:
    """The users table: user_id, name, country, tier, updated_at of each existing user."""
    return current_rows(decoded_profiles).select(
        F.col("record_key").alias("user_id"), "name", "country", "tier", "updated_at"
    )


def current_orders(decoded_orders: DataFrame) -> DataFrame:
    """The orders table: order_id, user_id, amount (as `AMOUNT_TYPE`), status, updated_at of each order
    that exists (its last version; deleted orders left out)."""
    return current_rows(decoded_orders).select(
        F.col("record_key").alias("order_id"),
        "user_id",
        _amount(F.col("amount")).alias("amount"),
        "status",
        "updated_at",
    )


def user_view(profiles: DataFrame, orders: DataFrame) -> DataFrame:
    """One row per existing user: the profile, the count and total of the user's existing orders (every
    status counts), and updated_at, the latest updated_at of the profile and those orders. Orders of users
    without a profile are in no row until the profile appears."""
    per_user = orders.groupBy(F.col("user_id").alias("order_user_id")).agg(
        F.count(F.lit(1)).alias("order_count"),
        F.sum("amount").alias("order_total"),
        F.max("updated_at").alias("orders_updated_at"),
    )
    return profiles.join(per_user, profiles["user_id"] == per_user["order_user_id"], "left").select(
        "user_id",
        "name",
        "country",
        "tier",
        F.coalesce(F.col("order_count"), F.lit(0)).alias("order_count"),
        F.coalesce(F.col("order_total"), F.lit(0)).cast("double").alias("order_total"),
        F.greatest(F.col("updated_at"), F.col("orders_updated_at")).alias("updated_at"),
    )


def user_view_as_records(view: DataFrame) -> DataFrame:
    """Kafka key: the user id; value: the row as JSON (the same row always encodes to the same text)."""
    return view.select(
        F.col("user_id").alias("key"),
        json_value(
            "user_id",
            "name",
            "country",
            "tier",
            "order_count",
            "order_total",
            iso_millis("updated_at").alias("updated_at"),
        ),
    )


def stored_view(view_topic_records: DataFrame) -> DataFrame:
    """What the view topic holds: key and the value of each key's last record (null for a tombstone)."""
    return view_topic_records.groupBy(F.col("key").cast("string").alias("key")).agg(
        F.max_by(F.struct(F.col("value").cast("string").alias("value")), F.struct("offset", "partition"))
        .getField("value")
        .alias("value")
    )


def view_changes(view_records: DataFrame, stored: DataFrame) -> DataFrame:
    """The records that make the view topic hold `view_records`: the rows that are new or differ from the
    stored value, and a tombstone (null value) for each stored row whose user no longer exists."""
    new, old = view_records.alias("new"), stored.alias("old")
    return (
        new.join(old, F.col("new.key") == F.col("old.key"), "full_outer")
        .where(~F.col("new.value").eqNullSafe(F.col("old.value")))
        .select(
            F.coalesce(F.col("new.key"), F.col("old.key")).alias("key"),
            F.col("new.value").alias("value"),
        )
    )
