"""Progress of iterative solvers as one number in [0, 1], for any caller-supplied callback.

The library's loops (rank-one PGD, DJAM rounds and sweeps, the partitioned Dawid–Skene EM) accept
``progress: Callable[[float], None]`` and feed it through :class:`IterationProgress`. A callback that also has a
``note(line)`` method receives one line per pass of the loops that write them (the partitioned EM: pass number,
log-likelihood and its change; :func:`note`), for a log; a plain callable gets the fractions only. Nothing here
knows about Prefect, terminals or Dask: the orchestration layer turns the fraction into a Prefect progress
artifact and the lines into the run's log, the CLI the fraction into a bar on stderr, and a loop that runs as one
task on a Dask worker (:func:`crowdflow.executors.elsewhere`) has its reports sent to the calling process.
"""

from __future__ import annotations

import math
from collections.abc import Callable

ProgressFn = Callable[[float], None]


def note(progress: ProgressFn | None, line: str) -> None:
    """Give ``line`` (what one pass of a loop did, for a log) to ``progress.note`` when the callback has one.

    A callback without a ``note`` method (a plain function) ignores lines; the loop still logs them with the
    standard :mod:`logging` of the process that runs it.
    """
    own = getattr(progress, "note", None)
    if own is not None:
        own(line)


class IterationProgress:
    """Monotone progress of a solver that stops at ``max_iter`` or when a residual falls below ``target``.

    The fraction is the larger of the iteration share ``k / max_iter`` and the share of the way, on a
    log scale, from the first residual seen to the target: ``log(r0 / r) / log(r0 / target)``. Both
    estimates only ever move the reported value up; the callback fires when the value has grown by at
    least ``min_delta`` (so a fast loop costs a few dozen calls, not one per iteration), and
    :meth:`done` reports 1.0.

    Parameters
    ----------
    callback : callable or None
        ``callback(fraction)``; ``None`` makes every method a no-op.
    max_iter : int
        Iteration cap of the loop.
    target : float
        Stopping threshold of the residual (tolerance); <= 0 disables the residual estimate.
    min_delta : float
        Smallest increase that is reported.
    """

    def __init__(self, callback: ProgressFn | None, max_iter: int, target: float = 0.0, min_delta: float = 0.01):
        self.callback = callback
        self.max_iter = max(int(max_iter), 1)
        self.target = float(target)
        self.min_delta = float(min_delta)
        self.first: float | None = None
        self.value = 0.0
        self.reported = -1.0

    def update(self, k: int, residual: float | None = None) -> None:
        """Record iteration ``k`` (1-based count of finished iterations) and its residual."""
        if self.callback is None:
            return
        frac = min(k / self.max_iter, 1.0)
        if residual is not None and self.target > 0 and math.isfinite(residual) and residual > 0:
            if self.first is None:
                self.first = residual
            elif self.first > self.target and residual < self.first:
                span = math.log(self.first / self.target)
                frac = max(frac, min(math.log(self.first / residual) / span, 1.0))
        self.value = max(self.value, min(frac, 0.99))
        if self.value - self.reported >= self.min_delta:
            self.reported = self.value
            self.callback(self.value)

    def done(self) -> None:
        """Report completion (1.0)."""
        if self.callback is not None and self.reported < 1.0:
            self.value = self.reported = 1.0
            self.callback(1.0)
