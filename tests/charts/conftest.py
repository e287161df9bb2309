"""The pinned helm and checkov, built or installed by the project's own setup when missing: a missing tool
fails the tests, it never skips them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from streamstack import runtimes


@pytest.fixture(scope="session")
def helm() -> Path:
    return runtimes.ensure_go_tools(log=lambda line: print(line, file=sys.stderr))["helm"]


@pytest.fixture(scope="session")
def checkov() -> Path:
    return runtimes.ensure_checkov(log=lambda line: print(line, file=sys.stderr))
