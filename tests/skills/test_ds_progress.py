"""Progress of the in-memory Dawid–Skene fits (issue #36): the same reports as the partitioned EM, changing nothing.

Over a family of crowds (2–5 classes, 20–120 workers, one-coin and confusion workers with spammers and adversaries,
uniform and Zipf activity, one crowd past the two-halves sweep's size): ``ds`` and ``onecoin_ds`` give the callback
fractions that strictly increase and end with exactly one 1.0, and one line per evaluation of the EM map, numbered
1 … the fit's iterations, with the log-likelihoods of the fit's trace and their changes; ``auto`` (every candidate
on every fold, then the refit) gives one strictly increasing sequence to 1.0 over the whole job, each fit's lines
prefixed with it and numbered from 1; the gold cross-fit likewise over its K + 1 fits. A fit with the callback has
the bits of a fit without it. :class:`crowdflow.progress.Span` is checked against its definition.
"""

from __future__ import annotations

import itertools
import logging
import re
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.progress import PassLines, Span
from crowdflow.skills import SkillsOptions, fit_skills, prepare_labels
from crowdflow.skills.auto import DEFAULT_CANDIDATES, n_fits
from crowdflow.skills.dawid_skene import dawid_skene, one_coin_dawid_skene
from crowdflow.skills.gold import cross_fit
from crowdflow.synth import skills as synth

LINE = re.compile(
    r"^(.*)Dawid-Skene EM pass (\d+) of at most (\d+): log-likelihood (\S+)(?: \((\S+) since pass (\d+)\))?$"
)

#: (classes, tasks, labels a task, workers, good, activity, seed); the last crowd (7e4 labels) sweeps in two halves
FAMILY = [
    (2, 300, 5, 20, "onecoin", "uniform", 0),
    (3, 800, 5, 60, "confusion", "zipf", 1),
    (5, 600, 7, 40, "confusion", "uniform", 2),
    (4, 1500, 3, 120, "onecoin", "zipf", 3),
    (3, 10000, 7, 120, "confusion", "uniform", 4),
]


class Recorder:
    """A progress callback with ``note``: every fraction and line, in order."""

    def __init__(self) -> None:
        self.fractions: list[float] = []
        self.lines: list[str] = []

    def __call__(self, fraction: float) -> None:
        self.fractions.append(fraction)

    def note(self, line: str) -> None:
        self.lines.append(line)


def _crowd(case: tuple[Any, ...]) -> tuple[Any, Any]:
    m, t, r, w, good, activity, seed = case
    data = synth.crowd_labels(synth.CrowdConfig(m, t, r, w, good, 0.1, 0.05, "uniform", activity, seed))
    lm, _ = prepare_labels(data.labels, data.classes, "error")
    return data, lm


def _fractions_ok(fractions: list[float]) -> None:
    """Strictly increasing, in [0, 1], the last (and only the last) exactly 1.0."""
    assert fractions and fractions[-1] == 1.0 and fractions.count(1.0) == 1, fractions[-5:]
    assert fractions[0] >= 0 and all(b > a for a, b in itertools.pairwise(fractions))


def _passes(lines: list[str], prefix: str, max_iter: int) -> tuple[list[int], list[float], list[float]]:
    """Pass numbers, log-likelihoods and printed changes of the lines with ``prefix``, each line well formed."""
    found = [LINE.match(line) for line in lines]
    assert all(found), [line for line, f in zip(lines, found, strict=True) if not f][:3]
    mine = [f for f in found if f is not None and f.group(1) == prefix]
    assert mine and {int(f.group(3)) for f in mine} == {max_iter}
    assert mine[0].group(5) is None and all(f.group(5) is not None for f in mine[1:])  # no change before pass 2
    return [int(f.group(2)) for f in mine], [float(f.group(4)) for f in mine], [float(f.group(5)) for f in mine[1:]]


def _check_lines(lines: list[str], prefix: str, max_iter: int, iterations: int, loss_trace: np.ndarray) -> None:
    """One line per EM evaluation, numbered 1 … iterations; changes are the differences of the log-likelihoods; every
    kept point of the trace (all but its last value, the final E-step's) is a pass's log-likelihood."""
    passes, lls, changes = _passes(lines, prefix, max_iter)
    assert passes == list(range(1, iterations + 1))
    np.testing.assert_allclose(np.diff(lls), changes, rtol=6e-3, atol=2e-6)  # printed to 3 significant digits
    trace = -np.asarray(loss_trace[:-1])
    gaps = np.abs(trace[:, None] - np.asarray(lls)[None, :]).min(axis=1)
    assert len(trace) <= len(lls) and gaps.max() <= 1e-6 * (1 + np.abs(trace).max() * 1e-9)


def _same(a: Any, b: Any) -> None:
    pd.testing.assert_frame_equal(a.skills, b.skills, check_exact=True)
    pd.testing.assert_frame_equal(a.consensus, b.consensus, check_exact=True)
    pd.testing.assert_frame_equal(a.diagnostics, b.diagnostics, check_exact=True)
    np.testing.assert_array_equal(a.loss_trace, b.loss_trace)
    assert repr(sorted(a.metadata.items())) == repr(sorted(b.metadata.items()))  # repr: NaN == NaN


@pytest.mark.parametrize(("case", "method"), list(itertools.product(FAMILY, ["ds", "onecoin_ds"])))
def test_in_memory_em_reports_its_passes_and_the_fit_is_unchanged(case: tuple[Any, ...], method: str) -> None:
    _, lm = _crowd(case)
    o = SkillsOptions(method=method, seed=case[-1], ds_tol=1e-8)
    seen = Recorder()
    fit = fit_skills(lm, o, progress=seen)
    _fractions_ok(seen.fractions)
    _check_lines(seen.lines, "", o.ds_max_iter, fit.metadata["iterations"], fit.loss_trace)
    _same(fit, fit_skills(lm, o))
    plain: list[float] = []  # a callback without ``note``: the fractions only, the same ones
    fit_skills(lm, o, progress=plain.append)
    assert plain == seen.fractions


@pytest.mark.parametrize("one_coin", [False, True])
def test_the_em_functions_report_with_a_cap_and_the_plain_loop_ends_at_one(one_coin: bool) -> None:
    """Stopped by the cap (not converged): lines 1 … cap, fractions to 1.0 once; the reference loop (no SQUAREM)
    reports its end only; the same bits as without a callback."""
    _, lm = _crowd(FAMILY[2])
    fit = one_coin_dawid_skene if one_coin else dawid_skene
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        seen = Recorder()
        capped = fit(lm, tol=1e-14, max_iter=7, progress=seen)
        bare = fit(lm, tol=1e-14, max_iter=7)
        assert not capped.converged and capped.iterations == 7
        _fractions_ok(seen.fractions)
        _check_lines(seen.lines, "", 7, 7, -capped.log_likelihood)
        np.testing.assert_array_equal(capped.posteriors, bare.posteriors)
        np.testing.assert_array_equal(capped.log_likelihood, bare.log_likelihood)
        plain = Recorder()
        ref = fit(lm, acceleration="none", progress=plain)
        assert plain.fractions == [1.0] and plain.lines == []
        np.testing.assert_array_equal(ref.posteriors, fit(lm, acceleration="none").posteriors)


@pytest.mark.parametrize("case", FAMILY[:4])
def test_auto_reports_one_rise_over_its_candidates_and_refit(case: tuple[Any, ...]) -> None:
    """Fractions strictly increasing to one 1.0 over the K × C candidate fits and the refit (never restarting);
    each Dawid–Skene fit's lines prefixed with its fold and candidate, numbered from 1, the refit's 1 … its
    iterations; the fits in the order they run; the same bits as without a callback."""
    _, lm = _crowd(case)
    o = SkillsOptions(method="auto", seed=case[-1], ds_tol=1e-8)
    seen = Recorder()
    fit = fit_skills(lm, o, progress=seen)
    _fractions_ok(seen.fractions)
    k, choice = o.auto_folds, fit.metadata["auto_choice"]
    ds_like = [c for c in DEFAULT_CANDIDATES if c != "mv"]
    fits = [f"auto fold {f + 1} of {k}, {c}: " for f in range(k) for c in ds_like]
    prefixes = list(dict.fromkeys(LINE.match(line).group(1) for line in seen.lines))  # type: ignore[union-attr]
    refit = f"auto refit ({choice}): "
    assert prefixes == fits + ([refit] if choice != "mv" else [])
    for prefix in fits:
        passes, _, _ = _passes(seen.lines, prefix, o.ds_max_iter)
        assert passes == list(range(1, len(passes) + 1))
    if choice != "mv":
        _check_lines(seen.lines, refit, o.ds_max_iter, fit.metadata["iterations"], fit.loss_trace)
    # the candidate fits end at K C / (K C + 1) of the job: the refit's reports are above it, the folds' below
    cut = n_fits(o) / (n_fits(o) + 1.0)
    assert any(f > cut for f in seen.fractions[:-1]) == (choice != "mv")
    _same(fit, fit_skills(lm, o))


def test_gold_cross_fit_reports_one_rise_over_its_fits() -> None:
    data, lm = _crowd(FAMILY[1])
    truth = data.truth.iloc[::3]
    o = SkillsOptions(method="ds", gold_folds=3, ds_tol=1e-8)
    seen = Recorder()
    fit = cross_fit(lm, o, truth, progress=seen)
    _fractions_ok(seen.fractions)
    prefixes = list(dict.fromkeys(LINE.match(line).group(1) for line in seen.lines))  # type: ignore[union-attr]
    assert prefixes == ["gold full fit: ", *(f"gold fold {f} of 3: " for f in (1, 2, 3))]
    _check_lines(seen.lines, "gold full fit: ", o.ds_max_iter, fit.metadata["iterations"], fit.loss_trace)
    bare = cross_fit(lm, o, truth)
    _same(fit, bare)
    pd.testing.assert_frame_equal(fit.gold_scored, bare.gold_scored, check_exact=True)


def test_span_maps_a_fit_into_its_share_and_keeps_the_job_increasing() -> None:
    """lo + (hi − lo) f, hi exactly at f = 1, only values above every earlier one; nested spans compose; lines reach
    the caller's ``note`` with the prefixes of every span they pass through."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        job, seen = Recorder(), []
        root = Span(job)
        cuts = np.sort(rng.random(int(rng.integers(1, 6))))
        edges = [0.0, *cuts.tolist(), 1.0]
        for i, (lo, hi) in enumerate(itertools.pairwise(edges)):
            part = root.part(lo, hi, f"p{i} ")
            inner = part.part(0.0, 0.5, "a ")
            for f in sorted(rng.random(5)):  # a fit that restarts: its second run's values are not passed on
                inner(f)
                seen.append(lo + (hi - lo) * (0.5 * f))
            inner(0.0)
            part(1.0)
            inner.note("x")
            assert job.lines[-1] == f"p{i} a x"
        root(1.0)
        _fractions_ok(job.fractions)
        assert set(job.fractions) <= {*seen, *edges[1:]} and job.fractions[-1] == 1.0
    lines = Recorder()
    PassLines(lines, 9, logging.getLogger("test"))(1.5)
    assert lines.lines == ["Dawid-Skene EM pass 1 of at most 9: log-likelihood 1.500000"]
