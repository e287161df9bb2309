"""Shared pieces of the stack configuration: paths, pinned version tables, ConfigError, `Section` (reads one
structured setting and names it in every error) and the small validators every section uses."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]


RULES_DIR = REPO_ROOT / "monitoring" / "rules"


DASHBOARDS_DIR = REPO_ROOT / "monitoring" / "dashboards" / "generated"


# Our own charts, installed by the StreamingJob and LagExporter components: one source of truth.
STREAMING_JOB_CHART = REPO_ROOT / "charts" / "streaming-job"


LAG_EXPORTER_CHART = REPO_ROOT / "charts" / "lag-exporter"


PREFIX = "streamstack"


# Each pinned chart version's complete CRD set, vendored (scripts/vendor_crds.py): the stack installs the CRDs
# itself (infra/components/crds.py), since Helm never upgrades a chart's crds/.
CRDS_DIR = REPO_ROOT / "infra" / "crds"


CRDS_SOURCE_FILE = "source.json"


ACCESS_MODES = ("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany")


DRIVER_ONLY_ACCESS_MODES = ("ReadWriteOnce", "ReadWriteOncePod")


NODE_ROLES = ("controller", "broker")


PULL_POLICIES = ("Always", "IfNotPresent", "Never")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


_SPARK_MEMORY = re.compile(r"^[0-9]+[kmgt]?$")


class ConfigError(ValueError):
    """A stack setting is missing, malformed or cannot work with the others; the message names it."""


def setting(path: str) -> str:
    """`kafka.version` -> `streamstack:kafka.version`."""
    return f"{PREFIX}:{path}"


T = TypeVar("T")


_MISSING: Any = object()


class Section:
    """One mapping of the stack config that knows its setting path, so every error can name the setting."""

    def __init__(self, path: str, raw: object) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{setting(path)}: expected a mapping, got {raw!r}")
        self.path = path
        self.raw: Mapping[str, Any] = raw

    def name(self, key: str) -> str:
        return setting(f"{self.path}.{key}")

    def has(self, key: str) -> bool:
        return key in self.raw and self.raw[key] is not None

    def only(self, *keys: str) -> None:
        """Reject keys this section does not know: a misspelt setting must not be ignored silently."""
        unknown = sorted(set(self.raw) - set(keys))
        if unknown:
            raise ConfigError(f"{self.name(unknown[0])}: unknown setting (known: {', '.join(sorted(keys))})")

    def _get(self, key: str, default: Any, check: Callable[[Any], bool], expected: str) -> Any:
        if not self.has(key):
            if default is _MISSING:
                raise ConfigError(f"{self.name(key)}: required")
            return default
        value = self.raw[key]
        if not check(value):
            raise ConfigError(f"{self.name(key)}: expected {expected}, got {value!r}")
        return value

    def string(self, key: str, default: Any = _MISSING) -> Any:
        return self._get(key, default, lambda v: isinstance(v, str) and v.strip() != "", "a string")

    def integer(self, key: str, default: Any = _MISSING) -> Any:
        def is_int(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        return self._get(key, default, is_int, "an integer")

    def number(self, key: str, default: Any = _MISSING) -> Any:
        def is_number(value: object) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool)

        return self._get(key, default, is_number, "a number")

    def boolean(self, key: str, default: Any = _MISSING) -> Any:
        return self._get(key, default, lambda v: isinstance(v, bool), "true or false")

    def strings(self, key: str, default: Any = _MISSING) -> Any:
        def is_strings(value: object) -> bool:
            return isinstance(value, list) and all(isinstance(item, str) for item in value)

        value = self._get(key, default, is_strings, "a list of strings")
        return tuple(value) if value is not None else None

    def string_map(self, key: str) -> dict[str, str]:
        raw = self._get(key, {}, lambda v: isinstance(v, Mapping), "a mapping")
        result = {}
        for name, value in raw.items():
            if not isinstance(value, str | int) or isinstance(value, bool):
                raise ConfigError(f"{self.name(key)}.{name}: expected a string or a number, got {value!r}")
            result[str(name)] = str(value)
        return result

    def section(self, key: str) -> Section:
        return Section(f"{self.path}.{key}", self.raw.get(key))

    def sections(self, key: str) -> list[Section]:
        raw = self._get(key, [], lambda v: isinstance(v, list), "a list")
        return [Section(f"{self.path}.{key}[{index}]", item) for index, item in enumerate(raw)]


@dataclass(frozen=True)
class Origin:
    """Where a job's settings, or a part of them (`driver`, `executor`, `checkpoint`), were read from, to name
    a key in an error: the job's entry for the keys it sets, the defaults (`jobDefaults`, where a default
    would be changed) for the rest."""

    defaults: str
    entry: str = "jobs"
    entry_keys: frozenset[str] = frozenset()

    def name(self, key: str) -> str:
        return setting(f"{self.entry if key in self.entry_keys else self.defaults}.{key}")

    def entry_name(self, key: str) -> str:
        """A key only a job's entry may set (its name, module, topics: the job's identity)."""
        return setting(f"{self.entry}.{key}")


class Layered:
    """A job's settings: the job's own entry first, then `streamstack:jobDefaults`, then the code's
    default."""

    def __init__(self, entry: Section, defaults: Section) -> None:
        self.entry = entry
        self.defaults = defaults

    def source(self, key: str) -> Section:
        return self.entry if self.entry.has(key) else self.defaults

    def child(self, key: str) -> Layered:
        return Layered(self.entry.section(key), self.defaults.section(key))

    def only(self, *keys: str) -> None:
        self.entry.only(*keys)
        self.defaults.only(*keys)

    def string(self, key: str, default: Any) -> Any:
        return self.source(key).string(key, default)

    def integer(self, key: str, default: Any) -> Any:
        return self.source(key).integer(key, default)

    def boolean(self, key: str, default: Any) -> Any:
        return self.source(key).boolean(key, default)

    def origin(self) -> Origin:
        entry_keys = frozenset(key for key in self.entry.raw if self.entry.has(key))
        return Origin(self.defaults.path, self.entry.path, entry_keys)


def require_match(name: str, value: str, pattern: re.Pattern[str]) -> None:
    if not pattern.match(value):
        raise ConfigError(f"{name}: {value!r} does not match {pattern.pattern}")


def require_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")


def require_minimum(name: str, value: int | None, minimum: int) -> None:
    """None, an optional setting left unset, passes."""
    if value is not None and value < minimum:
        raise ConfigError(f"{name}: {value} is below the minimum {minimum}")


def _require_quantity(name: str, value: str | None) -> None:
    """None, an optional setting left unset, passes."""
    if value is not None and not _QUANTITY.match(value):
        raise ConfigError(f"{name}: {value!r} is not a Kubernetes quantity such as 500m, 1, 512Mi or 2Gi")


@dataclass(frozen=True)
class Resources:
    """Kubernetes container requests and limits (`{requests: {cpu, memory}, limits: {...}}`) of the stack
    setting `setting`, which errors name."""

    setting: str
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for part, quantities in (("requests", self.requests), ("limits", self.limits)):
            for resource, quantity in quantities.items():
                name = f"{self.setting}.{part}.{resource}"
                if resource not in ("cpu", "memory", "ephemeral-storage"):
                    raise ConfigError(f"{name}: expected cpu, memory or ephemeral-storage")
                _require_quantity(name, quantity)

    def as_dict(self) -> dict[str, dict[str, str]]:
        result: dict[str, dict[str, str]] = {}
        if self.requests:
            result["requests"] = dict(self.requests)
        if self.limits:
            result["limits"] = dict(self.limits)
        return result


def _resources(section: Section, default: Resources | None = None) -> Resources:
    """The section's requests and limits; `default` (or none) when it is unset."""
    if not section.raw:
        return default if default is not None else Resources(setting(section.path))
    section.only("requests", "limits")
    return Resources(setting(section.path), section.string_map("requests"), section.string_map("limits"))
