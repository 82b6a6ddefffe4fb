"""Same arguments, same numbers: crowdflow's MajorityVote, DawidSkene and OneCoinDawidSkene vs installed Crowd-Kit.

Each case is drawn from a generator of labelling families (tasks, workers, 2-6 classes, answers per task, integer or
text labels, repeated answers, near-ties), run through both libraries with the SAME arguments (Crowd-Kit's names and
defaults only), and compared to 1e-6: labels, probabilities, priors, error tables, loss history, one-coin skills.
Gold answers (``fit(data, true_labels)``), both ``initial_error_strategy`` values, ``n_iter`` 0/1/5/100 and
``tol`` 0 are drawn too; the bundled sets (crowdflow/data) are run at the defaults and with 10 % gold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf

ck = pytest.importorskip("crowdkit.aggregation", reason="Crowd-Kit is a test-only peer")

ATOL = 1e-6
DATA = Path(cf.__file__).parent / "data"


def _family(seed: int) -> pd.DataFrame:
    """One labelling: T tasks, W workers of random accuracy, M classes, r answers per task (some repeated)."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 7))
    n_tasks, n_workers = int(rng.integers(4, 60)), int(rng.integers(2, 12))
    r = int(rng.integers(1, n_workers + 1))
    acc = rng.uniform(1.0 / m, 0.95, n_workers)
    truth = rng.integers(0, m, n_tasks)
    rows = []
    for t in range(n_tasks):
        for w in rng.choice(n_workers, size=r, replace=False):
            right = rng.random() < acc[w]
            label = truth[t] if right else int(rng.integers(0, m))
            rows.append((t, w, label))
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    if seed % 5 == 0 and len(df) > 2:  # repeated answers: Crowd-Kit counts each
        df = pd.concat([df, df.sample(2, random_state=seed)], ignore_index=True)
    df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    df["task"] = df["task"].map(lambda t: f"t{t:03d}")
    df["worker"] = df["worker"].map(lambda w: f"w{w}")
    if seed % 2:
        df["label"] = df["label"].map(lambda v: f"c{v}")
    return df


def _gold(df: pd.DataFrame, share: float, seed: int) -> pd.Series | None:
    if not share:
        return None
    tasks = pd.unique(df["task"])
    rng = np.random.default_rng(seed + 1)
    chosen = rng.choice(tasks, size=max(1, int(share * len(tasks))), replace=False)
    labels = pd.unique(df["label"])
    return pd.Series([labels[rng.integers(len(labels))] for _ in chosen], index=pd.Index(chosen, name="task"))


def _initial(df: pd.DataFrame, strategy: str, seed: int) -> pd.DataFrame:
    """Error counts per (worker, observed label), a column per true label: every worker (assign) or a few (addition)."""
    rng = np.random.default_rng(seed + 2)
    labels = list(pd.unique(df["label"]))
    workers = list(pd.unique(df["worker"]))
    if strategy == "addition":
        workers = workers[: max(1, len(workers) // 2)]
    index = pd.MultiIndex.from_product([workers, labels], names=["worker", "label"])
    return pd.DataFrame(rng.integers(2, 20, size=(len(index), len(labels))), index=index, columns=labels)


def _close_labels(ours: pd.Series, theirs: pd.Series, probas: pd.DataFrame) -> None:
    """Labels equal on every task whose top two probabilities differ by more than 1e-9 (else a floating tie)."""
    top = np.sort(probas.to_numpy(), axis=1)
    clear = (top[:, -1] - top[:, -2] > 1e-9) if top.shape[1] > 1 else np.ones(len(top), dtype=bool)
    a, b = ours.loc[probas.index], theirs.loc[probas.index]
    assert (a.to_numpy()[clear] == b.to_numpy()[clear]).all()


def _compare(ours: Any, theirs: Any, what: str) -> None:
    assert set(ours.probas_.index) == set(theirs.probas_.index), what
    p_ours = ours.probas_.loc[theirs.probas_.index, list(theirs.probas_.columns)]
    assert np.abs(p_ours.to_numpy() - theirs.probas_.to_numpy()).max() <= ATOL, what
    _close_labels(ours.labels_, theirs.labels_, theirs.probas_)
    if hasattr(theirs, "priors_"):
        pd.testing.assert_series_equal(
            ours.priors_.loc[theirs.priors_.index], theirs.priors_, check_exact=False, rtol=0, atol=ATOL, obj=what
        )
        e_theirs = theirs.errors_
        e_ours = ours.errors_.loc[e_theirs.index, list(e_theirs.columns)]
        assert np.abs(e_ours.to_numpy() - e_theirs.to_numpy()).max() <= ATOL, what
        np.testing.assert_allclose(ours.loss_history_, theirs.loss_history_, rtol=0, atol=ATOL, err_msg=what)
    if isinstance(theirs, (ck.OneCoinDawidSkene, ck.MajorityVote)):
        skills = ours.skills_.loc[theirs.skills_.index]
        np.testing.assert_allclose(skills.to_numpy(), theirs.skills_.to_numpy(), rtol=0, atol=ATOL, err_msg=what)


CASES = [
    (seed, n_iter, tol, gold)
    for seed, (n_iter, tol, gold) in enumerate(
        [(n, t, g) for n in (0, 1, 5, 100) for t in (1e-5, 0.0) for g in (0.0, 0.1, 0.3)]
    )
]


@pytest.mark.parametrize(("seed", "n_iter", "tol", "gold"), CASES)
def test_dawid_skene_family(seed: int, n_iter: int, tol: float, gold: float) -> None:
    df = _family(seed)
    true_labels = _gold(df, gold, seed)
    theirs = ck.DawidSkene(n_iter=n_iter, tol=tol).fit(df, true_labels)
    ours = cf.DawidSkene(n_iter=n_iter, tol=tol).fit(df, true_labels)
    _compare(ours, theirs, f"DS seed={seed} n_iter={n_iter} tol={tol} gold={gold}")
    if true_labels is not None:  # pinned: a gold task's posterior is its answer
        known = true_labels[true_labels.index.isin(df["task"])]
        assert (ours.labels_.loc[known.index] == known).all()


@pytest.mark.parametrize("strategy", ["assign", "addition"])
@pytest.mark.parametrize(("seed", "n_iter"), [(s, n) for s, n in zip(range(40, 48), (0, 1, 5, 100) * 2, strict=True)])
def test_dawid_skene_initial_error_family(seed: int, n_iter: int, strategy: str) -> None:
    df = _family(seed)
    init = _initial(df, strategy, seed)
    gold = _gold(df, 0.1 if seed % 2 else 0.0, seed)
    theirs = ck.DawidSkene(n_iter=n_iter, initial_error_strategy=strategy).fit(df, gold, initial_error=init)
    ours = cf.DawidSkene(n_iter=n_iter, initial_error_strategy=strategy).fit(df, gold, initial_error=init)
    _compare(ours, theirs, f"DS {strategy} seed={seed} n_iter={n_iter}")


@pytest.mark.parametrize(("seed", "n_iter", "tol"), [(60 + i, n, t) for i, (n, t) in enumerate(
    [(n, t) for n in (0, 1, 5, 100) for t in (1e-5, 0.0)] * 2)])  # fmt: skip
def test_one_coin_family(seed: int, n_iter: int, tol: float) -> None:
    df = _family(seed)
    theirs = ck.OneCoinDawidSkene(n_iter=n_iter, tol=tol).fit(df)
    ours = cf.OneCoinDawidSkene(n_iter=n_iter, tol=tol).fit(df)
    _compare(ours, theirs, f"one-coin seed={seed} n_iter={n_iter} tol={tol}")


@pytest.mark.parametrize("seed", range(80, 100))
def test_majority_vote_family(seed: int) -> None:
    """Ties included (r = 1 or 2 answers per task are common in the family): Crowd-Kit's first-column rule."""
    df = _family(seed)
    theirs = ck.MajorityVote().fit(df)
    ours = cf.MajorityVote().fit(df)
    pd.testing.assert_series_equal(ours.labels_, theirs.labels_)
    _compare(ours, theirs, f"MV seed={seed}")
    skills = pd.Series(
        np.random.default_rng(seed).uniform(0.1, 1.0, df["worker"].nunique()), index=pd.unique(df["worker"])
    )
    pd.testing.assert_series_equal(cf.MajorityVote().fit_predict(df, skills), ck.MajorityVote().fit_predict(df, skills))


@pytest.mark.parametrize("kind", ["MajorityVote", "DawidSkene", "OneCoinDawidSkene"])
def test_empty_input_gives_empty_results(kind: str) -> None:
    empty = pd.DataFrame({"task": [], "worker": [], "label": []})
    ours, theirs = getattr(cf, kind)().fit(empty), getattr(ck, kind)().fit(empty)
    for attr in ("labels_", "probas_"):
        assert getattr(ours, attr).empty and getattr(theirs, attr).empty
        assert type(getattr(ours, attr)) is type(getattr(theirs, attr))


def test_errors_are_the_builtins_a_crowd_kit_user_catches() -> None:
    df = _family(3)
    for kind in ("MajorityVote", "DawidSkene", "OneCoinDawidSkene"):
        for col in ("task", "worker", "label"):
            for lib in (ck, cf):
                with pytest.raises(KeyError):
                    getattr(lib, kind)().fit(df.drop(columns=col))
    skills = pd.Series(1.0, index=pd.unique(df["worker"])[1:])
    for lib in (ck, cf):
        with pytest.raises(ValueError):
            lib.MajorityVote().fit(df, skills)
    with pytest.raises(cf.InputError) as err:  # and still the library's error (CLI exit 2)
        cf.DawidSkene().fit(df.drop(columns="label"))
    assert err.value.exit_code == 2 and not str(err.value).startswith("'")


@pytest.mark.parametrize("name", ["snow_rte", "snow_temp", "snow_wsd"])
def test_bundled_sets(name: str) -> None:
    df, truth = pd.read_csv(DATA / name / "labels.csv"), pd.read_csv(DATA / name / "truth.csv")
    gold = truth.set_index("task")["label"]
    gold = gold.iloc[: len(gold) // 10]
    for kind in ("DawidSkene", "OneCoinDawidSkene"):
        _compare(getattr(cf, kind)().fit(df), getattr(ck, kind)().fit(df), f"{kind} {name}")
    _compare(cf.DawidSkene().fit(df, gold), ck.DawidSkene().fit(df, gold), f"DS gold {name}")
    _compare(cf.MajorityVote().fit(df), ck.MajorityVote().fit(df), f"MV {name}")
