"""`streamstack panels`: the pipeline overview's main panels as a PNG, for people without Grafana.

    streamstack panels --out overview.png                      # from the running local stack's Prometheus
    streamstack panels --out lag.png --prometheus http://prometheus:9090 --minutes 60 --job sessionization

The panels (lag in seconds and records, input vs processed rows per second, batch utilization) are the ones
`monitoring/dashboards/pipeline_overview.py` defines for Grafana, with the same PromQL: each query runs as a
Prometheus range query over the last `--minutes`, template variables replaced (`$job` by --job, `$namespace`
by --namespace, both "all" by default). Rendered with matplotlib's Agg backend: no display needed.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitoring.dashboards.pipeline_overview import PNG_PANELS
from monitoring.dashboards.spec import ALL, Panel, substitute
from streamstack.errors import StreamstackError
from streamstack.local.prometheus import query_prometheus_range
from streamstack.local.stack import read_state

POINTS_PER_SERIES = 240
_LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Series:
    label: str
    times: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class PanelData:
    panel: Panel
    series: tuple[Series, ...]

    @property
    def has_data(self) -> bool:
        return any(series.values for series in self.series)


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: `{{group}} ({{source}})` with the series' labels filled in."""
    return _LEGEND_LABEL.sub(lambda match: labels.get(match.group(1), ""), template).strip()


def _number(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else math.nan


def fetch_panels(
    prometheus_url: str,
    panels: Sequence[Panel],
    start: float,
    end: float,
    variables: dict[str, str],
) -> list[PanelData]:
    """Every target of every panel as a range query over [start, end]."""
    step = max(1.0, round((end - start) / POINTS_PER_SERIES))
    rate_interval = f"{max(60, int(4 * step))}s"
    fetched = []
    for panel in panels:
        series = []
        for target in panel.targets:
            promql = substitute(target.expr, variables, rate_interval=rate_interval)
            for result in query_prometheus_range(prometheus_url, promql, start, end, step=step):
                points: list[list[Any]] = result["values"]
                series.append(
                    Series(
                        label=legend(target.legend, result["metric"]),
                        times=tuple(float(point[0]) for point in points),
                        values=tuple(_number(point[1]) for point in points),
                    )
                )
        fetched.append(PanelData(panel, tuple(sorted(series, key=lambda item: item.label))))
    return fetched


def _axis_unit(unit: str) -> str:
    if unit.startswith("suffix:"):
        return unit.removeprefix("suffix:").strip()
    return {"s": "seconds", "short": "", "percentunit": "%", "bytes": "bytes"}.get(unit, unit)


def render_png(data: Sequence[PanelData], out: Path, title: str) -> None:
    """One line chart per panel, stacked, each with its legend on the right, written as a PNG."""
    # Imported here: matplotlib adds most of a second to every other `streamstack` command.
    from matplotlib import dates  # noqa: PLC0415
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.ticker import PercentFormatter  # noqa: PLC0415

    figure = Figure(figsize=(14, 3.4 * len(data)), dpi=90, layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title, fontsize=13)
    axes_grid = figure.subplots(len(data), 1, squeeze=False, sharex=True)
    for axes, panel_data in zip(axes_grid.flat, data, strict=True):
        panel = panel_data.panel
        axes.set_title(panel.title, fontsize=11)
        for series in panel_data.series:
            times = [datetime.fromtimestamp(moment, UTC) for moment in series.times]
            axes.plot(times, series.values, linewidth=1.2, label=series.label)
        if panel.threshold is not None:
            axes.axhline(panel.threshold, color="red", linestyle="--", linewidth=1)
        if panel.unit == "percentunit":
            axes.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        axes.set_ylabel(_axis_unit(panel.unit))
        axes.xaxis.set_major_formatter(dates.DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        if panel_data.has_data:
            axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        else:
            axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
    axes_grid.flat[-1].set_xlabel("UTC")
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png")


def render_overview(
    prometheus_url: str,
    out: Path,
    minutes: float,
    *,
    job: str = ALL,
    namespace: str = ALL,
    clock: Callable[[], float] = time.time,
) -> list[PanelData]:
    """Query the overview panels over the last `minutes` and write them to `out`; the data plotted.

    Raises StreamstackError when Prometheus is unreachable, rejects a query, or has no data for any panel."""
    if minutes <= 0:
        raise StreamstackError(f"--minutes {minutes:g}: must be positive")
    end = clock()
    data = fetch_panels(
        prometheus_url, PNG_PANELS, end - minutes * 60, end, {"job": job, "namespace": namespace}
    )
    if not any(panel.has_data for panel in data):
        raise StreamstackError(
            f"Prometheus at {prometheus_url} has no data for the overview panels over the last {minutes:g} "
            "minutes; is the pipeline running and scraped?"
        )
    stamp = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M UTC")
    scope = "all jobs" if job == ALL else f"job {job}"
    render_png(data, out, f"streamstack pipeline overview: {scope}, last {minutes:g} min to {stamp}")
    return data


def add_arguments(panels: argparse.ArgumentParser) -> None:
    """The flags of the `panels` subcommand."""
    panels.add_argument("--out", type=Path, required=True, help="PNG file to write")
    panels.add_argument(
        "--prometheus", default=None, metavar="URL", help="default: the running local stack's Prometheus"
    )
    panels.add_argument("--minutes", type=float, default=15.0, help="time range, ending now (default 15)")
    panels.add_argument("--job", default=ALL, help="one streaming job (default: all)")
    panels.add_argument("--namespace", default=ALL, help="namespace regex (default: all)")
    panels.add_argument(
        "--workdir", type=Path, default=None, help="the local stack's (default .streamstack/)"
    )


def run(args: argparse.Namespace, workdir: Path) -> int:
    url = args.prometheus
    if url is None:
        state = read_state(workdir)
        if state is None or not state.get("prometheus"):
            raise StreamstackError(
                f"no --prometheus given and no local stack running in {workdir}; "
                "start one with `streamstack local up --detach` or pass --prometheus URL"
            )
        url = state["prometheus"]["url"]
    data = render_overview(url.rstrip("/"), args.out, args.minutes, job=args.job, namespace=args.namespace)
    summary = ", ".join(f"{panel.panel.title}: {len(panel.series)} series" for panel in data)
    print(f"wrote {args.out} ({summary})")
    return 0
