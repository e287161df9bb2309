"""Kafka record headers that one side of the pipeline writes and another reads, named once.

The jobs image copies this module (it has no pipeline.yaml and does not import contracts.pipeline)."""

from __future__ import annotations

# On every changelog record from the database: the source commit time, epoch milliseconds as decimal text
# (Debezium's `ExtractNewRecordState` `add.headers=source.ts_ms`, written by `SimpleHeaderConverter`;
# contracts.cdc configures it). The user-view job reads it to publish end-to-end freshness (jobs/user_view).
SOURCE_COMMIT_HEADER = "__source_ts_ms"
