"""Lag and backpressure exporter: lag of Kafka consumer groups, shadow groups and Spark checkpoints.

Spark keeps its Kafka offsets in the checkpoint and never commits them, so ordinary lag tools cannot see Spark
jobs. This exporter reads three kinds of consumers: ordinary consumer groups (`source="group"`), the shadow
groups streamstack jobs commit each batch's end offsets to (group id starting with `--shadow-prefix`,
`source="shadow"`), and Spark checkpoint directories read straight from disk (`source="checkpoint"`).

Run it (it depends on kafka-python, prometheus-client and, for the CDC source's replication slot, psycopg; it
ships as its own image):

    python -m monitoring.lag_exporter --bootstrap-servers kafka:9092 --listen 0.0.0.0:9308 \\
        --checkpoint-dir clickstream=/checkpoints/clickstream --group-deny 'console-consumer-.*'

A background loop reads Kafka every `--refresh-interval` seconds and publishes an immutable snapshot; a
scrape only serves the latest snapshot, rendered once per snapshot. Modules: `config` (flags and
environment), `sources` (groups and checkpoints), `kafka_reader` (everything read from Kafka), `snapshot`
(lag arithmetic), `status` (the Burrow-style rules, written out in its docstring), `loop` (the refresh
loop), `collector` (Prometheus, /metrics), `main` (the HTTP entry point).

Metrics (labels `source`, `group`, `topic`, `partition`; no `partition` with `--granularity topic`):
  streamstack_lag_committed_offset, streamstack_lag_records, streamstack_lag_seconds,
  streamstack_lag_consumed_records_per_second, streamstack_lag_catch_up_eta_seconds (+Inf: lagging and not
  consuming), streamstack_lag_data_loss, streamstack_lag_lost_records, streamstack_lag_status_code (1 OK,
  2 WARN, 4 STOP, 5 STALL, 6 REWIND; a code, not a series per status: at 150,000 group-partitions a series
  per status would be 750,000 series instead of 150,000, four fifths of them always 0).
Per group (`source`, `group`): streamstack_lag_group_records, streamstack_lag_group_max_records,
  streamstack_lag_group_max_seconds, streamstack_lag_group_status{status=OK|WARN|ERR},
  streamstack_lag_group_status_code.
Per partition of the consumed topics (`topic`, `partition`): streamstack_lag_partition_earliest_offset,
  streamstack_lag_partition_latest_offset.
Per checkpoint (`checkpoint`, `group`): streamstack_lag_checkpoint_readable.
Per CDC replication slot (`database`, `slot`; with --postgres-host, see `postgres_source`):
  streamstack_lag_source_up, streamstack_lag_source_slot_exists, streamstack_lag_source_slot_active,
  streamstack_lag_source_lag_bytes, streamstack_lag_source_lag_seconds,
  streamstack_lag_source_retained_wal_bytes, streamstack_lag_source_wal_disk_bytes,
  streamstack_lag_source_last_success_timestamp_seconds.
Exporter health: streamstack_lag_exporter_up, streamstack_lag_exporter_stale,
  streamstack_lag_exporter_collection_duration_seconds,
  streamstack_lag_exporter_last_success_timestamp_seconds,
  streamstack_lag_exporter_errors_total{kind=kafka|group|checkpoint|timestamp|commit_log|internal}.

Alert on `streamstack_lag_exporter_up == 0` or a `last_success` older than a few intervals: while Kafka is
unreachable the last values stay (with `stale` 1) instead of vanishing.
"""
