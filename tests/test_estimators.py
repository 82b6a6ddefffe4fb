"""The Crowd-Kit–style estimators against Crowd-Kit 1.4.2 itself, on the same DataFrames (#23 part 1).

Data: the bundled Snow et al. RTE (integer tasks and labels) and WSD (text tasks, 3 classes) sets, and a seeded
one-coin synthetic family (crowdflow.synth.skills) with 2, 3 and 5 classes, 2 or 3 answers per task (so many ties),
text labels and the same sets with integer tasks and labels.

What is compared, and how:

- **Layout, always**: every fitted attribute Crowd-Kit has (``labels_``, ``probas_``, ``skills_``, ``priors_``,
  ``errors_``) has the same shape, index (names, values, order), name, column order and dtypes.
- **MajorityVote**: equal values (labels, vote shares, skills) with ``tie_break="first"``, Crowd-Kit's rule (the
  tied label seen first in the data). The default ``tie_break="random"`` (the pipeline's seeded draw) differs only
  on tied tasks.
- **DawidSkene / OneCoinDawidSkene**: Crowd-Kit stops when its evidence lower bound grows by less than ``tol``
  (1e-5 by default, early); ours when no probability moves by more than ``tol``, and smooths counts by 0.01. Run
  the same EM to convergence on both sides (Crowd-Kit ``tol=-inf`` so it runs all ``n_iter`` iterations; ours
  ``smoothing=0, tol=1e-12``) and the labels are equal and the probabilities agree to 1e-4 (Crowd-Kit clips at
  1e-10), on the sets with 3 or more answers per task (with 2, EM reaches degenerate maxima: see CONVERGED_SETS).
  Excepted: a confusion-matrix row (worker, true label) on which the worker's tasks put no posterior mass
  is 0/0, undefined; Crowd-Kit fills it with its normalisation, ours with 0: those entries are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf
from crowdflow.contracts.errors import InputError
from crowdflow.synth.skills import one_coin_labels, random_assignment

DATA = Path(cf.__file__).parent / "data"


def _synthetic(n_classes: int, per_task: int, seed: int) -> pd.DataFrame:
    worker, task = random_assignment(12, 60, per_task, seed=seed)
    skills = np.random.default_rng(seed).uniform(0.1, 0.9, 12)
    return one_coin_labels(skills, worker, task, n_classes=n_classes, seed=seed).labels


def _datasets() -> Iterator[tuple[str, pd.DataFrame]]:
    for name in ("snow_rte", "snow_wsd"):
        yield name, pd.read_csv(DATA / name / "labels.csv")
    for m in (2, 3, 5):
        for per_task, seed in ((3, 0), (2, 1)):
            df = _synthetic(m, per_task, seed)
            yield f"M{m}-r{per_task}-text", df
            yield f"M{m}-r{per_task}-int", df.assign(label=df["label"].astype(int), task=df["task"].str[1:].astype(int))


DATASETS = dict(_datasets())
# Dawid-Skene values are compared where the model is identified: 3 or more answers per task. With 2 answers per task
# EM drives posteriors to exactly 0 or 1 and the likelihood has flat directions: Crowd-Kit (clipping at 1e-10) and
# ours (exact zeros) end at different maxima (labels agree on ~93% of tasks, even after 3000 iterations). The
# integer-labelled copies give the same numbers as the text ones (their layout is checked at the defaults).
CONVERGED_SETS = ("snow_rte", "snow_wsd", "M2-r3-text", "M3-r3-text", "M5-r3-text")
ATTRS = ("labels_", "probas_", "skills_", "priors_", "errors_")


def _assert_same_layout(ours: Any, theirs: Any, what: str) -> None:
    for attr in ATTRS:
        b = getattr(theirs, attr, None)
        if b is None:
            continue
        a = getattr(ours, attr)
        assert type(a) is type(b), (what, attr)
        assert a.shape == b.shape, (what, attr)
        pd.testing.assert_index_equal(a.index, b.index, obj=f"{what}.{attr}.index")
        if isinstance(b, pd.Series):
            assert a.name == b.name and a.dtype == b.dtype, (what, attr, a.name, a.dtype, b.name, b.dtype)
        else:
            pd.testing.assert_index_equal(a.columns, b.columns, obj=f"{what}.{attr}.columns")
            assert list(a.dtypes) == list(b.dtypes), (what, attr)


@pytest.fixture(scope="module")
def ck() -> Any:
    return pytest.importorskip(
        "crowdkit.aggregation", reason="Crowd-Kit is a test-only peer (pip install -c constraints.txt -e '.[test]')"
    )


@pytest.mark.parametrize("name", list(DATASETS))
def test_majority_vote_equals_crowd_kit(ck: Any, name: str) -> None:
    df = DATASETS[name]
    theirs = ck.MajorityVote().fit(df)
    ours = cf.MajorityVote(tie_break="first").fit(df)
    _assert_same_layout(ours, theirs, name)
    pd.testing.assert_series_equal(ours.labels_, theirs.labels_)
    pd.testing.assert_frame_equal(ours.probas_, theirs.probas_, check_exact=False, rtol=0, atol=1e-12)
    pd.testing.assert_series_equal(ours.skills_, theirs.skills_, check_exact=False, rtol=0, atol=1e-12)
    # the default (seeded draw among tied labels) differs from Crowd-Kit on tied tasks only
    default = cf.MajorityVote().fit(df)
    top = theirs.probas_.to_numpy()
    tied = (top == top.max(axis=1, keepdims=True)).sum(axis=1) > 1
    assert (default.labels_.to_numpy()[~tied] == theirs.labels_.to_numpy()[~tied]).all()
    _assert_same_layout(default, theirs, name)


def _settled_errors(data: pd.DataFrame, probas: pd.DataFrame, errors: pd.DataFrame) -> np.ndarray:
    """Mask of ``errors_`` entries that are defined: the worker's tasks put posterior mass on that true label."""
    post = probas.reindex(data["task"]).to_numpy()
    mass = pd.DataFrame(post, columns=probas.columns).groupby(data["worker"].to_numpy()).sum()
    workers = errors.index.get_level_values("worker")
    return mass.reindex(workers).to_numpy() > 1e-3


# Crowd-Kit's EM runs all 300 iterations (tol=-inf) in pandas: 8-19 s per set here. The default run compares values
# on one set per model, a synthetic one for DawidSkene and a real one for OneCoinDawidSkene, and the layout on two
# more; every other (model, set) runs with -m slow.
FAST_CONVERGED = {"DawidSkene": "M3-r3-text", "OneCoinDawidSkene": "snow_wsd"}


FAST_LAYOUT = ("M3-r2-text", "M3-r3-int")  # and the layout at the defaults on a 2-per-task set and integer labels


def _ds_params() -> list[Any]:
    return [
        pytest.param(
            kind, name, marks=[] if name in FAST_LAYOUT or FAST_CONVERGED[kind] == name else [pytest.mark.slow]
        )
        for kind in ("DawidSkene", "OneCoinDawidSkene")
        for name in DATASETS
    ]


@pytest.mark.parametrize(("kind", "name"), _ds_params())
def test_dawid_skene_agrees_with_crowd_kit(ck: Any, name: str, kind: str) -> None:
    df = DATASETS[name]
    n_iter = 300
    # defaults: same layout (values differ: Crowd-Kit stops early, we smooth)
    _assert_same_layout(getattr(cf, kind)().fit(df), getattr(ck, kind)().fit(df), name)
    if name not in CONVERGED_SETS:
        return
    # the same EM run to convergence on both sides
    theirs = getattr(ck, kind)(n_iter=n_iter, tol=-np.inf).fit(df)
    ours = getattr(cf, kind)(n_iter=n_iter, tol=-np.inf).fit(df)
    _assert_same_layout(ours, theirs, name)
    pd.testing.assert_series_equal(ours.labels_, theirs.labels_)
    pd.testing.assert_frame_equal(ours.probas_, theirs.probas_, check_exact=False, rtol=0, atol=1e-4)
    pd.testing.assert_series_equal(ours.priors_, theirs.priors_, check_exact=False, rtol=0, atol=1e-4)
    if kind == "OneCoinDawidSkene":
        pd.testing.assert_series_equal(ours.skills_, theirs.skills_, check_exact=False, rtol=0, atol=1e-4)
    ok = _settled_errors(df, theirs.probas_, theirs.errors_)
    diff = np.abs(ours.errors_.to_numpy() - theirs.errors_.to_numpy())
    assert diff[ok].max() <= 1e-4, (name, kind, diff[ok].max())


def test_rank_one_skills_has_the_same_layout_as_majority_vote() -> None:
    df = DATASETS["snow_rte"]
    mv = cf.MajorityVote().fit(df)
    r1 = cf.RankOneSkills().fit(df)
    _assert_same_layout(r1, mv, "snow_rte")
    assert r1.workers_.index.equals(r1.skills_.index) and "vote_weight" in r1.workers_.columns
    np.testing.assert_allclose(r1.probas_.sum(axis=1), 1.0, atol=1e-9)


def test_estimator_interface() -> None:
    df = DATASETS["M3-r3-text"]
    ds = cf.DawidSkene(n_iter=50)
    assert ds.get_params()["n_iter"] == 50 and "n_iter=50" in repr(ds)
    assert ds.set_params(tol=1e-3) is ds and ds.tol == 1e-3
    pd.testing.assert_series_equal(ds.fit_predict(df), ds.labels_)
    pd.testing.assert_frame_equal(ds.fit_predict_proba(df), ds.probas_)
    assert ds.n_iter_ <= 50 and len(ds.loss_history_) >= 1
    with pytest.raises(ValueError, match="unknown parameter"):
        ds.set_params(nope=1)
    with pytest.raises(InputError, match="'worker'") as missing:
        cf.MajorityVote().fit(df.drop(columns="worker"))
    # a Crowd-Kit user's except KeyError catches it; the message is a sentence (no KeyError quotes), names `data`
    assert isinstance(missing.value, KeyError) and str(missing.value).startswith(
        "data, column 'worker': missing required column 'worker'"
    )
    with pytest.raises(InputError, match="repeat a"):
        cf.MajorityVote(duplicates="error").fit(pd.concat([df, df.iloc[:1]]))
    assert len(cf.MajorityVote(duplicates="keep_first").fit_predict(pd.concat([df, df.iloc[:1]]))) == 60
    with pytest.raises(InputError, match="missing values"):
        cf.DawidSkene().fit(df.assign(label=df["label"].where(df.index > 0)))
    # a weighted vote with a worker the skills do not list: Crowd-Kit's on_missing_skill
    skills = pd.Series(1.0, index=df["worker"].unique()[1:])
    with pytest.raises(InputError, match="no skill") as no_skill:
        cf.MajorityVote().fit(df, skills)
    assert isinstance(no_skill.value, ValueError)  # what Crowd-Kit raises
    assert len(cf.MajorityVote(default_skill=0.5, on_missing_skill="value").fit_predict(df, skills)) == 60
