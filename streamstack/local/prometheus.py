"""A local Prometheus on 127.0.0.1 with a generated scrape config, evaluating monitoring/rules/*.yaml."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK
from streamstack.local.service import ConfiguredHttpService
from streamstack.paths import REPO_ROOT
from streamstack.runtimes import Runtimes

RULE_FILES = REPO_ROOT / "monitoring" / "rules" / "*.yaml"
"""The recording and alerting rules (a glob: Prometheus expands it; the promtool tests under tests/ are
not rule files)."""

KAFKA_SCRAPE_JOB = "kafka"
"""The scrape job of the broker's metrics reporter (`LocalKafka.metrics_target`): the Kafka panels' and
alerts' `kafka_*` series, under the names a Strimzi cluster's PodMonitor scrapes."""


def scrape_config(
    targets_by_scrape_job: Mapping[str, Sequence[str]],
    scrape_interval: str,
    rule_files: Sequence[Path] = (),
    alertmanagers: Sequence[str] = (),
) -> dict[str, Any]:
    """Prometheus config: one scrape job per entry, static targets, plus Prometheus itself; firing alerts go
    to the `alertmanagers` (host:port), if any."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": name, "static_configs": [{"targets": list(targets)}]}
            for name, targets in sorted(targets_by_scrape_job.items())
        ],
    }
    if alertmanagers:
        config["alerting"] = {
            "alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": list(alertmanagers)}]}]
        }
    return config


class LocalPrometheus(ConfiguredHttpService):
    name = "prometheus"
    title = "Prometheus"
    port_flag = "--prometheus-port"

    def __init__(
        self,
        runtimes: Runtimes,
        workdir: Path,
        targets_by_scrape_job: Mapping[str, Sequence[str]],
        port: int = 0,
        scrape_interval: str = "2s",
        *,
        rule_files: Sequence[Path] = (RULE_FILES,),
        alertmanagers: Sequence[str] = (),
    ) -> None:
        config = scrape_config(targets_by_scrape_job, scrape_interval, rule_files, alertmanagers)
        super().__init__(runtimes, workdir, port, config)

    def start(self, timeout: float = 30.0) -> LocalPrometheus:
        self._write_config()
        self._launch_until_ready(
            [
                str(self.runtimes.prometheus),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1d",
            ],
            timeout,
            poll=0.3,
        )
        return self

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the result vector."""
        return query_prometheus(self.url, promql)


def query_prometheus(url: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    request_url = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(request_url, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise StreamstackError(f"Prometheus query {promql!r} failed: {body.get('error')}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def query_prometheus_range(
    url: str, promql: str, start: float, end: float, *, step: float, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """Range query; the result matrix (each series' `metric` labels and `values` [[time, "value"], ...]).

    A query Prometheus rejects raises StreamstackError with Prometheus' message (HTTP 400 carries it too)."""
    parameters = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    request_url = f"{url}/api/v1/query_range?{urllib.parse.urlencode(parameters)}"
    try:
        with urllib.request.urlopen(request_url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:
        try:
            body = json.load(error)
        except json.JSONDecodeError:
            raise StreamstackError(f"{url} answered HTTP {error.code}: is it Prometheus?") from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        reason = getattr(error, "reason", error)
        raise StreamstackError(f"cannot reach Prometheus at {url} ({reason})") from None
    if body.get("status") != "success":
        raise StreamstackError(f"Prometheus query {promql!r} failed: {body.get('error')}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
