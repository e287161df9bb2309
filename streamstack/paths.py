"""Where streamstack keeps downloaded runtimes and local stack state."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Downloaded third-party runtimes (jars, Prometheus); git-ignored, re-used across runs."""
    return Path(os.environ.get("STREAMSTACK_CACHE", REPO_ROOT / ".cache" / "streamstack"))


def default_workdir() -> Path:
    """State, logs, data and checkpoints of the local stack started by `streamstack local up`."""
    return Path(os.environ.get("STREAMSTACK_HOME", REPO_ROOT / ".streamstack"))
