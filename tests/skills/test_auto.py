"""``method: auto`` (crowdflow.skills.auto, docs/methods/skills.md §7.4): held-out predictive log-likelihood
picks the model that generated the labels, and the held-out split never reaches the refit."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest

from crowdflow.skills import SkillsOptions, fit_skills, prepare_labels
from crowdflow.skills.auto import (
    CANDIDATES,
    DEFAULT_CANDIDATES,
    Candidate,
    Predictive,
    _subset,
    choose,
    fold_ids,
    heldout_log_lik,
)
from crowdflow.synth import skills as synth


def _lm(good: str, m: int, t: int, r: int, w: int, activity: str, seed: int):
    data = synth.crowd_labels(synth.CrowdConfig(m, t, r, w, good, 0.0, 0.0, "uniform", activity, seed))
    lm, _ = prepare_labels(data.labels, data.classes, "error")
    return data, lm


# crowds with enough labels per worker (>= 140) for a worker's parameters to be estimable; with a handful of
# labels per worker the one-parameter law of majority vote predicts better (docs/methods/skills.md §7.4)
ONE_COIN = [
    *itertools.product([3, 4], [300, 2000], [7], [15], ["uniform", "zipf"], [1, 2]),
    *itertools.product([2], [2000], [3, 7], [15], ["uniform", "zipf"], [1, 2]),
]
CONFUSION = list(itertools.product([2, 3, 4], [2000], [7], [15, 150], ["uniform", "zipf"], [1, 2]))


@pytest.mark.parametrize(("m", "t", "r", "w", "activity", "seed"), ONE_COIN)
def test_auto_picks_one_coin_on_one_coin_crowds(m, t, r, w, activity, seed):
    _, lm = _lm("onecoin", m, t, r, w, activity, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert choose(lm, SkillsOptions()).choice == "onecoin_ds"


@pytest.mark.parametrize(("m", "t", "r", "w", "activity", "seed"), CONFUSION)
def test_auto_picks_full_dawid_skene_on_confusion_crowds(m, t, r, w, activity, seed):
    """Full confusion matrices (structured, asymmetric errors): ds or its classic fit (the same model)."""
    _, lm = _lm("confusion", m, t, r, w, activity, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert choose(lm, SkillsOptions()).choice in ("ds", "ds_classic")


# majority vote's own model: every worker right with ONE shared probability (its implied law in auto.py), here with
# 10 to 670 labels per worker (its exact posterior; a per-worker fit only adds noise to the one shared accuracy)
EQUAL = list(
    itertools.product(
        [(2, 0.7), (2, 0.62), (3, 0.75)], [(300, 1000, 3), (300, 1000, 5), (60, 500, 5), (15, 2000, 5)], [1, 2]
    )
)


@pytest.mark.parametrize(("mp", "size", "seed"), EQUAL)
def test_auto_picks_majority_vote_on_equal_accuracy_crowds(mp, size, seed):
    from crowdflow.labels import encode_labels

    (m, p), (w, t, r) = mp, size
    wi, ti = synth.random_assignment(w, t, r, seed=seed)
    data = synth.one_coin_labels(np.full(w, (p * m - 1) / (m - 1)), wi, ti, m, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert choose(encode_labels(data.labels), SkillsOptions()).choice == "mv"


def test_folds_hold_out_each_label_once_and_leave_every_task_a_label():
    _, lm = _lm("onecoin", 3, 500, 4, 30, "zipf", 3)
    labels = lm.labels_per_task()
    for k in (2, 3, 5, 7):
        folds = fold_ids(lm, k, seed=9)
        assert ((folds >= 0) == (labels[lm.task_idx] >= 2)).all()
        for f in range(k):
            kept = np.bincount(lm.task_idx[folds != f], minlength=lm.n_tasks)
            assert (kept >= 1).all()  # every task keeps a training label in every fold
            held = np.bincount(lm.task_idx[folds == f], minlength=lm.n_tasks)
            assert (held <= -(-labels // k)).all()  # at most ceil(n_t / K) held out per fold


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_score_is_the_predictive_law_of_the_fit_without_the_label(name):
    """Brute force on a small crowd, every registered candidate: each held-out label's score is
    log Σ_k post_k π_j[k, y] of a fit that never saw it (changing the held-out labels changes neither the
    posteriors nor the confusion scoring them)."""
    _, lm = _lm("confusion", 3, 60, 4, 8, "uniform", 4)
    folds = fold_ids(lm, 4, seed=1)
    out = folds == 0
    o = SkillsOptions()
    pred = CANDIDATES[name].fit(_subset(lm, ~out), o)
    rng = np.random.default_rng(0)
    scrambled = lm.class_idx.copy()
    scrambled[out] = rng.integers(0, lm.n_classes, out.sum())
    from crowdflow.labels import LabelMatrix

    lm2 = LabelMatrix(lm.workers, lm.tasks, lm.classes, lm.worker_idx, lm.task_idx, scrambled)
    pred2 = CANDIDATES[name].fit(_subset(lm2, ~out), o)
    np.testing.assert_array_equal(pred.posteriors, pred2.posteriors)
    np.testing.assert_array_equal(pred.confusion, pred2.confusion)
    got = heldout_log_lik(pred, lm.task_idx[out], lm.worker_idx[out], lm.class_idx[out])
    for n, (t, j, y) in enumerate(zip(lm.task_idx[out], lm.worker_idx[out], lm.class_idx[out], strict=True)):
        want = np.log(sum(pred.posteriors[t, k] * pred.confusion[j, k, y] for k in range(lm.n_classes)))
        assert got[n] == pytest.approx(want, rel=1e-12)


def test_the_split_never_leaks_into_the_refit():
    """Whatever the split (seeds, fold counts), the refit is bit for bit fit_skills on ALL labels with the chosen
    candidate's options: no fold's fit, split or score reaches the returned tables."""
    data, _ = _lm("confusion", 3, 800, 5, 20, "uniform", 6)
    choices = set()
    for seed, folds in [(0, 5), (1, 5), (7, 3), (3, 10)]:
        auto = fit_skills(data.labels, seed=seed, auto_folds=folds)
        choice = auto.metadata["auto_choice"]
        choices.add(choice)
        ref = fit_skills(data.labels, seed=seed, **CANDIDATES[choice].options)
        pd.testing.assert_frame_equal(auto.consensus, ref.consensus)
        pd.testing.assert_frame_equal(auto.skills, ref.skills)
        pd.testing.assert_frame_equal(auto.diagnostics, ref.diagnostics)
        assert auto.metadata["auto"]["folds"] == folds
        same = {k: v for k, v in auto.metadata.items() if k not in ("auto", "auto_choice")}
        assert repr(sorted(same.items())) == repr(sorted(ref.metadata.items()))  # repr: NaN == NaN
    assert choices <= {"ds", "ds_classic"}


def test_a_candidate_that_did_not_converge_is_not_chosen_over_a_converged_one_silently():
    _, lm = _lm("confusion", 3, 800, 7, 15, "uniform", 1)

    def stuck(lm_, o, progress):
        p = CANDIDATES["ds"].fit(lm_, o, progress)
        return Predictive(p.posteriors, p.confusion, converged=False, iterations=o.ds_max_iter)

    cands = {"ds_stuck": Candidate({"method": "ds"}, stuck), "mv": CANDIDATES["mv"]}
    c = choose(lm, SkillsOptions(), candidates=cands)
    assert c.choice == "mv"
    assert "ds_stuck scored higher" in c.note and "iteration cap" in c.note
    top = c.scores.iloc[0]
    assert top["candidate"] == "ds_stuck" and not top["converged"] and not top["chosen"]


def test_the_registry_and_the_option_name_the_same_candidates():
    from typing import get_args

    from crowdflow.skills.types import AutoCandidate

    assert list(CANDIDATES) == list(get_args(AutoCandidate))


def test_auto_candidates_option_is_checked_and_restricts_the_choice():
    with pytest.raises(ValueError, match="unknown auto candidate"):
        SkillsOptions(auto_candidates=["kos"])
    data, _ = _lm("onecoin", 3, 600, 7, 15, "uniform", 1)
    res = fit_skills(data.labels, auto_candidates=["mv", "ds"])
    assert set(pd.DataFrame(res.metadata["auto"]["candidates"])["candidate"]) == {"mv", "ds"}
    assert res.metadata["auto_choice"] in ("mv", "ds")


def test_the_report_names_the_choice_every_score_and_a_capped_fit():
    """The manifest's fit.auto record (what flows/skills.py writes) becomes the report's "Model chosen by the data";
    fit_status not_converged becomes "Fit stopped at its iteration cap"."""
    import json

    from crowdflow.report.skills import skills_actions

    data, _ = _lm("onecoin", 3, 600, 7, 15, "uniform", 1)
    res = fit_skills(data.labels, ds_max_iter=2)
    fit = json.loads(json.dumps({k: res.metadata[k] for k in ("auto", "auto_choice", "fit_status", "iterations")}))
    fit["method"] = res.metadata["method"]
    actions = {a.id: a for a in skills_actions({}, {"method": "auto", "fit": fit})}
    chosen = actions["act-auto-choice"]
    assert res.metadata["auto_choice"] in chosen.text
    assert chosen.table is not None and set(chosen.table["candidate"]) == set(DEFAULT_CANDIDATES)
    assert "iteration cap" in chosen.text  # ds_max_iter=2: the DS candidates did not converge, and it says so
    if res.metadata["fit_status"] == "not_converged":
        assert "act-not-converged" in actions
    capped = {a.id for a in skills_actions({}, {"method": "ds", "fit": {"fit_status": "not_converged"}})}
    assert "act-not-converged" in capped


def test_ebcc_is_a_candidate_when_named() -> None:
    """EBCC enters the held-out comparison when auto_candidates names it, and is scored like the others."""
    from crowdflow.labels import encode_labels

    assert "ebcc" in CANDIDATES and "ebcc" not in DEFAULT_CANDIDATES
    n_w = 12
    wi, ti = synth.random_assignment(n_w, 150, 5, seed=3)
    data = synth.one_coin_labels(np.linspace(0.55, 0.9, n_w), wi, ti, 3, seed=3)
    lm = encode_labels(data.labels)
    o = SkillsOptions(method="auto", auto_candidates=["ds", "ebcc"], auto_folds=3, ebcc_restarts=1, seed=0)
    picked = choose(lm, o)
    assert set(picked.scores["candidate"]) == {"ds", "ebcc"}
    assert np.isfinite(picked.scores["mean_log_lik"]).all()


def test_clustered_standard_error_counts_a_task_once_not_per_label():
    """One value per task: the i.i.d. std/√n. A task's value repeated r times (labels that share a posterior):
    the same standard error as one value per task, where the i.i.d. formula would shrink it by about √r."""
    from crowdflow.skills.auto import clustered_std_error

    rng = np.random.default_rng(5)
    for g in (2, 3, 10, 200):
        v = rng.normal(size=g)
        iid = v.std(ddof=1) / np.sqrt(g)
        assert clustered_std_error(v, np.arange(g)) == pytest.approx(iid, rel=1e-12)
        for r in (2, 5):
            rep = np.repeat(v, r)
            assert clustered_std_error(rep, np.repeat(np.arange(g), r)) == pytest.approx(iid, rel=1e-12)
            assert rep.std(ddof=1) / np.sqrt(rep.size) < 0.8 * iid  # what the i.i.d. formula would have said
    assert np.isnan(clustered_std_error(np.ones(4), np.zeros(4)))
