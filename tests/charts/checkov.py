"""Running checkov (its own virtualenv, pinned by `streamstack setup`) and judging its JSON report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from streamstack import runtimes

CHECKOV_TIMEOUT_S = 300
MIN_REASON_CHARS = 40


def run_checkov(checkov: Path, args: list[str]) -> dict[str, Any]:
    """checkov's JSON report; it exits 1 on any failed check, so the exit code alone says little."""
    result = subprocess.run(
        [str(checkov), "--skip-download", "--output", "json", *args],
        capture_output=True,
        text=True,
        timeout=CHECKOV_TIMEOUT_S,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert isinstance(report, dict), f"expected one framework's report, got {type(report).__name__}"
    return report


def assert_clean(report: dict[str, Any]) -> None:
    summary = report["summary"]
    failed = [
        f"{check['check_id']} {check['check_name']}: {check['resource']} ({check['file_path']})"
        for check in report["results"]["failed_checks"]
    ]
    assert failed == []
    assert summary["checkov_version"] == runtimes.CHECKOV_VERSION
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 0
    for check in report["results"]["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment") or ""
        assert len(reason.strip()) >= MIN_REASON_CHARS, f"{check['check_id']} skipped without a reason"
    print(
        f"checkov {summary['checkov_version']}: {summary['resource_count']} resources, "
        f"passed {summary['passed']}, failed {summary['failed']}, skipped {summary['skipped']}"
    )
