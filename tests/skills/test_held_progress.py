"""Progress of the partitioned Dawid–Skene EM (issue #36): reported wherever the EM runs, in this process or as one
task on a Dask worker (:func:`crowdflow.executors.elsewhere`), and changing nothing in the fit.

Over cases of the :func:`tests.skills.test_held.family_case` family (3–400 workers, 2–5 classes, 1–8 buckets), both
Dawid–Skene methods: the callback receives fractions that increase and end at 1.0 (once), and one line per
evaluation of the EM map, numbered 1 … the fit's iterations, with the log-likelihood of the fit's trace and the
change from the pass before; a fit with the callback has the bits of a fit without it, on the same executor.
SQUAREM's ``monitor`` (what the fractions are made of) sees each chain point's sup-norm move, the stopping rule's
number, and changes nothing in the run.
"""

from __future__ import annotations

import itertools
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crowdflow.executors import InlineMemory
from crowdflow.skills import SkillsOptions, fit_skills_partitioned
from crowdflow.skills.squarem import squarem
from tests.skills.test_held import _identical, family_case, write_case

LINE = re.compile(r"Dawid-Skene EM pass (\d+) of at most (\d+): log-likelihood (\S+)(?: \((\S+) since pass (\d+)\))?$")


class Recorder:
    """A progress callback with ``note``: every fraction and line, in order, and the threads that called it."""

    def __init__(self) -> None:
        self.fractions: list[float] = []
        self.lines: list[str] = []
        self.threads: set[int] = set()

    def __call__(self, fraction: float) -> None:
        self.fractions.append(fraction)
        self.threads.add(threading.get_ident())

    def note(self, line: str) -> None:
        self.lines.append(line)
        self.threads.add(threading.get_ident())


def _fit(case: dict[str, Any], folder: Path, out: Path, method: str, executor: Any, progress: Any) -> Any:
    opts = SkillsOptions(method=method, tie_break="smallest", ds_tol=1e-10)
    return fit_skills_partitioned(
        folder, opts, out_folder=out, executor=executor, n_buckets=case["n_buckets"], progress=progress
    )


def _check_reports(seen: Recorder, fit: Any) -> None:
    """Fractions increasing to 1.0 (reached once, last); one line per EM evaluation, in order, matching the trace."""
    meta = fit.result.metadata
    assert seen.fractions and seen.fractions[-1] == 1.0 and seen.fractions.count(1.0) == 1
    assert all(b > a for a, b in itertools.pairwise(seen.fractions)) and seen.fractions[0] >= 0
    found = [LINE.match(line) for line in seen.lines]
    assert all(found), seen.lines
    passes = [int(m.group(1)) for m in found if m]
    assert passes == list(range(1, meta["iterations"] + 1))
    assert {int(m.group(2)) for m in found if m} == {meta["ds_max_iter"]}
    lls = [float(m.group(3)) for m in found if m]
    changes = [float(m.group(4)) for m in found[1:] if m]
    assert found[0] is not None and found[0].group(4) is None  # the first pass has no change to report
    np.testing.assert_allclose(np.diff(lls), changes, rtol=6e-3, atol=2e-6)  # printed to 3 significant digits
    # the trace holds the log-likelihoods of the chain points (refused extrapolations are not recorded): each is a
    # pass's, printed to 6 decimals
    trace = -np.asarray(fit.result.loss_trace[:-1])  # the last value is the consensus pass's
    gaps = np.abs(trace[:, None] - np.asarray(lls)[None, :]).min(axis=1)
    assert len(trace) <= len(lls) and gaps.max() <= 1e-6 * (1 + np.abs(trace).max() * 1e-9)


@pytest.mark.parametrize(
    ("seed", "method"),
    [(s, m) for s in range(4) for m in ("ds", "onecoin_ds")],
)
def test_in_process_em_reports_its_passes_and_the_fit_is_unchanged(seed: int, method: str, tmp_path: Path) -> None:
    """The EM run here (:class:`InlineMemory`, and the default executor that reads the codes again each pass): the
    caller's callback itself gets the reports; the fit equals one without a callback, bit for bit."""
    case = family_case(seed)
    write_case(case, tmp_path / "labels")
    seen: list[Recorder] = []
    for k, executor in enumerate((InlineMemory(), None)):
        seen.append(Recorder())
        fit = _fit(case, tmp_path / "labels", tmp_path / f"p{k}", method, executor, seen[k])
        _check_reports(seen[k], fit)
        assert seen[k].threads == {threading.get_ident()}
        _identical(fit, _fit(case, tmp_path / "labels", tmp_path / f"n{k}", method, executor, None))
    plain: list[float] = []  # a callback without ``note``: the fractions only
    _fit(case, tmp_path / "labels", tmp_path / "plain", method, InlineMemory(), plain.append)
    assert plain == seen[0].fractions


@pytest.mark.parametrize(("seed", "method"), [(0, "ds"), (2, "onecoin_ds"), (3, "ds")])
def test_em_on_a_dask_worker_reports_its_passes_to_the_caller(
    seed: int, method: str, tmp_path: Path, dask_map: Any, held_after_release: Any
) -> None:
    """The EM runs as one task on a Dask worker process: its reports reach the caller's callback (this thread),
    all of them, in order, before the fit returns; the fit has the bits of a Dask fit without a callback."""
    case = family_case(seed)
    write_case(case, tmp_path / "labels")
    seen = Recorder()
    fit = _fit(case, tmp_path / "labels", tmp_path / "p", method, dask_map, seen)
    _check_reports(seen, fit)
    assert seen.threads == {threading.get_ident()}
    _identical(fit, _fit(case, tmp_path / "labels", tmp_path / "n", method, dask_map, None))
    info = held_after_release()
    assert all(n == 0 for n in info.values()), info


def test_squarem_monitor_sees_the_stopping_rule_and_changes_nothing() -> None:
    """``monitor(evaluations, move)`` at every chain point: evaluations increase, the last move is below ``tol``
    exactly when the run converged, and the run equals one without a monitor; over linear contractions of several
    rates (SQUAREM extrapolates, some points are refused) and a box that allows only plain steps."""
    for seed, rate in itertools.product(range(4), (0.3, 0.9, 0.99)):
        rng = np.random.default_rng(seed)
        d = int(rng.integers(2, 30))
        star = rng.normal(size=d)

        def step(theta: np.ndarray, star: np.ndarray = star) -> tuple[np.ndarray, float, float]:
            nxt = star + rate * (theta - star)
            value = -float(np.sum((theta - star) ** 2))
            return nxt, value, value

        for lower, upper in ((-np.inf, np.inf), (-0.5, 0.5)):
            calls: list[tuple[int, float]] = []
            run = squarem(step, np.zeros(d), 1e-9, 500, lower, upper, monitor=lambda n, mv: calls.append((n, mv)))
            bare = squarem(step, np.zeros(d), 1e-9, 500, lower, upper)
            np.testing.assert_array_equal(run.theta, bare.theta)
            assert (run.trace, run.evaluations, run.converged) == (bare.trace, bare.evaluations, bare.converged)
            ns = [n for n, _ in calls]
            # the last evaluation is a chain point's unless the cap came right after a refused extrapolation
            assert ns == sorted(set(ns)) and (ns[-1] == run.evaluations or not run.converged)
            assert (calls[-1][1] < 1e-9) == run.converged
            assert all(mv >= 1e-9 for _, mv in calls[:-1])  # no earlier point met the rule
