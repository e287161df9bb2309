"""A Pulumi project and a stack's config as the language host would pass it (secure values as
placeholders)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from streamstack.errors import StreamstackError
from streamstack.paths import REPO_ROOT
from streamstack.render import validate as k8s_validation


def _kubernetes_version(config: Mapping[str, str]) -> str:
    project = config.get("__project__", "streamstack")
    try:
        cluster = json.loads(config.get(f"{project}:cluster", "{}"))
    except ValueError:
        cluster = None
    if isinstance(cluster, dict) and cluster.get("kubernetesVersion"):
        return str(cluster["kubernetesVersion"])
    return config.get(f"{project}:kubernetesVersion") or k8s_validation.DEFAULT_KUBERNETES_VERSION


@dataclass(frozen=True)
class Project:
    name: str
    root: Path
    program_dir: Path
    stack_config_dir: Path
    config: dict[str, Any]


def load_project(project_dir: Path = REPO_ROOT) -> Project:
    path = project_dir / "Pulumi.yaml"
    if not path.is_file():
        raise StreamstackError(f"{path} not found")
    document = yaml.safe_load(path.read_text()) or {}
    return Project(
        name=str(document["name"]),
        root=project_dir,
        program_dir=(project_dir / str(document.get("main", "."))).resolve(),
        stack_config_dir=(project_dir / str(document.get("stackConfigDir", "."))).resolve(),
        config=dict(document.get("config") or {}),
    )


def stack_config(
    project: Project, stack: str, overrides: Mapping[str, Any] | None = None
) -> tuple[dict[str, str], list[str]]:
    """Config as the CLI hands it to a program: `namespace:key` -> string (objects JSON-encoded), plus
    the secret keys. Project-level defaults first, then Pulumi.<stack>.yaml, then `overrides`."""
    stack_file = project.stack_config_dir / f"Pulumi.{stack}.yaml"
    if not stack_file.is_file():
        available = sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in _stack_files(project))
        raise StreamstackError(f"no stack {stack!r}: {stack_file} not found (stacks: {', '.join(available)})")
    raw: dict[str, Any] = {}
    for key, value in project.config.items():
        if isinstance(value, Mapping) and ("default" in value or "value" in value):
            raw[_qualified(project, key)] = value.get("value", value.get("default"))
        elif not isinstance(value, Mapping) or "type" not in value:
            raw[_qualified(project, key)] = value
    document = yaml.safe_load(stack_file.read_text()) or {}
    for key, value in (document.get("config") or {}).items():
        raw[_qualified(project, key)] = value
    for key, value in (overrides or {}).items():
        raw[_qualified(project, key)] = value
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        plain, secret = _without_secure_values(value, key)
        config[key] = _config_string(plain)
        if secret:
            secret_keys.append(key)
    return config, secret_keys


def _stack_files(project: Project) -> list[Path]:
    return sorted(project.stack_config_dir.glob("Pulumi.*.yaml"))


def _qualified(project: Project, key: str) -> str:
    return key if ":" in key else f"{project.name}:{key}"


def _without_secure_values(value: Any, key: str) -> tuple[Any, bool]:
    """`{secure: <ciphertext>}` needs the CLI to decrypt: stand in a placeholder and mark the key secret. The
    placeholder is a URL, so it passes the program's checks of secrets that are URLs (alert notifiers) too."""
    if isinstance(value, Mapping):
        if set(value) == {"secure"}:
            return f"https://placeholder.invalid/{key.split(':', 1)[-1]}", True
        secret = False
        plain = {}
        for child_key, child in value.items():
            plain[child_key], child_secret = _without_secure_values(child, key)
            secret = secret or child_secret
        return plain, secret
    if isinstance(value, list):
        items = [_without_secure_values(child, key) for child in value]
        return [item for item, _ in items], any(secret for _, secret in items)
    return value, False


def _config_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)
