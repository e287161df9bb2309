"""When the local supervisor restarts a child that exited: the fields of spark-operator's `restartPolicy`, as
charts/streaming-job sets them (values.yaml `restartPolicy`), with the chart's defaults.

- `type`: Always restarts after any exit, OnFailure only after a non-zero exit (or a signal), Never does not.
- `on_failure_retry_interval`: the wait before the first restart; each further failure in a row doubles it
  (up to `max_retry_interval`).
- `on_failure_retries`: restarts after failures in a row; the next failure marks the child failed. The
  operator applies this field to OnFailure only and retries Always forever; locally it bounds both, so that a
  crash loop ends visibly (the chart sets no such limit: 5 is the local default).
- A run that lasted `stable_after` seconds ends the streak: its failure counts as the first again.

There is no local counterpart of the operator's submission step (`python -m <job>` is spark-submit and
driver at once), so `onSubmissionFailureRetryInterval` has none either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from streamstack.errors import StreamstackError

RestartType = Literal["Always", "OnFailure", "Never"]
RESTART_TYPES: tuple[str, ...] = get_args(RestartType)


@dataclass(frozen=True)
class RestartPolicy:
    type: RestartType = "Always"
    on_failure_retries: int = 5
    on_failure_retry_interval: float = 10.0
    max_retry_interval: float = 300.0
    stable_after: float = 600.0
    """Seconds of running after which a failure starts a new streak (kubelet resets its back-off after ten
    minutes too)."""

    def __post_init__(self) -> None:
        if self.type not in RESTART_TYPES:
            raise StreamstackError(f"--restart-policy {self.type}: must be one of {', '.join(RESTART_TYPES)}")
        if self.on_failure_retries < 0:
            raise StreamstackError(f"--restart-retries {self.on_failure_retries}: must be 0 or more")
        if self.on_failure_retry_interval <= 0:
            raise StreamstackError(f"--restart-interval {self.on_failure_retry_interval}: must be positive")

    def restarts_after(self, exit_code: int) -> bool:
        if self.type == "Always":
            return True
        return self.type == "OnFailure" and exit_code != 0

    def retry_delay(self, failures_in_a_row: int) -> float:
        """Seconds to wait before restarting a child that has now failed this many times in a row (1: the
        interval itself)."""
        doubled = self.on_failure_retry_interval * 2.0 ** (failures_in_a_row - 1)
        return min(doubled, self.max_retry_interval)

    def gives_up_after(self, failures_in_a_row: int) -> bool:
        return failures_in_a_row > self.on_failure_retries
