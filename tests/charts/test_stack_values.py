"""The values the Pulumi stacks pass to our charts: they satisfy each chart's values.schema.json, every object
the charts render from them is valid, and a stack setting the chart refuses fails the render (as helm, and
so `pulumi preview`, would) with the chart's message naming the field."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from streamstack.render import LocalChart, ProgramError, RenderedStack, render_stack
from streamstack.render.validate import validate_manifests
from tests.charts.helm import CHARTS_DIR, spark_pods
from tests.infra.conftest import stack_sections


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over a chart's values.yaml: maps merge key by key, the rest replaces."""
    result = dict(base)
    for key, value in override.items():
        both_maps = isinstance(value, dict) and isinstance(result.get(key), dict)
        result[key] = merged(result[key], value) if both_maps else value
    return result


def chart_values(chart: LocalChart) -> dict[str, Any]:
    defaults: dict[str, Any] = yaml.safe_load((chart.chart_dir / "values.yaml").read_text())
    return merged(defaults, chart.values)


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack(request: pytest.FixtureRequest) -> RenderedStack:
    return render_stack(request.param)


def test_the_values_pulumi_passes_satisfy_each_charts_schema(stack: RenderedStack) -> None:
    installs = {chart.chart_dir for chart in stack.local_charts}
    assert installs == {CHARTS_DIR / "streaming-job", CHARTS_DIR / "lag-exporter"}
    for chart in stack.local_charts:
        schema = json.loads((chart.chart_dir / "values.schema.json").read_text())
        errors = sorted(
            f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
            for error in jsonschema.Draft7Validator(schema).iter_errors(chart_values(chart))
        )
        assert errors == [], f"{chart.release_name}: {errors}"
        # Nothing passed that the chart does not know (its schema also says so, helm checks it).
        assert set(chart.values) <= set(schema["properties"])


def test_every_object_our_charts_render_for_the_stack_is_valid(stack: RenderedStack) -> None:
    manifests = [item.manifest for item in stack.chart_objects()]
    # The pods Spark builds from each SparkApplication, checked as core Pods too.
    pods = [
        pod
        for manifest in manifests
        if manifest["kind"] == "SparkApplication"
        for pod in spark_pods(manifest)
    ]
    assert validate_manifests([*manifests, *pods], stack.kubernetes_version) == []
    for manifest in manifests:
        assert manifest["metadata"]["namespace"] == stack.outputs["jobsNamespace"]


@pytest.mark.parametrize(
    ("section", "change", "chart", "field"),
    [
        # A tag docker refuses ('+'), which still names the Spark version the config checks for.
        ("spark", {"image": "streamstack/jobs:0.1.0-spark4.3.0+local"}, "streaming-job", "/image/tag"),
        ("lagExporter", {"port": 70000}, "lag-exporter", "/exporter/port"),
    ],
)
def test_a_stack_setting_the_chart_refuses_fails_the_render(
    section: str, change: dict[str, Any], chart: str, field: str
) -> None:
    sections = stack_sections("dev")
    override = {section: {**sections[section], **change}}

    with pytest.raises(ProgramError) as raised:
        render_stack("dev", overrides=override)

    message = str(raised.value)
    assert f"chart {chart} refuses its values" in message
    assert field in message
