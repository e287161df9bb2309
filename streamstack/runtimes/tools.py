"""The Kubernetes tools the tests need: helm and actionlint built with `go install` at pinned versions, and
checkov in its own virtualenv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamstack.errors import StreamstackError
from streamstack.paths import cache_dir
from streamstack.runtimes.locate import _completed, _last_line, _run
from streamstack.runtimes.lock import KUBERNETES_TOOLS_HINT

GO_INSTALL_TIMEOUT_S = 1800  # a first helm build downloads ~120 modules and compiles for minutes on 2 cores


CHECKOV_VERSION = "3.3.30"


CHECKOV_CONSTRAINTS = Path(__file__).parent.parent / "checkov-constraints.txt"


CHECKOV_INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class GoTool:
    """A command `go install <package>@<version>` builds; `module` is what `go version -m` reports."""

    name: str
    package: str
    module: str
    version: str


GO_TOOLS = (
    # The newest helm v3 release whose go.mod (go 1.26.0) the local Go toolchain builds.
    GoTool("helm", "helm.sh/helm/v3/cmd/helm", "helm.sh/helm/v3", "v3.22.0"),
    GoTool(
        "actionlint", "github.com/rhysd/actionlint/cmd/actionlint", "github.com/rhysd/actionlint", "v1.7.12"
    ),
)


def go_tool_path(name: str, cache: Path | None = None) -> Path:
    """Where `ensure_go_tools` puts a tool: <cache>/go/bin/<name>."""
    return (cache_dir() if cache is None else cache) / "go" / "bin" / name


def _find_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise StreamstackError(
            "`go` not found on PATH: helm and actionlint are built with `go install` (Go 1.26 or newer)"
        )
    return go


def _built_module_version(go: str, binary: Path, module: str) -> str | None:
    """The version of `module` that `binary` was built from (`go version -m`), None if not a build of it."""
    if not os.access(binary, os.X_OK):
        return None
    result = _completed([go, "version", "-m", str(binary)], f"`go version -m {binary}`", timeout=60)
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "mod" and fields[1] == module:
            return fields[2]
    return None


def locate_go_tools(cache: Path | None = None) -> dict[str, Path]:
    """name -> path of each pinned Go tool already built; downloads nothing."""
    cache = cache_dir() if cache is None else cache
    go = _find_go()
    found, missing = {}, []
    for tool in GO_TOOLS:
        path = go_tool_path(tool.name, cache)
        if _built_module_version(go, path, tool.module) == tool.version:
            found[tool.name] = path
        else:
            missing.append(f"{tool.name} {tool.version}")
    if missing:
        raise StreamstackError(
            f"{' and '.join(missing)} missing from {cache / 'go' / 'bin'}; {KUBERNETES_TOOLS_HINT}"
        )
    return found


def ensure_go_tools(cache: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Build each pinned Go tool that is missing or another version: `go install` through the module proxy
    (checksums checked against go.sum and the checksum database), with the local toolchain only."""
    cache = cache_dir() if cache is None else cache
    go = _find_go()
    bin_dir = cache / "go" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in GO_TOOLS:
        target = go_tool_path(tool.name, cache)
        if _built_module_version(go, target, tool.module) == tool.version:
            continue
        log(f"building {tool.name} {tool.version} with `go install {tool.package}@{tool.version}`")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=bin_dir, prefix=f".{tool.name}-") as staging:
            environment = {
                **os.environ,
                "GOBIN": staging,
                "GOMODCACHE": str(cache / "go" / "mod"),
                "GOFLAGS": "-modcacherw -buildvcs=false",
                "GOTOOLCHAIN": "local",
            }
            try:
                result = subprocess.run(
                    [go, "install", f"{tool.package}@{tool.version}"],
                    env=environment,
                    capture_output=True,
                    text=True,
                    timeout=GO_INSTALL_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as error:
                raise StreamstackError(
                    f"`go install {tool.package}@{tool.version}` took over {GO_INSTALL_TIMEOUT_S} s"
                ) from error
            if result.returncode != 0:
                raise StreamstackError(
                    f"`go install {tool.package}@{tool.version}` failed: {_last_line(result.stderr)}"
                )
            os.replace(Path(staging) / tool.name, target)
        if _built_module_version(go, target, tool.module) != tool.version:
            raise StreamstackError(
                f"{target} is not a build of {tool.module} {tool.version} after go install"
            )
        log(f"built {tool.name} {tool.version} in {time.monotonic() - started:.0f} s")
    return locate_go_tools(cache)


def checkov_path(cache: Path | None = None) -> Path:
    """checkov in its own virtualenv: it pins `packaging`, which clashes with the project's."""
    return (cache_dir() if cache is None else cache) / f"checkov-{CHECKOV_VERSION}" / "bin" / "checkov"


def _checkov_version(checkov: Path) -> str | None:
    """The checkov version installed next to this entry point (asked of the venv's Python: `checkov
    --version` imports every check and takes seconds)."""
    python = checkov.with_name("python")
    if not os.access(checkov, os.X_OK) or not os.access(python, os.X_OK):
        return None
    command = [str(python), "-c", "import importlib.metadata as m; print(m.version('checkov'))"]
    result = _completed(command, f"asking {python} for the checkov version", timeout=60)
    return result.stdout.strip() if result.returncode == 0 else None


def locate_checkov(cache: Path | None = None) -> Path:
    checkov = checkov_path(cache)
    if _checkov_version(checkov) != CHECKOV_VERSION:
        raise StreamstackError(
            f"checkov {CHECKOV_VERSION} missing from {checkov.parent.parent}; {KUBERNETES_TOOLS_HINT}"
        )
    return checkov


def ensure_checkov(cache: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """checkov at the pinned version in <cache>/checkov-<version>, every package pinned by
    checkov-constraints.txt; created when missing or broken."""
    checkov = checkov_path(cache)
    if _checkov_version(checkov) == CHECKOV_VERSION:
        return checkov
    home = checkov.parent.parent
    log(f"installing checkov {CHECKOV_VERSION} into {home}")
    shutil.rmtree(home, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(home)], f"creating the checkov virtualenv {home}")
    pip = [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    command = [*pip, "--constraint", str(CHECKOV_CONSTRAINTS), f"checkov=={CHECKOV_VERSION}"]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=CHECKOV_INSTALL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise StreamstackError(f"installing checkov took over {CHECKOV_INSTALL_TIMEOUT_S} s") from error
    if result.returncode != 0:
        raise StreamstackError(f"installing checkov {CHECKOV_VERSION} failed: {_last_line(result.stderr)}")
    return locate_checkov(cache)
