"""A local Alertmanager (Debian's prometheus-alertmanager 0.25, from the runtimes lock) on 127.0.0.1, with its
own data directory and no cluster listener, running a given configuration: the routing the stack deploys
(infra/alertmanager.py) with the notifiers' URLs of this machine.

Debian's build reads its default notification templates from the fixed path DEBIAN_TEMPLATES
(/usr/share/prometheus/alertmanager/default.tmpl; no flag changes it) and fails to load any config without
them. When the package is not installed there, the binary unpacked into the cache runs in a mount namespace
of its own (`unshare --mount`, as the rehearsal's Spark worker) where the package's usr/share is overlaid on
/usr/share, read-only: the host's /usr/share is untouched.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra import alertmanager as routing
from infra import config as infra_config
from streamstack import render
from streamstack.errors import StreamstackError
from streamstack.local.ports import LOOPBACK
from streamstack.local.service import ConfiguredHttpService
from streamstack.runtimes import Runtimes


def stack_alerting(stack: str = "dev") -> infra_config.AlertingConfig:
    """`streamstack:alerting` of Pulumi.<stack>.yaml, parsed and checked by the Pulumi program's loader."""
    config, _ = render.stack_config(render.load_project(), stack)

    def read(key: str) -> object:
        value = config.get(f"{infra_config.PREFIX}:{key}")
        return None if value is None else json.loads(value)

    return infra_config.load(read).alerting


def stack_routing(
    stack: str,
    secrets: Mapping[str, str],
    *,
    group_wait: str | None = None,
    group_interval: str | None = None,
) -> dict[str, Any]:
    """The Alertmanager config the stack deploys (infra/alertmanager.py), with `secrets` (notifier -> URL
    or key) for the notifiers; `group_wait`/`group_interval` shorten the waits for a test, nothing else."""
    alerting = stack_alerting(stack)
    alerting = dataclasses.replace(
        alerting,
        group_wait=group_wait or alerting.group_wait,
        group_interval=group_interval or alerting.group_interval,
    )
    return routing.alertmanager_config(alerting, secrets)


DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager/default.tmpl")


def alertmanager_argv(binary: Path, arguments: Sequence[str]) -> list[str]:
    """The command that runs `binary` with `arguments` and Debian's templates where it looks for them."""
    command = [str(binary), *arguments]
    package_share = binary.resolve().parent.parent / "share"
    if (
        DEBIAN_TEMPLATES.is_file()
        or not (package_share / DEBIAN_TEMPLATES.relative_to("/usr/share")).is_file()
    ):
        return command  # installed system-wide, or a build that embeds its templates
    if shutil.which("unshare") is None:
        raise StreamstackError(
            f"Debian's Alertmanager needs {DEBIAN_TEMPLATES}: install prometheus-alertmanager, or provide "
            "util-linux's unshare so that the unpacked package can be overlaid there"
        )
    overlay = f"lowerdir={package_share}:/usr/share"
    script = f"mount -t overlay overlay -o {shlex.quote(overlay)} /usr/share && exec {shlex.join(command)}"
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


class LocalAlertmanager(ConfiguredHttpService):
    name = "alertmanager"
    title = "Alertmanager"
    port_flag = "--alertmanager-port"

    def __init__(self, runtimes: Runtimes, workdir: Path, config: Mapping[str, Any], port: int = 0) -> None:
        super().__init__(runtimes, workdir, port, config)

    @property
    def address(self) -> str:
        """host:port, as Prometheus' `alerting.alertmanagers` static targets name it."""
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 30.0) -> LocalAlertmanager:
        self._write_config()
        self.config_path.chmod(0o600)  # it holds the notifiers' URLs and keys
        self._launch_until_ready(
            alertmanager_argv(
                self.runtimes.alertmanager,
                [
                    f"--config.file={self.config_path}",
                    f"--storage.path={self.workdir / 'data'}",
                    f"--web.listen-address={self.address}",
                    "--cluster.listen-address=",  # no gossip listener: one instance, nothing on 0.0.0.0:9094
                ],
            ),
            timeout,
            poll=0.2,
        )
        return self

    def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """POST /api/v2/alerts, as Prometheus sends them (labels, annotations, startsAt...)."""
        request = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(list(alerts)).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            if response.status != 200:
                raise StreamstackError(f"Alertmanager refused the alerts: HTTP {response.status}")

    def alerts(self) -> list[dict[str, Any]]:
        """GET /api/v2/alerts: every alert it holds, with `status.state` (active, suppressed) and
        `status.inhibitedBy`."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=5) as response:
            result: list[dict[str, Any]] = json.load(response)
        return result
