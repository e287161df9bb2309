"""Third-party runtimes (Kafka, its metrics reporter and Spark-Kafka jars, Prometheus, Alertmanager; for
change data capture PostgreSQL and the Debezium plugin, streamstack.runtimes.cdc) and tools (helm,
actionlint, checkov) in the cache: pinned, checked, re-used.

The versions and sha256 come from runtimes.lock.json, written by scripts/lock_runtimes.py.

    python -m streamstack.runtimes           # fetch whatever is missing
    python -m streamstack.runtimes --check   # only report whether everything is there
"""

from streamstack.runtimes import lock
from streamstack.runtimes.command import main
from streamstack.runtimes.fetch import ensure
from streamstack.runtimes.locate import find_java, locate, sha256_of
from streamstack.runtimes.lock import *  # noqa: F403 (the lock's records and settings are all public here)
from streamstack.runtimes.tools import (
    CHECKOV_CONSTRAINTS,
    CHECKOV_INSTALL_TIMEOUT_S,
    CHECKOV_VERSION,
    GO_INSTALL_TIMEOUT_S,
    GO_TOOLS,
    GoTool,
    checkov_path,
    ensure_checkov,
    ensure_go_tools,
    go_tool_path,
    locate_checkov,
    locate_go_tools,
)

__all__ = [
    "CHECKOV_CONSTRAINTS",
    "CHECKOV_INSTALL_TIMEOUT_S",
    "CHECKOV_VERSION",
    "GO_INSTALL_TIMEOUT_S",
    "GO_TOOLS",
    "GoTool",
    "checkov_path",
    "ensure",
    "ensure_checkov",
    "ensure_go_tools",
    "find_java",
    "go_tool_path",
    "locate",
    "locate_checkov",
    "locate_go_tools",
    "main",
    "sha256_of",
]
__all__ += lock.__all__
