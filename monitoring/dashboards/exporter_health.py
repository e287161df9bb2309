"""Streamstack / Lag exporter health: whether the lag the other dashboards show is current."""

from __future__ import annotations

from monitoring.dashboards.promql import LAG_EXPORTER_SCRAPE, NAMESPACE, RATE_INTERVAL
from monitoring.dashboards.spec import Dashboard, Panel, Row, Target

CHECKPOINTS_OF_JOB = 'namespace=~"$namespace", group=~"($job)/.+"'

DASHBOARD = Dashboard(
    uid="streamstack-lag-exporter",
    title="Streamstack / Lag exporter health",
    description="Scrapes, collections, errors and checkpoints of the lag exporter.",
    rows=(
        Row(
            "Availability",
            (
                Panel(
                    "Scrape target up",
                    "Prometheus' own up series for the exporter's scrape target.",
                    (Target(f"max by (instance) (up{{{LAG_EXPORTER_SCRAPE}}})", "{{instance}}"),),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Kafka reachable",
                    "streamstack_lag_exporter_up: 1 if the last collection reached Kafka.",
                    (
                        Target(
                            f"min by (instance) (streamstack_lag_exporter_up{{{NAMESPACE}}})",
                            "{{instance}}",
                        ),
                    ),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Serving stale values",
                    "1 while the exporter serves the values of an older collection because the last failed.",
                    (
                        Target(
                            f"max by (instance) (streamstack_lag_exporter_stale{{{NAMESPACE}}})",
                            "{{instance}}",
                        ),
                    ),
                    kind="stat",
                    threshold=1,
                    width=6,
                ),
                Panel(
                    "Seconds since last successful collection",
                    "Age of the last successful collection; above 300 s StreamstackLagExporterStale fires.",
                    (
                        Target(
                            "time() - max by (instance) "
                            f"(streamstack_lag_exporter_last_success_timestamp_seconds{{{NAMESPACE}}})",
                            "{{instance}}",
                        ),
                    ),
                    unit="s",
                    kind="stat",
                    threshold=300,
                    width=6,
                ),
            ),
        ),
        Row(
            "Collections",
            (
                Panel(
                    "Collection duration",
                    "How long the last collection took (Kafka offsets, groups, commit log, checkpoints).",
                    (
                        Target(
                            "max by (instance) "
                            f"(streamstack_lag_exporter_collection_duration_seconds{{{NAMESPACE}}})",
                            "{{instance}}",
                        ),
                    ),
                    unit="s",
                ),
                Panel(
                    "Errors per second by kind",
                    "Collection errors: kafka, group, checkpoint, timestamp, commit_log, internal.",
                    (
                        Target(
                            "sum by (kind) "
                            f"(rate(streamstack_lag_exporter_errors_total{{{NAMESPACE}}}[{RATE_INTERVAL}]))",
                            "{{kind}}",
                        ),
                    ),
                ),
                Panel(
                    "Partitions tracked by source",
                    "Group-partition pairs the exporter reports, by source (group, shadow, checkpoint).",
                    (
                        Target(
                            f"count by (source) (streamstack_lag_committed_offset{{{NAMESPACE}}})",
                            "{{source}}",
                        ),
                    ),
                ),
                Panel(
                    "Checkpoints readable",
                    "1 if the job's Spark checkpoint could be read at the last collection.",
                    (
                        Target(
                            f"min by (group) (streamstack_lag_checkpoint_readable{{{CHECKPOINTS_OF_JOB}}})",
                            "{{group}}",
                        ),
                    ),
                ),
            ),
        ),
        Row(
            "Scrapes",
            (
                Panel(
                    "Scrape duration",
                    "How long Prometheus takes to scrape the exporter (a scrape only renders a snapshot).",
                    (
                        Target(
                            f"max by (instance) (scrape_duration_seconds{{{LAG_EXPORTER_SCRAPE}}})",
                            "{{instance}}",
                        ),
                    ),
                    unit="s",
                ),
                Panel(
                    "Samples per scrape",
                    "Series the exporter serves: grows with groups x partitions (use --granularity topic "
                    "to cut it).",
                    (
                        Target(
                            f"max by (instance) (scrape_samples_scraped{{{LAG_EXPORTER_SCRAPE}}})",
                            "{{instance}}",
                        ),
                    ),
                ),
            ),
        ),
    ),
)
