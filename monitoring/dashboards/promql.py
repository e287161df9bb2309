"""PromQL the dashboards share: label selectors for the template variables (see `spec`), Grafana's rate
interval, and the targets that show one series per query or per consumer group of the selected jobs."""

from __future__ import annotations

from monitoring.dashboards.spec import Target

RATE_INTERVAL = "$__rate_interval"

NAMESPACE = 'namespace=~"$namespace"'
QUERIES_OF_JOB = 'namespace=~"$namespace", query=~"($job)([.].+)?"'
"""A job's queries: `<job>` and `<job>.<kind>`."""
GROUPS_OF_JOB = 'namespace=~"$namespace", group=~"($job)(/.+)?|streamstack-($job)([.].+)?"'
"""A job's lag: its checkpoint groups (`<job>/<query>`), its shadow groups (`streamstack-<query>`), or an
ordinary consumer group named like the job. With "All" every group matches."""
LAG_EXPORTER_SCRAPE = 'job=~".*lag-exporter.*", namespace=~"$namespace"'
"""Prometheus' own `job` label of the exporter's scrape target (see rules/streamstack-exporter.yaml)."""


def per_query(
    aggregation: str, metric: str, *, also_by: str = "", rate: bool = False, scale: str = ""
) -> tuple[Target]:
    """The targets of a panel with one series per query of the selected jobs (and per `also_by` label):
    `metric` aggregated by query, as its per-second `rate` for counters, times `scale` (e.g. " * 60")."""
    labels = f"query, {also_by}" if also_by else "query"
    legend = f"{{{{query}}}} {{{{{also_by}}}}}" if also_by else "{{query}}"
    selected = f"{metric}{{{QUERIES_OF_JOB}}}"
    series = f"rate({selected}[{RATE_INTERVAL}])" if rate else selected
    return (Target(f"{aggregation} by ({labels}) ({series}){scale}", legend),)


def per_group(aggregation: str, metric: str) -> tuple[Target]:
    """The targets of a panel with one series per consumer (source and group) of the selected jobs."""
    return (
        Target(f"{aggregation} by (source, group) ({metric}{{{GROUPS_OF_JOB}}})", "{{group}} ({{source}})"),
    )
