"""The generated dashboards' queries as Grafana sends them, and which of them a Prometheus answers empty.

Grafana interpolates `$var` / `${var}` into a panel's query before sending it; with a variable at "All" our
dashboards match `.*`. The rehearsal checks the Kafka panels (the queries naming a `kafka_*` metric) against
its own Prometheus, which scrapes the broker's Strimzi metrics reporter: the names a Strimzi cluster exports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitoring.dashboards.build import GENERATED_DIR
from streamstack.local.prometheus import query_prometheus

ALL_VALUES = {"namespace": ".*", "job": ".*", "topic": ".*"}
RATE_INTERVAL = "1m"
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
_KAFKA_METRIC = re.compile(r"\bkafka_\w+")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    title: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard}/{self.title}: {self.expr}"


def dashboards() -> dict[str, dict[str, Any]]:
    """The generated dashboards by uid (file stem)."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(GENERATED_DIR.glob("*.json"))}


def grafana_substitute(expr: str, values: Mapping[str, str]) -> str:
    """`$name` / `${name}` as Grafana interpolates a Prometheus query; `$__rate_interval` as 1m."""
    values = {**values, "__rate_interval": RATE_INTERVAL}
    return _VARIABLE.sub(lambda match: values[match.group(1)], expr)


def panel_queries(values: Mapping[str, str] = ALL_VALUES) -> list[PanelQuery]:
    return [
        PanelQuery(uid, panel["title"], grafana_substitute(target["expr"], values))
        for uid, dashboard in dashboards().items()
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def kafka_panel_queries() -> list[PanelQuery]:
    """Every panel query that reads a broker metric."""
    return [query for query in panel_queries() if _KAFKA_METRIC.search(query.expr)]


def without_data(prometheus_url: str, queries: Sequence[PanelQuery]) -> list[PanelQuery]:
    return [query for query in queries if not query_prometheus(prometheus_url, query.expr, timeout=15)]
