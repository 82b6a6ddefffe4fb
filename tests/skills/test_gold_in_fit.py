"""Known answers in the skills fit (issue #34 item 2): pinned gold, and a cross-fitted score that never uses a fold's
own gold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf
from crowdflow.labels import LabelMatrix, encode_labels
from crowdflow.skills import SkillsOptions, SkillsResult, fit_skills
from crowdflow.skills.gold import cross_fit, fold_ids, gold_codes
from crowdflow.synth.skills import one_coin_labels, random_assignment


def _data(seed: int, n_classes: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    worker, task = random_assignment(15, 120, 4, seed=seed)
    skills = np.random.default_rng(seed).uniform(0.0, 0.8, 15)
    gen = one_coin_labels(skills, worker, task, n_classes=n_classes, seed=seed)
    return gen.labels, gen.truth


@pytest.mark.parametrize("method", ["ds", "onecoin_ds"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fold_fits_never_receive_their_own_gold(method: str, seed: int) -> None:
    labels, truth = _data(seed)
    gold = truth.sample(frac=0.3, random_state=seed)
    lm = encode_labels(labels)
    o = SkillsOptions(method=method, gold_in_fit=True, gold_folds=4, seed=seed)
    received: list[np.ndarray] = []

    def watched(lm_: LabelMatrix, options: SkillsOptions, g: np.ndarray) -> SkillsResult:
        received.append(g.copy())
        return fit_skills(lm_, options, gold=g)

    res = cross_fit(lm, o, gold, fit=watched)
    codes, has = gold_codes(lm, gold)
    folds = fold_ids(has, 4, seed)
    assert len(received) == 5 and has.sum() == len(gold)
    np.testing.assert_array_equal(received[0], codes)  # the run's fit: every gold answer
    assert res.gold_scored is not None
    for k, g in enumerate(received[1:]):
        held = folds == k
        assert held.any() and (g[held] == -1).all()  # fold k's fit gets no gold of fold k ...
        np.testing.assert_array_equal(g[~held], codes[~held])  # ... and all the other gold
        scored = res.gold_scored[res.gold_scored["fold"] == k]
        assert set(scored["task"]) == set(np.asarray(lm.tasks)[held])
    assert res.metadata["gold_in_fit"] and res.metadata["gold_folds"] == 4
    # the run's own fit pins every gold task to its answer
    pinned = res.consensus.set_index("task")["label"].loc[gold["task"].astype(str)]
    assert (pinned.to_numpy() == gold["label"].astype(str).to_numpy()).all()


@pytest.mark.parametrize("method", ["ds", "onecoin_ds"])
def test_planted_wrong_gold_on_one_fold_is_not_scored_by_a_fit_that_saw_it(method: str) -> None:
    """Fold 0's gold is planted wrong. A fit that saw it would reproduce it (pinned: agreement 1); the cross-fitted
    labels of fold 0 come from the fit without fold 0's gold, so they follow the workers and disagree with it."""
    labels, truth = _data(7, n_classes=2)
    gold = truth.sample(frac=0.5, random_state=7).reset_index(drop=True)
    lm = encode_labels(labels)
    SkillsOptions(method=method, gold_in_fit=True, gold_folds=5, seed=3)
    _, has = gold_codes(lm, gold)
    fold0 = set(np.asarray(lm.tasks)[fold_ids(has, 5, 3) == 0])
    flip = gold["task"].astype(str).isin(fold0)
    planted = gold.assign(label=np.where(flip, (1 - gold["label"].astype(int)).astype(str), gold["label"].astype(str)))
    fit = cf.skills(labels, planted, method=method, gold_in_fit=True, gold_folds=5, seed=3)
    scored = fit.result.gold_scored
    assert scored is not None
    wrong = planted[flip].set_index(planted[flip]["task"].astype(str))["label"]
    on_fold0 = scored[scored["fold"] == 0].set_index("task")["label"].loc[wrong.index]
    agree = float((on_fold0.to_numpy() == wrong.to_numpy()).mean())
    in_sample = fit.tables["consensus"].set_index("task")["label"].loc[wrong.index]
    assert float((in_sample.to_numpy() == wrong.to_numpy()).mean()) == 1.0  # the leak the scoring must avoid
    assert agree < 0.25, agree
    assert fit.metrics["accuracy_scoring"].startswith("cross-fitted: 5 folds")
    # the accuracy is that of the cross-fitted labels against the (planted) gold
    merged = planted.astype(str).merge(scored.astype({"task": str}), on="task", suffixes=("_g", "_p"))
    assert fit.metrics["accuracy"] == pytest.approx(float((merged["label_g"] == merged["label_p"]).mean()))


def test_gold_in_fit_refused_where_it_cannot_run() -> None:
    with pytest.raises(ValueError, match=r"pgd .*agreement rates"):
        SkillsOptions(method="pgd", gold_in_fit=True)
    with pytest.raises(ValueError, match="majority vote"):
        SkillsOptions(method="mv", gold_in_fit=True)
    labels, _truth = _data(0)
    with pytest.raises(ValueError, match="pass them as truth"):
        cf.skills(labels, method="ds", gold_in_fit=True)
    with pytest.raises(ValueError, match="gold answers in the fit"):
        fit_skills(encode_labels(labels), SkillsOptions(method="mv"), gold=np.zeros(120, dtype=np.int64))
    with pytest.raises(ValueError, match="gold_folds"):
        SkillsOptions(method="ds", gold_in_fit=True, gold_folds=1)


def test_pinned_library_fit_reaches_crowd_kits_gold_fixed_point() -> None:
    """The pipeline's accelerated EM with gold (smoothing 0, prior 0) and Crowd-Kit's schedule run long (the
    estimator, equal to Crowd-Kit to 1e-6 in tests/test_estimators_parity.py) end at the same labels and posteriors
    (1e-4): the pin is the same model."""
    labels, truth = _data(5)
    gold = truth.sample(frac=0.2, random_state=5)
    lm = encode_labels(labels)
    codes, _ = gold_codes(lm, gold)
    ours = fit_skills(lm, SkillsOptions(method="ds", ds_prior=0, ds_smoothing=0, ds_tol=1e-12, ds_max_iter=5000),
                      gold=codes)  # fmt: skip
    theirs = cf.DawidSkene(n_iter=3000, tol=-np.inf).fit(labels, gold.set_index("task")["label"])
    probs = theirs.probas_.max(axis=1)
    mine = ours.consensus.set_index("task")
    clear = probs.index[np.sort(theirs.probas_.to_numpy(), axis=1)[:, -2] < probs.to_numpy() - 1e-3]
    assert (mine.loc[clear.astype(str), "label"].to_numpy() == theirs.labels_.loc[clear].astype(str).to_numpy()).all()
    np.testing.assert_allclose(mine.loc[probs.index.astype(str), "confidence"].to_numpy(), probs.to_numpy(), atol=1e-4)


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_pipeline_run_with_gold_in_fit_says_how_it_scored(tmp_path: Path, rte_dir: Path) -> None:
    from flows.cli import main

    gold = pd.read_csv(rte_dir / "truth.csv", dtype=str).sample(frac=0.1, random_state=0)
    gold.to_csv(tmp_path / "gold.csv", index=False)
    out = tmp_path / "out"
    args = ["skills", "--labels", str(rte_dir / "labels.csv"), "--truth", str(tmp_path / "gold.csv")]
    assert main([*args, "--method", "ds", "--gold-in-fit", "--gold-folds", "4", "--out", str(out)]) == 0
    (path,) = sorted(out.rglob("manifest.json"))
    man = json.loads(path.read_text())
    assert man["metrics"]["accuracy_scoring"].startswith("cross-fitted: 4 folds")
    assert man["fit"]["gold_in_fit"] is True and man["fit"]["n_gold_in_fit"] == 80
    assert man["metrics"]["n_gold"] == 80 and 0.8 <= man["metrics"]["accuracy"] <= 1.0
    assert "cross-fitted: 4 folds" in (path.parent / "report.html").read_text()
    # method auto (the default) with gold: the gold rule's record, each fold's choice, the report's section
    assert main([*args, "--gold-in-fit", "--gold-folds", "4", "--out", str(tmp_path / "auto")]) == 0
    (path,) = sorted((tmp_path / "auto").rglob("manifest.json"))
    man = json.loads(path.read_text())
    assert man["fit"]["auto_gold"]["rule"] in ("gold", "likelihood") and len(man["fit"]["gold_fold_choices"]) == 4
    assert man["fit"]["auto_choice"] == man["fit"]["auto_gold"]["choice"]
    assert (
        man["metrics"]["accuracy_scoring"].startswith("cross-fitted: 4 folds")
        and "model choice" in (man["metrics"]["accuracy_scoring"])
    )
    assert "Model chosen by the gold answers" in (path.parent / "report.html").read_text()
    assert main([*args, "--method", "pgd", "--gold-in-fit", "--out", str(tmp_path / "o2")]) == 2
    no_truth = ["skills", "--labels", str(rte_dir / "labels.csv"), "--method", "ds", "--gold-in-fit"]
    assert main([*no_truth, "--out", str(tmp_path / "o3")]) == 2 and not (tmp_path / "o3").exists()


def test_known_answers_in_the_fit_reach_its_cache_key() -> None:
    """With gold_in_fit the truth enters the fit, so other gold must give another cache key (without it, none)."""
    from crowdflow.spec import parse_spec
    from crowdflow.storage.fingerprints import fit_key
    from flows.pipeline import fit_data

    labels, truth = _data(4)
    lm = encode_labels(labels)
    other = truth.assign(label=truth["label"].where(truth.index > 0, "2" if truth["label"].iloc[0] != "2" else "1"))

    def key(gold_in_fit: bool, t: pd.DataFrame) -> str:
        raw = {
            "name": "g",
            "job": "skills",
            "labels": {"path": "l.csv"},
            "truth": {"path": "t.csv"},
            "output": {"dir": "o"},
        }
        spec = parse_spec({**raw, "skills": {"method": "ds", "gold_in_fit": gold_in_fit}})
        data, settings = fit_data(spec, {"truth": t}, lm)
        return fit_key("skills", data, spec.skills, ("local", None), **settings)  # type: ignore[attr-defined]

    assert key(True, truth) != key(True, other)
    assert key(False, truth) == key(False, other)
