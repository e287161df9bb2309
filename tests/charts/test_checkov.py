"""checkov on every object both charts render (all scenarios), plus the pods Spark starts from the
SparkApplication: no failed check, and every accepted finding skipped inline with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.charts.checkov import assert_clean, run_checkov
from tests.charts.helm import of_kind, render, scenarios, spark_pods


@pytest.mark.slow
def test_checkov_passes_every_rendered_manifest(helm: Path, checkov: Path, tmp_path: Path) -> None:
    workloads = set()
    for scenario in scenarios():
        manifests = render(helm, scenario)
        manifests += [pod for app in of_kind(manifests, "SparkApplication") for pod in spark_pods(app)]
        file_name = f"{scenario.id.replace(':', '--')}.yaml"
        workloads |= {
            (
                file_name,
                f"{manifest['kind']}.{manifest['metadata']['namespace']}.{manifest['metadata']['name']}",
            )
            for manifest in manifests
            if manifest["kind"] in ("Deployment", "Pod")
        }
        (tmp_path / file_name).write_text(yaml.safe_dump_all(manifests))
    report = run_checkov(checkov, ["--framework", "kubernetes", "--directory", str(tmp_path)])
    assert_clean(report)
    checked = {
        (Path(check["file_path"]).name, check["resource"])
        for outcome in ("passed_checks", "skipped_checks")
        for check in report["results"][outcome]
    }
    assert workloads <= checked
    # 4 job scenarios x (driver, executor) + 4 exporter scenarios x Deployment.
    assert len(workloads) == 12
