"""Pure DataFrame -> DataFrame steps of the user view job: both changelogs as changes to their tables, the
changed view rows as records, and what of them the view topic does not hold yet."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from contracts.record_headers import SOURCE_COMMIT_HEADER
from jobs.common.changelog import PROFILE_FIELDS
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


def table_changes(decoded_profiles: DataFrame, decoded_orders: DataFrame) -> DataFrame:
    """Both changelogs' records as changes to their tables, in one frame (jobs.jvm.user_view_tables'
    columns): is_order, record_key (the user or order id), position (the offset: a row's changes share one
    partition), deleted (a tombstone), user_id (a profile's own id, an order's user), the profile fields,
    amount (as `AMOUNT_TYPE`), updated_at; plus `dead_letter_reason` (only records without one change a
    table) and `headers`."""
    event = F.col("event")

    def changes(decoded: DataFrame, *, is_order: bool, fields: dict[str, Column]) -> DataFrame:
        return decoded.select(
            F.lit(is_order).alias("is_order"),
            F.col("key").cast("string").alias("record_key"),
            F.col("offset").alias("position"),
            F.col("value").isNull().alias("deleted"),
            *[column.alias(name) for name, column in fields.items()],
            event.getField("updated_at").alias("updated_at"),
            "dead_letter_reason",
            "headers",
        )

    profiles = changes(
        decoded_profiles,
        is_order=False,
        fields={
            "user_id": F.col("key").cast("string"),
            **{name: event.getField(name) for name in PROFILE_FIELDS},
        },
    )
    orders = changes(
        decoded_orders,
        is_order=True,
        fields={"user_id": event.getField("user_id"), "amount": as_amount(event.getField("amount"))},
    )
    return profiles.unionByName(orders, allowMissingColumns=True)


def user_view_as_records(rows: DataFrame) -> DataFrame:
    """Kafka key: the user id; value: the row as JSON (the same row always encodes to the same text), or
    null (a tombstone) for a user who is not `present`."""
    row = json_value(
        "user_id",
        "name",
        "country",
        "tier",
        "order_count",
        F.col("order_total").cast("double").alias("order_total"),
        iso_millis("updated_at").alias("updated_at"),
    )
    return rows.select(F.col("user_id").alias("key"), F.when(F.col("present"), row).alias("value"))


def stored_view(view_topic_records: DataFrame) -> DataFrame:
    """What the view topic holds: key and the value of each key's last record (null for a tombstone)."""
    return view_topic_records.groupBy(F.col("key").cast("string").alias("key")).agg(
        F.max_by(F.struct(F.col("value").cast("string").alias("value")), F.struct("offset", "partition"))
        .getField("value")
        .alias("value")
    )


def not_yet_stored(view_records: DataFrame, stored: DataFrame) -> DataFrame:
    """The records the view topic does not hold yet: rows whose stored value differs or is missing, and
    tombstones for rows the topic still holds. What a batch re-run after a failure still has to write."""
    new, old = view_records.alias("new"), stored.alias("old")
    return (
        new.join(old, F.col("new.key") == F.col("old.key"), "left")
        .where(~F.col("new.value").eqNullSafe(F.col("old.value")))
        .select("new.key", "new.value")
    )
