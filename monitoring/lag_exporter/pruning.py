"""Forgetting what the exporter keeps per partition, group or record once it is no longer reported."""

from __future__ import annotations

from collections.abc import Container, MutableMapping
from typing import TypeVar

Key = TypeVar("Key")
Value = TypeVar("Value")


def keep_only(table: MutableMapping[Key, Value], keys: Container[Key]) -> None:
    """Delete the entries of `table` whose key is not in `keys`, in place (no copy of a large table)."""
    for key in [key for key in table if key not in keys]:
        del table[key]
