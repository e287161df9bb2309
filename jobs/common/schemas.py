"""The JSON events shared by more than one job, and how their changelog topics are keyed.

Page views are an event stream: the event time is checked against the record's Kafka timestamp. User
profiles and orders are change data capture (CDC) of database tables, carried on compacted topics: the
record key is the row's primary key, the value the row after the change, and a null value (a tombstone)
deletes the row. Their `updated_at` is data, not an event time: a CDC snapshot replays rows last updated
long ago, so it is not range-checked.
"""

from __future__ import annotations

from jobs.common.events import EventField, EventSchema

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
