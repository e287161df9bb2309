"""Pure DataFrame -> DataFrame steps of the user view job: build the view from the changelogs, diff it
against what the view topic holds."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from contracts.record_headers import SOURCE_COMMIT_HEADER
from jobs.common.changelog import PROFILE_FIELDS, current_rows
from jobs.common.encoding import iso_millis, json_value
from jobs.common.progress import OBSERVED_SOURCE_COMMITS
from jobs.common.schemas import as_amount


def source_commit_ms(headers: str = "headers") -> Column:
    """The record's source commit time in epoch milliseconds, from its `SOURCE_COMMIT_HEADER` header
    (decimal text, contracts.cdc); null when the record has none (the synthetic changelog producer) or it
    is not a number."""
    header = F.try_element_at(
        F.filter(F.col(headers), lambda h: h.getField("key") == F.lit(SOURCE_COMMIT_HEADER)), F.lit(1)
    )
    return header.getField("value").cast("string").try_cast("bigint")


def observe_source_commits(records: DataFrame) -> DataFrame:
    """Kafka records (with headers) unchanged, each batch's source commit times attached as the observed
    metric `source_commits`: the oldest and newest (epoch ms) and how many records carried one."""
    commit = source_commit_ms()
    return records.observe(
        OBSERVED_SOURCE_COMMITS,
        F.min(commit).alias("oldest_ms"),
        F.max(commit).alias("newest_ms"),
        F.count(commit).alias("changes"),
    )


def current_orders(decoded_orders: DataFrame) -> DataFrame:
    """The orders table: order_id, user_id, amount (as `AMOUNT_TYPE`), status, updated_at of each order
    that exists (its last version; deleted orders left out)."""
    return current_rows(decoded_orders).select(
        F.col("record_key").alias("order_id"),
        "user_id",
        as_amount(F.col("amount")).alias("amount"),
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
        *PROFILE_FIELDS,
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
