"""The metric names and codes the jobs and the lag exporter serve and `streamstack status` reads.

The rules and dashboards (monitoring/rules, monitoring/dashboards) are checked against live series by the
tests; these are the names that Python code on both sides of a scrape must agree on.
"""

from __future__ import annotations

# The lag exporter's families: LAG_PREFIX + one of these.
LAG_PREFIX = "streamstack_lag_"
EXPORTER_UP = "exporter_up"
EXPORTER_STALE = "exporter_stale"
EXPORTER_LAST_SUCCESS = "exporter_last_success_timestamp_seconds"
STATUS_CODE = "status_code"  # per partition (or topic), Burrow's partition statuses
GROUP_RECORDS = "group_records"
GROUP_MAX_SECONDS = "group_max_seconds"
GROUP_STATUS_CODE = "group_status_code"
CHECKPOINT_READABLE = "checkpoint_readable"
# Source lag: the CDC connector's replication slot in PostgreSQL (monitoring/lag_exporter/postgres_source.py),
# LAG_PREFIX + one of these, labelled {database, slot}.
SOURCE_UP = "source_up"
SOURCE_LAST_SUCCESS = "source_last_success_timestamp_seconds"
SOURCE_SLOT_EXISTS = "source_slot_exists"
SOURCE_SLOT_ACTIVE = "source_slot_active"
SOURCE_RETAINED_WAL_BYTES = "source_retained_wal_bytes"
SOURCE_LAG_BYTES = "source_lag_bytes"
SOURCE_LAG_SECONDS = "source_lag_seconds"
SOURCE_WAL_DISK_BYTES = "source_wal_disk_bytes"

# A job's per-query families: QUERY_PREFIX + one of these, labelled {query}.
QUERY_PREFIX = "streamstack_query_"
QUERY_ACTIVE = "active"
QUERY_FAILED = "failed"
BATCH_UTILIZATION = "batch_utilization"
# Trigger execution seconds of completed batches (a counter): its rate is the share of time spent in batches.
BATCH_SECONDS = "batch_seconds"
RATE_LIMITED = "rate_limited"
WATERMARK_DELAY_SECONDS = "watermark_delay_seconds"
# End-to-end freshness of a view fed by change data capture (jobs.common.progress): seconds from a row's
# commit in the database to the view reflecting it, and the commit times behind it.
FRESHNESS_SECONDS = "freshness_seconds"
SOURCE_COMMIT_OLDEST = "source_commit_oldest_timestamp_seconds"
SOURCE_COMMIT_NEWEST = "source_commit_newest_timestamp_seconds"
SOURCE_COMMIT_APPLIED = "source_commit_applied_timestamp_seconds"

# Burrow's status codes, the values of STATUS_CODE (OK..REWIND but ERR) and GROUP_STATUS_CODE (OK, WARN, ERR).
STATUS_CODES = {"OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5, "REWIND": 6}
PARTITION_STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND")
GROUP_STATUSES = ("OK", "WARN", "ERR")
