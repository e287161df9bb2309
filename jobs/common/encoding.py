"""How jobs encode values for Kafka: JSON values, ISO-8601 timestamps, record positions and headers.

Every job writes timestamps the same way, `2026-01-01T12:00:00.123Z` (UTC, the session time zone that
`jobs.common.session` sets, to the millisecond), so that consumers parse one format.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def iso_millis(column: Column | str) -> Column:
    """A timestamp column (or column name) as ISO-8601 text to the millisecond; null stays null."""
    return F.date_format(column, ISO_MILLIS)


def json_value(*fields: Column | str, keep_nulls: bool = False) -> Column:
    """The Kafka `value` column: the fields as one JSON object, in order. Null fields are left out, or
    with `keep_nulls` written as explicit nulls."""
    options = {"ignoreNullFields": "false"} if keep_nulls else None
    return F.to_json(F.struct(*fields), options).alias("value")


def record_position() -> Column:
    """A Kafka record's position `<topic>/<partition>/<offset>`, unique per record: a key that a re-run
    batch writes again rather than anew."""
    return F.format_string("%s/%d/%d", "topic", "partition", "offset")


def kafka_header(key: str, value: Column) -> Column:
    """One element of a Kafka sink's `headers` array: the key and the value as UTF-8 text."""
    return F.struct(F.lit(key).alias("key"), value.cast("string").cast("binary").alias("value"))


def source_headers(*, timestamp: bool = False) -> list[Column]:
    """Headers naming a record's origin: `source.topic`, `source.partition`, `source.offset`, (with
    `timestamp`) `source.timestamp`, and `source.key`."""
    headers = [
        kafka_header("source.topic", F.col("topic")),
        kafka_header("source.partition", F.col("partition")),
        kafka_header("source.offset", F.col("offset")),
    ]
    if timestamp:
        headers.append(kafka_header("source.timestamp", iso_millis("timestamp")))
    headers.append(kafka_header("source.key", F.col("key")))
    return headers
