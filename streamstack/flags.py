"""Command-line flags declared as data: `add_flags` adds a table of `Flag`s to a parser in order, and code
that hands flags on (a detached `streamstack local up` to its supervisor) reads the same table."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    """One `parser.add_argument(name, ...)`; the options left None are argparse's defaults."""

    name: str
    help: str
    type: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    choices: Sequence[str] | None = None
    action: str | None = None

    @property
    def dest(self) -> str:
        return self.name.removeprefix("--").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        options = {
            "type": self.type,
            "default": self.default,
            "metavar": self.metavar,
            "choices": self.choices,
            "action": self.action,
        }
        parser.add_argument(
            self.name, help=self.help, **{key: value for key, value in options.items() if value is not None}
        )


def add_flags(parser: argparse.ArgumentParser, flags: Iterable[Flag]) -> None:
    for flag in flags:
        flag.add_to(parser)
