"""Progress of iterative solvers as one number in [0, 1], for any caller-supplied callback.

The library's loops (rank-one PGD, DJAM rounds and sweeps, the Dawid–Skene EM in memory and partitioned) accept
``progress: Callable[[float], None]`` and feed it through :class:`IterationProgress`. A callback that also has a
``note(line)`` method receives one line per pass of the loops that write them (the Dawid–Skene EM: pass number,
log-likelihood and its change, :class:`PassLines`; :func:`note`), for a log; a plain callable gets the fractions
only. A job made of several fits (``method: auto``'s candidates and refit, the gold cross-fit) gives each fit a
:class:`Span` of its progress, so the job's fraction rises once from 0 to 1. Nothing here
knows about Prefect, terminals or Dask: the orchestration layer turns the fraction into a Prefect progress
artifact and the lines into the run's log, the CLI the fraction into a bar on stderr, and a loop that runs as one
task on a Dask worker (:func:`crowdflow.executors.elsewhere`) has its reports sent to the calling process.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TypeVar

ProgressFn = Callable[[float], None]
_In = TypeVar("_In")
_Out = TypeVar("_Out")


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


class PassLines:
    """One line per evaluation of an EM map, for a log: ``<name> pass k of at most K: log-likelihood ℓ_k`` and, from
    the second pass, ``(ℓ_k − ℓ_{k−1} since pass k − 1)``; written to ``logger`` at ``level`` and given to the
    callback's ``note`` (:func:`note`). The one rule of these lines for the in-memory and the partitioned EM.

    Parameters
    ----------
    progress : callable or None
        The caller's callback (its ``note``, if any, gets the lines).
    max_iter : int
        The EM's cap on evaluations (the ``K`` of the line).
    logger : logging.Logger
        Where the process that runs the EM logs the lines.
    level : int
        Their level (the partitioned EM: INFO; the in-memory EM, fitted many times by ``auto``: DEBUG).
    name : str
    """

    def __init__(
        self,
        progress: ProgressFn | None,
        max_iter: int,
        logger: logging.Logger,
        level: int = logging.INFO,
        name: str = "Dawid-Skene EM",
    ) -> None:
        self.progress, self.max_iter, self.logger, self.level, self.name = progress, int(max_iter), logger, level, name
        self.passes = 0
        self.last = math.nan

    def __call__(self, log_lik: float) -> None:
        """Write the line of the next pass, whose log-likelihood is ``log_lik``."""
        self.passes += 1
        line = f"{self.name} pass {self.passes} of at most {self.max_iter}: log-likelihood {log_lik:.6f}"
        if math.isfinite(self.last):
            line += f" ({log_lik - self.last:+.3g} since pass {self.passes - 1})"
        self.last = log_lik
        self.logger.log(self.level, "%s", line)
        note(self.progress, line)

    def around(self, step: Callable[[_In], tuple[_Out, float, float]]) -> Callable[[_In], tuple[_Out, float, float]]:
        """``step`` (an EM map returning ``(F(θ), Φ(θ), ℓ(θ))``, :func:`crowdflow.skills.squarem.squarem`) writing
        the line of each of its calls; what it returns is ``step``'s, unchanged."""

        def reported(theta: _In) -> tuple[_Out, float, float]:
            out = step(theta)
            self(out[2])
            return out

        return reported


class Span:
    """A part ``[lo, hi]`` of a caller's progress, for one fit of a job of several: the fit's fraction ``f`` is
    reported as ``lo + (hi − lo) f`` (``f = 1`` as ``hi`` exactly), and only when it exceeds every value this span
    reported before, so the caller sees a strictly increasing sequence however the fit's own reports go. Lines given
    to :meth:`note` reach the caller's ``note`` with ``prefix`` (which fit of the job wrote them).

    Spans nest (a span's callback may be a span). A job that reports through ``Span(progress, 0, 1)`` and calls it
    with 1.0 at its end gives ``progress`` exactly one 1.0, the last value.
    """

    def __init__(self, progress: ProgressFn, lo: float = 0.0, hi: float = 1.0, prefix: str = "") -> None:
        self.progress, self.lo, self.hi, self.prefix = progress, float(lo), float(hi), prefix
        self.top = -math.inf

    def __call__(self, fraction: float) -> None:
        f = min(max(float(fraction), 0.0), 1.0)
        value = self.hi if f >= 1.0 else min(self.lo + (self.hi - self.lo) * f, self.hi)
        if value > self.top:
            self.top = value
            self.progress(value)

    def note(self, line: str) -> None:
        """Give ``prefix + line`` to the caller's ``note`` (:func:`note`)."""
        note(self.progress, self.prefix + line)

    def part(self, lo: float, hi: float, prefix: str = "") -> Span:
        """The span ``[lo, hi]`` of this span's ``[0, 1]`` (a fit of this job), its lines prefixed ``prefix``."""
        return Span(self, lo, hi, prefix)
