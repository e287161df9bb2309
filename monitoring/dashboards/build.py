"""Render the dashboard specs into Grafana JSON with grafana-foundation-sdk, into `generated/<uid>.json`.

    python -m monitoring.dashboards.build                 # (re)write monitoring/dashboards/generated/
    python -m monitoring.dashboards.build --out DIR       # somewhere else
    python -m monitoring.dashboards.build --check         # exit 1 if generated/ differs from the specs

Every panel reads the `datasource` template variable; panel ids and query refIds are assigned in order, so
the output is deterministic and a diff shows exactly what changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models

from monitoring.dashboards import exporter_health, kafka, pipeline_overview
from monitoring.dashboards.spec import ALL, Dashboard, Panel, Variable

DASHBOARDS: tuple[Dashboard, ...] = (
    pipeline_overview.DASHBOARD,
    kafka.DASHBOARD,
    exporter_health.DASHBOARD,
)
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
PANEL_HEIGHT = 8
DATASOURCE = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")
PanelBuilder = TypeVar("PanelBuilder", timeseries.Panel, stat.Panel)


def _thresholds(threshold: float | None) -> dashboard_builders.ThresholdsConfig:
    steps = [dashboard_models.Threshold(value=None, color="green")]
    if threshold is not None:
        steps.append(dashboard_models.Threshold(value=threshold, color="red"))
    return dashboard_builders.ThresholdsConfig().mode(dashboard_models.ThresholdsMode.ABSOLUTE).steps(steps)


def _queries(panel: Panel) -> list[prometheus.Dataquery]:
    queries = []
    for index, target in enumerate(panel.targets):
        query = (
            prometheus.Dataquery()
            .expr(target.expr)
            .legend_format(target.legend)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
        queries.append(query.range())
    return queries


def _with_panel_basics(builder: PanelBuilder, panel: Panel, panel_id: int) -> PanelBuilder:
    """What every kind of panel sets alike: id, texts, data source, unit, size, thresholds and queries."""
    builder = (
        builder.id(panel_id)
        .title(panel.title)
        .description(panel.description)
        .datasource(DATASOURCE)
        .unit(panel.unit)
        .span(panel.width)
        .height(PANEL_HEIGHT)
        .thresholds(_thresholds(panel.threshold))
    )
    for query in _queries(panel):
        builder = builder.with_target(query)
    return builder


def _timeseries(panel: Panel, panel_id: int) -> timeseries.Panel:
    return (
        _with_panel_basics(timeseries.Panel(), panel, panel_id)
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(
                common.GraphTresholdsStyleMode.LINE
                if panel.threshold is not None
                else common.GraphTresholdsStyleMode.OFF
            )
        )
        .line_width(1)
        .fill_opacity(10)
        .show_points(common.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )


def _stat(panel: Panel, panel_id: int) -> stat.Panel:
    return (
        _with_panel_basics(stat.Panel(), panel, panel_id)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
        .orientation(common.VizOrientation.AUTO)
    )


def _query_variable(variable: Variable) -> dashboard_builders.QueryVariable:
    builder = (
        dashboard_builders.QueryVariable(variable.name)
        .label(variable.label)
        .description(variable.description)
        .datasource(DATASOURCE)
        .query(variable.query)
        .refresh(dashboard_models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_models.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(ALL)
        .current(dashboard_models.VariableOption(selected=True, text="All", value="$__all"))
    )
    return builder.regex(variable.regex) if variable.regex else builder


def build(spec: Dashboard) -> dashboard_models.Dashboard:
    """The Grafana dashboard model of a spec."""
    builder = (
        dashboard_builders.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(list(spec.tags))
        .editable()
        .tooltip(dashboard_models.DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .with_variable(
            dashboard_builders.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .annotation(
            dashboard_builders.AnnotationQuery()
            .name("Streamstack alerts")
            .datasource(DATASOURCE)
            .expr(spec.alert_annotation)
            .enable(True)
            .icon_color("red")
        )
    )
    for variable in spec.variables:
        builder = builder.with_variable(_query_variable(variable))
    panel_id = 0
    for row in spec.rows:
        panel_id += 1
        builder = builder.with_row(dashboard_builders.Row(row.title).id(panel_id))
        for panel in row.panels:
            panel_id += 1
            builder = builder.with_panel(
                _stat(panel, panel_id) if panel.kind == "stat" else _timeseries(panel, panel_id)
            )
    return builder.build()


def render(spec: Dashboard) -> str:
    """The dashboard's JSON text, as written to generated/<uid>.json."""
    document = json.loads(JSONEncoder().encode(build(spec)))
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in DASHBOARDS:
        path = directory / f"{spec.uid}.json"
        path.write_text(render(spec))
        written.append(path)
    return written


def stale_files(directory: Path) -> list[str]:
    """Generated files that differ from what the specs render, are missing, or belong to no dashboard."""
    expected = {f"{spec.uid}.json": render(spec) for spec in DASHBOARDS}
    present = {path.name for path in directory.glob("*.json")}
    stale = [
        name
        for name, text in sorted(expected.items())
        if name not in present or (directory / name).read_text() != text
    ]
    return stale + sorted(present - set(expected))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m monitoring.dashboards.build", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out", type=Path, default=GENERATED_DIR, help="output directory (default: generated/)"
    )
    parser.add_argument(
        "--check", action="store_true", help="only check that the output directory is up to date"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out)
        if stale:
            print(f"out of date in {args.out}: {', '.join(stale)}; run `make dashboards`", file=sys.stderr)
            return 1
        print(f"{len(DASHBOARDS)} dashboards in {args.out} are up to date")
        return 0
    for path in write_all(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
