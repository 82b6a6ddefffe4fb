"""``method: auto`` with gold answers (issue #35, the gold rule: crowdflow/skills/gold_pick.py, docs/methods/skills.md
§7.4 "With gold answers"): the gold overrules the held-out likelihood pick only on a significant sign test, and the
reported accuracy is cross-fitted over the whole procedure, the choice included."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf
import crowdflow.skills.fit as fit_module
from crowdflow.labels import encode_labels
from crowdflow.skills import SkillsOptions, fit_skills, prediction_error
from crowdflow.skills.gold import cross_fit, fold_ids, gold_codes
from crowdflow.skills.gold_pick import gold_choose, sign_test
from crowdflow.synth import skills as synth
from crowdflow.synth.skills import one_coin_labels, random_assignment


def clique_crowd(seed: int, n_tasks: int = 400) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A crowd whose strongest signal is not the gold's question (like ducks_welinder): 12 independent workers
    (accuracy 0.7, 7 per task) and a clique of 4 who give one shared answer per task, right with probability 0.55
    (they answer another question, barely related to the gold's). The clique agrees with itself perfectly, so every
    latent-class model (DS, one-coin) follows it and is 0.44-0.48 wrong on the truth; majority vote lets the
    independent workers outvote it (0.29-0.36)."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 2, n_tasks)
    rows = []
    for t in range(n_tasks):
        for w in rng.choice(12, 7, replace=False):
            rows.append((f"t{t}", f"w{w}", str(truth[t] if rng.random() < 0.7 else 1 - truth[t])))
        shared = truth[t] if rng.random() < 0.55 else 1 - truth[t]
        rows += [(f"t{t}", f"c{c}", str(shared)) for c in range(4)]
    labels = pd.DataFrame(rows, columns=["task", "worker", "label"])
    gold = pd.DataFrame({"task": [f"t{t}" for t in range(n_tasks)], "label": truth.astype(str)})
    return labels, gold


def one_coin_crowd(seed: int, n_classes: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A crowd drawn from the one-coin model (skills uniform on [0, 0.8], 15 workers, 5 labels a task)."""
    worker, task = random_assignment(15, 300, 5, seed=seed)
    skills = np.random.default_rng(seed).uniform(0.0, 0.8, 15)
    gen = one_coin_labels(skills, worker, task, n_classes=n_classes, seed=seed)
    return gen.labels, gen.truth


def confusion_crowd(m: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A crowd drawn from the full Dawid–Skene model (structured, asymmetric confusions; 15 workers, 7 a task)."""
    data = synth.crowd_labels(synth.CrowdConfig(m, 600, 7, 15, "confusion", 0.0, 0.0, "uniform", "uniform", seed))
    return data.labels, data.truth


def _errors(labels: pd.DataFrame, truth: pd.DataFrame) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {
            name: prediction_error(fit_skills(labels, method=m, **kw).consensus, truth)
            for name, m, kw in [("ds", "ds", {}), ("ds_classic", "ds", {"ds_prior": 0.0}), ("onecoin_ds", "onecoin_ds", {}), ("mv", "mv", {})]
        }  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gold_picks_majority_vote_where_the_crowd_answers_another_question(seed: int) -> None:
    labels, truth = clique_crowd(seed)
    err = _errors(labels, truth)
    assert err["mv"] < min(err[c] for c in ("ds", "ds_classic", "onecoin_ds")) - 0.03  # the premise, measured
    gold = truth.sample(frac=0.3, random_state=seed)  # honeypots: 120 of the 400 tasks
    fit = cf.skills(labels, gold, gold_in_fit=True)
    meta = fit.result.metadata
    assert meta["auto"]["choice"] != "mv"  # held-out likelihood alone misses it, as on ducks_welinder
    assert meta["auto_choice"] == "mv" and meta["auto_gold"]["rule"] == "gold"
    assert meta["auto_gold"]["likelihood_choice"] == meta["auto"]["choice"]
    assert not meta["auto_gold"]["gold_pinned_in_refit"]  # mv takes no gold
    # every fold's choice (made without that fold's gold) is mv too, and the honest score is mv's
    assert meta["gold_fold_choices"] == ["mv"] * 5
    assert fit.metrics["accuracy_scoring"].startswith("cross-fitted: 5 folds")
    assert fit.metrics["error"] == pytest.approx(prediction_error(fit.result.gold_scored, gold))
    # on the tasks without gold the run's labels are better than the likelihood pick's
    rest = truth[~truth["task"].isin(gold["task"])]
    assert prediction_error(fit.consensus, rest) <= err[meta["auto"]["choice"]] - 0.02


@pytest.mark.parametrize(("m", "seed"), [(2, 1), (3, 1), (3, 2), (4, 1)])
def test_gold_keeps_dawid_skene_where_it_is_right(m: int, seed: int) -> None:
    labels, truth = confusion_crowd(m, seed)
    err = _errors(labels, truth)
    assert min(err["ds"], err["ds_classic"]) < err["mv"]  # the premise
    gold = truth.sample(frac=0.3, random_state=seed)
    fit = cf.skills(labels, gold, gold_in_fit=True)
    meta = fit.result.metadata
    assert meta["auto"]["choice"] in ("ds", "ds_classic")
    assert meta["auto_gold"]["rule"] == "likelihood" and meta["auto_choice"] == meta["auto"]["choice"]
    assert meta["auto_gold"]["gold_pinned_in_refit"]
    pinned = fit.consensus.set_index("task")["label"].loc[gold["task"].astype(str)]
    assert (pinned.to_numpy() == gold["label"].astype(str).to_numpy()).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tiny_gold_never_overrules_the_likelihood_pick(seed: int) -> None:
    """Five gold tasks: even all five won by majority vote give p = 2⁻⁵ = 0.031 > 0.05/3, so the pick stays."""
    labels, truth = clique_crowd(seed)
    gold = truth.sample(n=5, random_state=seed)
    fit = cf.skills(labels, gold, gold_in_fit=True)
    meta = fit.result.metadata
    assert meta["auto_gold"]["rule"] == "likelihood" and meta["auto_choice"] == meta["auto"]["choice"]
    assert sign_test(5, 0) == pytest.approx(1 / 32) and sign_test(5, 0) > 0.05 / 3
    assert sign_test(6, 0) < 0.05 / 3  # six discordant tasks, all one way, are the least that can switch


def test_the_sign_test_and_its_guard() -> None:
    """The rule on hand-made labels: the best on gold switches only past the Bonferroni bound, never a non-converged
    candidate, and ties in gold accuracy go to the better held-out score."""
    gold = np.array([0] * 30 + [-1] * 10)
    lik = np.zeros(40, dtype=np.int64)
    lik[:10] = 1  # the likelihood pick: 10 of 30 wrong
    good = np.zeros(40, dtype=np.int64)
    good[:2] = 1  # 8 wins, 0 losses: p = 2⁻⁸
    meh = lik.copy()
    meh[:3] = 0  # 3 wins: p = 1/8
    c = gold_choose({"ds": lik, "mv": good, "onecoin_ds": meh}, gold, "ds", 0.05)
    assert c.choice == "mv" and c.rule == "gold" and c.threshold == pytest.approx(0.025)
    row = c.scores.set_index("candidate").loc["mv"]
    assert (row["wins"], row["losses"], row["n_gold"], row["n_right"]) == (8, 0, 30, 28)
    assert row["p_value"] == pytest.approx(2.0**-8)
    capped = gold_choose({"ds": lik, "mv": good, "onecoin_ds": meh}, gold, "ds", 0.05, {"mv": False})
    assert capped.choice == "ds" and "iteration cap" in capped.note
    assert gold_choose({"ds": lik, "mv": good}, gold, "ds", 0.0).choice == "ds"  # level 0: never
    assert gold_choose({"ds": lik, "mv": good}, np.full(40, -1), "ds", 0.05).choice == "ds"  # no gold
    tie = gold_choose(
        {"ds": lik, "mv": good, "onecoin_ds": good.copy()}, gold, "ds", 0.05, order=["onecoin_ds", "ds", "mv"]
    )
    assert tie.choice == "onecoin_ds"


@pytest.mark.parametrize("crowd", ["clique", "one_coin"])
def test_no_gold_task_is_scored_by_a_choice_or_fit_that_saw_its_answer(
    crowd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every gold answer the gold rule and the fits receive is recorded: the gold-free part receives none, and in the
    run for fold k neither the choice nor the refit receives any answer of fold k, while each gets all the others.
    (The clique crowd's runs choose mv, whose refit takes no gold; the one-coin crowd's choose a DS model, which
    pins it.)"""
    labels, truth = clique_crowd(0, n_tasks=200) if crowd == "clique" else one_coin_crowd(0)
    gold = truth.sample(frac=0.5, random_state=1)
    lm = encode_labels(labels)
    o = SkillsOptions(gold_in_fit=True, gold_folds=4, seed=2)
    choices: list[np.ndarray] = []
    fits: list[tuple[str, np.ndarray | None]] = []
    real_choose, real_fit = fit_module.gold_choose, fit_module.fit_skills

    def watched_choose(labels_: Any, g: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        choices.append(g.copy())
        return real_choose(labels_, g, *args, **kwargs)

    def watched_fit(lm_: Any, options: Any = None, **kwargs: Any) -> Any:
        g = kwargs.get("gold")
        fits.append((str(getattr(options, "method", "")), None if g is None else g.copy()))
        return real_fit(lm_, options, **kwargs)

    monkeypatch.setattr(fit_module, "gold_choose", watched_choose)
    monkeypatch.setattr(fit_module, "fit_skills", watched_fit)
    res = cross_fit(lm, o, gold)
    codes, has = gold_codes(lm, gold)
    folds = fold_ids(has, 4, 2)

    def shown_right(run: int, g: np.ndarray) -> None:  # run 0: every answer; run k + 1: all but fold k's
        held = folds == run - 1
        assert run == 0 or (held.any() and (g[held] == -1).all())
        np.testing.assert_array_equal(g[~held], codes[~held])

    assert len(choices) == 5  # the run's choice, then one per fold
    for run, g in enumerate(choices):
        shown_right(run, g)
    assert [m for m, g in fits if g is None] == ["ds", "ds", "onecoin_ds", "mv"]  # gold-free, once for all runs
    runs = [res.metadata["auto_choice"], *res.metadata["gold_fold_choices"]]
    pinned = [run for run, c in enumerate(runs) if c != "mv"]
    with_gold = [g for _, g in fits if g is not None]
    assert len(with_gold) == len(pinned) and (len(pinned) == 0) == (crowd == "clique")
    for run, g in zip(pinned, with_gold, strict=True):
        shown_right(run, g)
    assert res.gold_scored is not None and set(res.gold_scored["task"]) == set(gold["task"].astype(str))
    for k in range(4):  # the label scored for fold k's tasks comes from the run that chose without them
        scored = res.gold_scored[res.gold_scored["fold"] == k]
        assert set(scored["task"]) == set(np.asarray(lm.tasks)[folds == k])
    assert res.metadata["accuracy_scoring"].startswith("cross-fitted: 4 folds")


def test_auto_takes_gold_and_the_refusals_name_it() -> None:
    assert SkillsOptions(method="auto", gold_in_fit=True).gold_in_fit
    with pytest.raises(ValueError, match="auto"):
        SkillsOptions(method="mv", gold_in_fit=True)
    with pytest.raises(ValueError, match="auto_gold_level"):
        SkillsOptions(auto_gold_level=0.9)


def test_the_report_says_which_rule_chose_and_why() -> None:
    import json

    from crowdflow.report.skills import skills_actions

    labels, truth = clique_crowd(1)
    res = cf.skills(labels, truth.sample(frac=0.3, random_state=1), gold_in_fit=True).result
    keys = ("auto", "auto_choice", "auto_gold", "gold_fold_choices", "fit_status", "method")
    fit = json.loads(json.dumps({k: res.metadata[k] for k in keys}))
    actions = {a.id: a for a in skills_actions({}, {"method": "auto", "fit": fit})}
    chosen = actions["act-auto-gold"]
    assert "chose mv by the gold answers" in chosen.text and "sign test" in chosen.text
    assert chosen.table is not None and set(chosen.table["candidate"]) == {"ds", "ds_classic", "onecoin_ds", "mv"}
    assert "act-auto-choice" in actions  # the likelihood scores are still shown


def test_auto_gold_cross_fit_reports_one_rise_and_progress_changes_nothing() -> None:
    """The gold-free part, then the K + 1 runs: one strictly increasing rise ending once at 1.0; the same labels,
    choices and scored labels as without a callback."""
    labels, truth = one_coin_crowd(3)
    lm = encode_labels(labels)
    o = SkillsOptions(gold_in_fit=True, gold_folds=3)
    fractions: list[float] = []
    fit = cross_fit(lm, o, truth.iloc[::2], progress=fractions.append)
    assert fractions[-1] == 1.0 and fractions.count(1.0) == 1
    assert all(b > a for a, b in itertools.pairwise(fractions)) and fractions[0] >= 0
    bare = cross_fit(lm, o, truth.iloc[::2])
    pd.testing.assert_frame_equal(fit.consensus, bare.consensus, check_exact=True)
    assert fit.gold_scored is not None and bare.gold_scored is not None
    pd.testing.assert_frame_equal(fit.gold_scored, bare.gold_scored, check_exact=True)
    assert fit.metadata["auto_gold"] == bare.metadata["auto_gold"]
    assert fit.metadata["gold_fold_choices"] == bare.metadata["gold_fold_choices"]
