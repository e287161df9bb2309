"""Streamstack / Pipeline overview: per streaming job, lag, throughput, backpressure, event time, state, dead
letters and health. Lag comes from the lag exporter (`streamstack_lag_*`), the rest from the jobs' drivers
(`streamstack_query_*`)."""

from __future__ import annotations

from monitoring.dashboards.promql import NAMESPACE, QUERIES_OF_JOB, per_group, per_query
from monitoring.dashboards.spec import Dashboard, Panel, Row, Target

ROWS_PER_SECOND = "suffix: rows/s"

LAG_SECONDS = Panel(
    "Lag in seconds",
    "Age of the oldest record each consumer has not processed yet (worst partition of the group); the red "
    "line is the 60 s lag SLO. Checkpoint and shadow groups of the same query normally coincide.",
    per_group("max", "streamstack_lag_group_max_seconds"),
    unit="s",
    threshold=60,
)
LAG_RECORDS = Panel(
    "Lag in records",
    "Records between each consumer's committed position and the end of the log, summed over partitions.",
    per_group("sum", "streamstack_lag_group_records"),
)
SLO_BURN = Panel(
    "Time over the lag SLO, last hour",
    "Fraction of the last hour each group was more than 60 s behind (recording rule "
    "source_group:streamstack_lag_slo_breach:ratio_1h). The SLO allows 1% (the red line); 14.4% pages.",
    per_group("max", "source_group:streamstack_lag_slo_breach:ratio_1h"),
    unit="percentunit",
    threshold=0.01,
)
CATCH_UP_ETA = Panel(
    "Catch-up ETA",
    "Lag divided by the rate the consumer commits at: how long until it is caught up if input stopped. "
    "+Inf: lagging and not consuming.",
    per_group("max", "streamstack_lag_catch_up_eta_seconds"),
    unit="s",
)
SOURCE_LAG_SECONDS = Panel(
    "Source lag in seconds (CDC)",
    "How long ago the database's WAL stood where the Debezium connector's replication slot has confirmed "
    "(lag exporter, from pg_replication_slots), beside Debezium's own milliseconds behind source (the last "
    "change event's commit to its processing; kept while idle). The red line is the 60 s source lag SLO.",
    (
        Target(f"max by (slot) (streamstack_lag_source_lag_seconds{{{NAMESPACE}}})", "{{slot}} slot"),
        Target(
            "max by (name) (debezium_metrics_millisecondsbehindsource"
            f'{{context="streaming", {NAMESPACE}}}) / 1000',
            "{{name}} Debezium",
        ),
    ),
    unit="s",
    threshold=60,
)
SOURCE_LAG_BYTES = Panel(
    "Source lag and retained WAL in bytes (CDC)",
    "WAL the connector has not confirmed yet (current LSN - confirmed_flush_lsn), and WAL PostgreSQL keeps "
    "for the slot (current LSN - restart_lsn): grows while nobody reads the slot, until the disk is full.",
    (
        Target(f"max by (slot) (streamstack_lag_source_lag_bytes{{{NAMESPACE}}})", "{{slot}} not confirmed"),
        Target(
            f"max by (slot) (streamstack_lag_source_retained_wal_bytes{{{NAMESPACE}}})", "{{slot}} retained"
        ),
    ),
    unit="bytes",
)
FRESHNESS = Panel(
    "End-to-end freshness (CDC)",
    "Seconds from a row's commit in PostgreSQL to the view reflecting it (the job's driver, from the commit "
    "times Debezium carries): now minus the oldest commit of the last batch while input may be waiting, "
    "that batch's delay once the query is idle (an idle database does not age it). Only jobs fed by the "
    "database. The red line is the 120 s freshness SLO.",
    per_query("max", "streamstack_query_freshness_seconds"),
    unit="s",
    threshold=120,
)
INPUT_VS_PROCESSED = Panel(
    "Input vs processed rows per second",
    "Rows per second arriving in each batch against rows per second the batch processed. Processed "
    "persistently below input means the query falls behind.",
    (
        Target(
            f"sum by (query) (streamstack_query_input_rows_per_second{{{QUERIES_OF_JOB}}})", "{{query}} input"
        ),
        Target(
            f"sum by (query) (streamstack_query_processed_rows_per_second{{{QUERIES_OF_JOB}}})",
            "{{query}} processed",
        ),
    ),
    unit=ROWS_PER_SECOND,
)
BATCH_UTILIZATION = Panel(
    "Batch utilization",
    "Trigger execution time of the last batch divided by the trigger interval, and ('time in batches') "
    "the share of time the query spent running batches. Above 100% (the red line) every batch starts late "
    "and the query falls behind: backpressure. StreamstackJobBackpressure watches the time in batches "
    "(over 95% for 10 minutes), which a slow first batch after a start raises only for as long as it ran.",
    (
        *per_query("max", "streamstack_query_batch_utilization"),
        Target(
            per_query("sum", "streamstack_query_batch_seconds_total", rate=True)[0].expr,
            "{{query}} time in batches",
        ),
    ),
    unit="percentunit",
    threshold=1,
)
RATE_LIMITED = Panel(
    "Rate limited",
    "1 when the last batch stopped short of the latest offsets because of --max-offsets-per-trigger. "
    "Always 1 means input outgrows the cap.",
    per_query("max", "streamstack_query_rate_limited"),
)
BATCH_DURATION = Panel(
    "Batch duration",
    "Trigger execution time of the last batch.",
    per_query("max", "streamstack_query_batch_duration_seconds"),
    unit="s",
)
OFFSETS_BEHIND = Panel(
    "Offsets behind latest, as Spark saw them",
    "Records between the last batch's end offsets and the latest offsets Spark saw when planning it. Reads "
    "~0 whenever a batch takes everything available: use the lag panels for the real lag.",
    per_query("sum", "streamstack_query_offsets_behind_latest", also_by="topic"),
    width=24,
)
WATERMARK_DELAY = Panel(
    "Watermark delay",
    "How far the event-time watermark trails the last batch's trigger time (stateful queries with a "
    "watermark). Growing: event time does not keep up, results come ever later.",
    per_query("max", "streamstack_query_watermark_delay_seconds"),
    unit="s",
)
LATE_ROWS = Panel(
    "Late rows dropped by the watermark",
    "Rows per second older than the watermark, dropped by stateful operators (windows, joins).",
    per_query("sum", "streamstack_query_rows_dropped_by_watermark_total", rate=True),
    unit=ROWS_PER_SECOND,
)
STATE_ROWS = Panel(
    "State rows",
    "Rows held in the state stores of each stateful query.",
    per_query("sum", "streamstack_query_state_rows"),
)
STATE_MEMORY = Panel(
    "State memory",
    "Memory used by the state stores of each stateful query.",
    per_query("sum", "streamstack_query_state_memory_bytes"),
    unit="bytes",
)
DEAD_LETTERS = Panel(
    "Dead letters by reason",
    "Malformed input records per second sent to the dead-letter topic, by reason "
    "(see jobs/common/events.py).",
    per_query("sum", "streamstack_query_dead_letters_total", also_by="reason", rate=True),
    unit=ROWS_PER_SECOND,
)
SINCE_PROGRESS = Panel(
    "Seconds since last progress",
    "Time since each active query last reported a batch or being idle; above 300 s (the red line) it "
    "hangs and StreamstackJobNotProgressing fires.",
    per_query("max", "streamstack_query_seconds_since_last_progress"),
    unit="s",
    threshold=300,
)
ACTIVE_QUERIES = Panel(
    "Queries active / failed",
    "Queries running now, and queries that stopped with an exception (their driver still up).",
    (
        Target(f"sum(streamstack_query_active{{{QUERIES_OF_JOB}}})", "active"),
        Target(f"sum(streamstack_query_failed{{{QUERIES_OF_JOB}}})", "failed"),
    ),
    kind="stat",
    width=6,
)
BATCHES = Panel(
    "Batches per minute",
    "Completed micro-batches per minute, per query.",
    per_query("sum", "streamstack_query_batches_total", rate=True, scale=" * 60"),
    width=6,
)

PNG_PANELS = (LAG_SECONDS, LAG_RECORDS, INPUT_VS_PROCESSED, BATCH_UTILIZATION)
"""The panels `streamstack panels` renders to a PNG."""

DASHBOARD = Dashboard(
    uid="streamstack-pipeline-overview",
    title="Streamstack / Pipeline overview",
    description="Per streaming job: lag (records, seconds, SLO), throughput, backpressure, event time, "
    "state, dead letters and health.",
    rows=(
        Row("Lag", (LAG_SECONDS, LAG_RECORDS, SLO_BURN, CATCH_UP_ETA)),
        Row("Source (change data capture)", (SOURCE_LAG_SECONDS, SOURCE_LAG_BYTES, FRESHNESS)),
        Row(
            "Throughput and backpressure",
            (INPUT_VS_PROCESSED, BATCH_UTILIZATION, RATE_LIMITED, BATCH_DURATION, OFFSETS_BEHIND),
        ),
        Row("Event time and state", (WATERMARK_DELAY, LATE_ROWS, STATE_ROWS, STATE_MEMORY)),
        Row("Dead letters and health", (DEAD_LETTERS, SINCE_PROGRESS, ACTIVE_QUERIES, BATCHES)),
    ),
)
