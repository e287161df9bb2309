"""The dashboard model: typed, frozen specs that `build` renders with grafana-foundation-sdk.

Template variables every dashboard has: `datasource` (a Prometheus data source), then `namespace` and `job`
(`COMMON_VARIABLES`; the label selectors that use them are in `promql`). Locally nothing carries a
`namespace` label, so the variable has no values and "All" (`.*`) matches series without the label (a regex
matcher that matches the empty string does). In a cluster Prometheus adds `namespace` (and `pod`) to every
scraped series. `job` is a streaming job: the part of a query name before its first dot
(`clickstream-windows` for the queries `clickstream-windows` and `clickstream-windows.dead-letters`), not
Prometheus' own `job` label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

ALL = ".*"


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel and its legend (Grafana's `{{label}}` syntax)."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    targets: tuple[Target, ...]
    unit: str = "short"
    kind: Literal["timeseries", "stat"] = "timeseries"
    threshold: float | None = None
    """Drawn as a red line (time series) or turns the value red (stat) at and above this value."""
    width: int = 12

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError(f"panel {self.title!r}: targets must not be empty")
        if not 1 <= self.width <= 24:
            raise ValueError(f"panel {self.title!r}: width {self.width} must be between 1 and 24")


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A query variable: `label_values(<series>, <label>)`, multi-value, with "All" meaning `.*`."""

    name: str
    label: str
    series: str
    label_name: str
    regex: str = ""
    """Grafana's variable regex, e.g. `/^([^.]+)/` keeps the first capture group of each value."""
    description: str = ""

    @property
    def query(self) -> str:
        return f"label_values({self.series}, {self.label_name})"


COMMON_VARIABLES = (
    Variable(
        name="namespace",
        label="Namespace",
        series="streamstack_query_active",
        label_name="namespace",
        description="Kubernetes namespace (added by Prometheus in a cluster; locally there is none: All)",
    ),
    Variable(
        name="job",
        label="Streaming job",
        series='streamstack_query_active{namespace=~"$namespace"}',
        label_name="query",
        regex="/^([^.]+)/",
        description="Streaming job: the query name up to its first dot",
    ),
)
"""The template variables of every dashboard, after `datasource`: `namespace`, then `job`."""


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    extra_variables: tuple[Variable, ...] = ()
    """Template variables besides `COMMON_VARIABLES`."""
    tags: tuple[str, ...] = ("streamstack",)
    alert_annotation: str = 'ALERTS{alertstate="firing", alertname=~"Streamstack.*"}'
    """Shown as annotations: when our alerts fired."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9-]{1,40}", self.uid):
            raise ValueError(f"dashboard uid {self.uid!r}: use 1-40 lowercase letters, digits or '-'")
        titles = [panel.title for row in self.rows for panel in row.panels]
        duplicates = sorted({title for title in titles if titles.count(title) > 1})
        if duplicates:
            raise ValueError(f"dashboard {self.uid}: panel titles must be unique, repeated: {duplicates}")

    @property
    def variables(self) -> tuple[Variable, ...]:
        return (*COMMON_VARIABLES, *self.extra_variables)

    @property
    def panels(self) -> tuple[Panel, ...]:
        return tuple(panel for row in self.rows for panel in row.panels)


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def substitute(expr: str, values: Mapping[str, str], rate_interval: str = "1m") -> str:
    """The query as Grafana sends it, for the given variable values (`$__rate_interval` -> rate_interval).

    An unknown variable raises KeyError: a query must only use variables its dashboard defines."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return rate_interval if name == "__rate_interval" else values[name]

    return _VARIABLE.sub(value, expr)
