"""A local Prometheus with a generated scrape config, bound to 127.0.0.1."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK, claim_port
from streamstack.local.process import ManagedProcess
from streamstack.runtimes import Runtimes


def scrape_config(
    targets_by_scrape_job: Mapping[str, Sequence[str]],
    scrape_interval: str,
    rule_files: Sequence[Path] = (),
) -> dict[str, Any]:
    """Prometheus config: one scrape job per entry, static targets, plus Prometheus itself."""
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {"job_name": name, "static_configs": [{"targets": list(targets)}]}
            for name, targets in sorted(targets_by_scrape_job.items())
        ],
    }


class LocalPrometheus:
    def __init__(
        self,
        runtimes: Runtimes,
        workdir: Path,
        targets_by_scrape_job: Mapping[str, Sequence[str]],
        port: int = 0,
        scrape_interval: str = "2s",
    ) -> None:
        self.runtimes = runtimes
        self.workdir = workdir
        self.port = claim_port(port, "Prometheus", "--prometheus-port")
        self.config_path = workdir / "prometheus.yml"
        self.log_path = workdir / "prometheus.log"
        self._config = scrape_config(targets_by_scrape_job, scrape_interval)
        self._process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("Prometheus has not been started")
        return self._process.pid

    def start(self, timeout: float = 30.0) -> LocalPrometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self._config, sort_keys=False))
        self._process = ManagedProcess(
            "prometheus",
            [
                str(self.runtimes.prometheus),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1d",
            ],
            self.log_path,
        ).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._process.is_running():
                raise StreamstackError(f"Prometheus exited while starting; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.3)
        self.stop()
        raise StreamstackError(f"Prometheus did not become ready on {self.url} within {timeout:.0f} s")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the result vector."""
        return query_prometheus(self.url, promql)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()


def query_prometheus(url: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    request_url = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(request_url, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise StreamstackError(f"Prometheus query {promql!r} failed: {body.get('error')}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
