"""Spark's interval strings ('10 seconds', '1 minute'), as the jobs' flags, the stack config and the CLI take
them: one pattern and one conversion for all three."""

from __future__ import annotations

import re

SPARK_DURATION = re.compile(r"^([0-9]+) (millisecond|second|minute|hour|day)s?$")
_UNIT_SECONDS = {"millisecond": 0.001, "second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}


def duration_seconds(duration: str) -> float:
    """'10 seconds' -> 10.0; a ValueError when `duration` is not such an interval."""
    match = SPARK_DURATION.match(duration.strip())
    if match is None:
        raise ValueError(f"{duration!r}: expected a duration such as '10 seconds' or '1 minute'")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
