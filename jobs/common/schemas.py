"""The JSON events shared by more than one job, how their changelog topics are keyed, and their decoders.

Page views are an event stream: the event time is checked against the record's Kafka timestamp. User
profiles and orders are change data capture (CDC) of database tables, carried on compacted topics: the
record key is the row's primary key, the value the row after the change, and a null value (a tombstone)
deletes the row. Their `updated_at` is data, not an event time: a CDC snapshot replays rows last updated
long ago, so it is not range-checked.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from jobs.common.changelog import decode_changelog
from jobs.common.config import EventLimits
from jobs.common.events import EventField, EventSchema, decode_events

PAGE_VIEW = EventSchema(
    name="page-view",
    fields=(
        EventField("user_id", "string"),
        EventField("url", "string"),
        EventField("event_time", "timestamp"),
    ),
    event_time_field="event_time",
)

USER_PROFILE = EventSchema(
    name="user-profile",
    fields=(
        EventField("user_id", "string"),
        EventField("name", "string"),
        EventField("country", "string"),
        EventField("tier", "string"),
        EventField("updated_at", "timestamp"),
    ),
    tombstones_allowed=True,
)

ORDER = EventSchema(
    name="order",
    fields=(
        EventField("order_id", "string"),
        EventField("user_id", "string"),
        EventField("amount", "double"),
        EventField("status", "string"),
        EventField("updated_at", "timestamp"),
    ),
    tombstones_allowed=True,
)

# The field of a changelog's value that its record key carries (the table's primary key).
USER_PROFILE_KEY_FIELD = "user_id"
ORDER_KEY_FIELD = "order_id"


def decode_page_views(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Kafka records with a typed page view or a dead-letter reason each (see jobs.common.events)."""
    return decode_events(kafka_records, PAGE_VIEW, limits)


def decode_profiles(kafka_records: DataFrame, limits: EventLimits) -> DataFrame:
    """Users changelog records with a typed profile, a tombstone (null event) or a dead-letter reason."""
    return decode_changelog(kafka_records, USER_PROFILE, USER_PROFILE_KEY_FIELD, limits)
