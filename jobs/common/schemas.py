"""Every job's input events, how the changelog topics are keyed, and their decoders (Kafka records in, a typed
event or a dead-letter reason out; see jobs.common.events).

Page views are an event stream: the event time is checked against the record's Kafka timestamp. User
profiles and orders are change data capture (CDC) of database tables, carried on compacted topics: the
record key is the row's primary key, the value the row after the change, and a null value (a tombstone)
deletes the row. Their `updated_at` is data, not an event time: a CDC snapshot replays rows last updated
long ago, so it is not range-checked.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.common.changelog import decode_changelog
from jobs.common.config import EventLimits
from jobs.common.events import EventSchema, decode_events

PAGE_VIEW = EventSchema.of(
    "page-view", "user_id:string url:string event_time:timestamp", event_time_field="event_time"
)
IMPRESSION = EventSchema.of(
    "ad-impression",
    "impression_id:string ad_id:string user_id:string event_time:timestamp",
    event_time_field="event_time",
)
CLICK = EventSchema.of(
    "ad-click",
    "click_id:string impression_id:string ad_id:string user_id:string event_time:timestamp",
    event_time_field="event_time",
)
USER_PROFILE = EventSchema.of(
    "user-profile",
    "user_id:string name:string country:string tier:string updated_at:timestamp",
    tombstones_allowed=True,
)
ORDER = EventSchema.of(
    "order",
    "order_id:string user_id:string amount:double status:string updated_at:timestamp",
    tombstones_allowed=True,
)

# The field of a changelog's value that its record key carries (the table's primary key).
USER_PROFILE_KEY_FIELD = "user_id"
ORDER_KEY_FIELD = "order_id"

# Money is summed as decimal, so a total does not depend on the order rows are added in (a re-run batch
# writes the same value) and 0.10 + 0.20 is 0.30. Amounts are rounded half up to cents.
AMOUNT_TYPE = "decimal(18,2)"
AMOUNT_LIMIT = 10**16


def decode_page_views(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    return decode_events(kafka_records, PAGE_VIEW, limits)


def decode_impressions(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    return decode_events(kafka_records, IMPRESSION, limits)


def decode_clicks(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    return decode_events(kafka_records, CLICK, limits)


def decode_profiles(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Users changelog records with a typed profile, a tombstone (null event) or a dead-letter reason."""
    return decode_changelog(kafka_records, USER_PROFILE, USER_PROFILE_KEY_FIELD, limits)


def decode_orders(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Orders changelog records with a typed order, a tombstone or a dead-letter reason; an amount that
    does not fit `AMOUNT_TYPE` is a dead letter too (`out_of_range`)."""
    decoded = decode_changelog(kafka_records, ORDER, ORDER_KEY_FIELD, limits)
    amount = F.col("event.amount")
    out_of_range = F.col("dead_letter_reason").isNull() & amount.isNotNull() & as_amount(amount).isNull()
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


def as_amount(amount: Column) -> Column:
    """An amount as `AMOUNT_TYPE` (rounded half up to cents), or null when it does not fit."""
    return amount.try_cast(AMOUNT_TYPE)
