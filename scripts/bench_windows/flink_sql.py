"""Pure helpers the PyFlink peer shares between its program (flink_job.py, in the PyFlink venv) and the
benchmark (flink.py): standard library only."""

from __future__ import annotations

from datetime import UTC, datetime


def interval(ms: int) -> str:
    """A Flink SQL day-time interval literal of `ms` milliseconds (SECOND alone allows 2 digits)."""
    if ms < 0:
        raise ValueError(f"interval of {ms} ms: must not be negative")
    seconds, millis = divmod(ms, 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"INTERVAL '{days} {hours:02}:{minutes:02}:{seconds:02}.{millis:03}' DAY TO SECOND(3)"


def epoch_ms_of(window_start: str) -> int:
    """Epoch ms of a window start as Flink SQL casts a TIMESTAMP(3) to text in UTC
    ('2026-11-26 09:00:10' or '2026-11-26 09:00:10.5')."""
    return int(datetime.fromisoformat(window_start).replace(tzinfo=UTC).timestamp() * 1000)
