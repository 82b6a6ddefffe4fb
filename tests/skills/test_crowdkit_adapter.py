"""Crowd-Kit's classification aggregators inside the skills job (issue #34 item 3; crowdflow/skills/crowdkit_adapter.py).

The consensus of ``fit_skills(method="crowdkit:<Name>")`` is the installed Crowd-Kit's answer on the same frame, on
a generated family (sizes, 2-4 classes, skill spreads) and on a bundled set; the per-worker numbers are the
aggregator's own, moved onto the skills table's scales by the stated formulas; the parameters are declared once
with Crowd-Kit's names and defaults and refused with their name outside their ranges; without crowd-kit a spec
naming one fails at validation, naming the extra.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import attr
import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from crowdflow.contracts.errors import InputError, SpecError
from crowdflow.labels import encode_labels
from crowdflow.skills import SkillsOptions, fit_skills, prepare_labels
from crowdflow.skills.crowdkit_adapter import AGGREGATORS, fit_crowdkit, labels_frame
from crowdflow.spec import parse_spec
from crowdflow.synth import skills as synth

ck = pytest.importorskip("crowdkit.aggregation")

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"

# small iteration counts keep GLAD, MACE and ZeroBasedSkill to a second on these sizes
FAST: dict[str, dict[str, Any]] = {
    "GLAD": {"n_iter": 5},
    "MACE": {"n_restarts": 2, "n_iter": 10},
    "ZeroBasedSkill": {"n_iter": 15},
    "MMSR": {"n_iter": 200},
}


def canonical_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df``'s rows in the order every skills fit uses (sorted by task, worker: the outputs never depend on the
    input's row order, docs/methods/skills.md §1.3): the frame the adapter hands to Crowd-Kit. Its rows are
    exactly ``df``'s."""
    frame = labels_frame(prepare_labels(df)[0])
    key = ["task", "worker", "label"]
    pd.testing.assert_frame_equal(
        frame.sort_values(key).reset_index(drop=True), df[key].astype(str).sort_values(key).reset_index(drop=True)
    )
    return frame


def crowdkit_reference(name: str, df: pd.DataFrame, params: dict[str, Any]) -> tuple[pd.Series, Any]:
    """Crowd-Kit's labels for ``df`` (in the fits' row order) and the fitted aggregator. Wawa and ZeroBasedSkill:
    their ``predict`` body (``MajorityVote().fit(df, skills=skills_)``), because their ``predict`` calls
    scikit-learn's ``check_is_fitted``, which the installed scikit-learn refuses for them
    (:func:`test_wawa_predict_is_broken_upstream`)."""
    df = canonical_frame(df)
    agg = getattr(ck, name)(**params)
    if name in ("Wawa", "ZeroBasedSkill"):
        return ck.MajorityVote().fit(df, skills=agg.fit(df).skills_).labels_, agg
    return agg.fit_predict(df), agg


def _family() -> list[tuple[str, pd.DataFrame]]:
    out = []
    for seed, (w, t, k, m) in enumerate([(8, 40, 3, 2), (12, 60, 4, 3), (15, 50, 5, 4), (10, 80, 3, 2)]):
        rng = np.random.default_rng(seed)
        skills = rng.uniform(0.05, 0.9, w)
        skills[: max(1, w // 5)] = rng.uniform(-0.2, 0.1, max(1, w // 5))  # a few spammers and adversaries
        data = synth.one_coin_labels(skills, *synth.random_assignment(w, t, k, seed=seed), m, seed=seed)
        df = data.labels[["task", "worker", "label"]].astype(str).reset_index(drop=True)
        out.append((f"W{w}-T{t}-k{k}-M{m}", df))
    return out


FAMILY = _family()


def test_every_crowdkit_classification_aggregator_is_offered_with_its_own_parameters() -> None:
    """The names are Crowd-Kit's classification aggregators (GoldMajorityVote, fitted on gold, excepted), and each
    declared parameter is one of the class's constructor fields with Crowd-Kit's default: a crowd-kit upgrade
    that renames or re-defaults one fails here."""
    import crowdkit.aggregation.classification as cls_mod

    assert set(AGGREGATORS) == set(cls_mod.__all__) - {"GoldMajorityVote"}
    assert set(SkillsOptions.model_json_schema()["properties"]["method"]["enum"]) >= {
        f"crowdkit:{n}" for n in AGGREGATORS
    }
    for name, agg in AGGREGATORS.items():
        cls = getattr(ck, name)
        if attr.has(cls):
            fields = {a.alias or a.name.lstrip("_"): a.default for a in attr.fields(cls) if a.init}
        else:
            fields = {p: v.default for p, v in inspect.signature(cls).parameters.items()}
        for param, info in agg.params.model_fields.items():
            assert param in fields, (name, param)
            default = fields[param]
            assert info.default == default, (name, param, info.default, default)


#: Crowd-Kit's slowest aggregators on the family (GLAD's gradient steps, OneCoinDawidSkene's loops: 10-17 s each on
#: 2 cores) run in the slow tier; the other seven keep the adapter's every-aggregator check in the default run.
SLOW_FAMILY = {"GLAD", "OneCoinDawidSkene"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_FAMILY else []) for n in sorted(AGGREGATORS)]
)
def test_consensus_is_crowdkits_on_a_generated_family(name: str) -> None:
    """Every task's label equals Crowd-Kit's on the same frame, over 4 shapes (2-4 classes, 8-15 workers, spammers);
    confidence is Crowd-Kit's probability of that label (MMSR: its weighted vote share)."""
    params = FAST.get(name, {})
    worst = 1.0
    for shape, df in FAMILY:
        m = df["label"].nunique()
        if name == "KOS" and m != 2:
            with pytest.raises(InputError, match="two classes"):
                fit_skills(df, method=f"crowdkit:{name}", crowdkit_params=params)
            continue
        result = fit_skills(df, method=f"crowdkit:{name}", crowdkit_params=params)
        ref, agg = crowdkit_reference(name, df, params)
        cons = result.consensus.set_index("task")
        ref = ref.reindex(cons.index).astype(str)
        agree = float((cons["label"] == ref).mean())
        worst = min(worst, agree)
        assert agree == 1.0, (shape, agree)
        probas = getattr(agg, "probas_", None) if name != "MMSR" else agg.scores_
        if name in ("Wawa", "ZeroBasedSkill"):
            probas = ck.MajorityVote().fit(canonical_frame(df), skills=agg.skills_).probas_
        if probas is None:  # KOS
            assert (
                cons["confidence"].isna().all() and cons["missing_reason"].str.contains("no label probabilities").all()
            )
        else:
            probas = probas.copy()
            probas.columns = probas.columns.astype(str)
            want = np.array([probas.loc[t, lab] for t, lab in zip(cons.index, cons["label"], strict=True)])
            # MMSR's vote shares leave [0, 1] when a worker's weight is negative: missing, with the reason
            outside = (want < 0) | (want > 1)
            assert cons["confidence"].isna().to_numpy().tolist() == outside.tolist()
            if outside.any():
                assert cons.loc[outside, "missing_reason"].str.contains("no probability in").all()
            got = cons["confidence"].to_numpy()[~outside]
            np.testing.assert_allclose(got, want[~outside], rtol=0, atol=1e-6)  # GLAD's optimiser: 4e-9 run to run
        assert result.metadata["method"] == f"crowdkit:{name}" and result.metadata["crowdkit_method"] == name
    assert worst == 1.0


def test_worker_numbers_are_the_aggregators_own_on_the_tables_scales() -> None:
    """One-coin skill s = (M p - 1)/(M - 1) from each aggregator's probability of a right answer p: Wawa's and
    OneCoinDawidSkene's skills_, MMSR's from its log-odds weights w (p = e^w / (M - 1 + e^w)), Dawid-Skene's from
    errors_ and priors_; GLAD's alpha and MACE's competence as they are."""
    df = canonical_frame(FAMILY[1][1])
    workers = np.sort(df["worker"].unique())
    m = df["label"].nunique()

    def table(name: str) -> pd.DataFrame:
        return fit_skills(df, method=f"crowdkit:{name}", crowdkit_params=FAST.get(name, {})).skills.set_index("worker")

    wawa = ck.Wawa().fit(df).skills_.reindex(workers).to_numpy()
    t = table("Wawa")
    np.testing.assert_allclose(t["accuracy"], wawa, atol=1e-12)
    np.testing.assert_allclose(t["skill"], (m * wawa - 1) / (m - 1), atol=1e-12)
    mmsr = ck.MMSR(**FAST["MMSR"]).fit(df).skills_.reindex(workers).to_numpy()
    t = table("MMSR")
    np.testing.assert_allclose(t["vote_weight"], mmsr, atol=1e-12)
    p = t["accuracy"].to_numpy()
    np.testing.assert_allclose(np.log((m - 1) * p / (1 - p)), mmsr, atol=1e-9)  # the inverse of Crowd-Kit's map
    ds = ck.DawidSkene().fit(df)
    t = table("DawidSkene")
    for w in workers[:5]:
        e = ds.errors_.loc[w]
        acc = sum(ds.priors_[k] * e.loc[k, k] for k in ds.errors_.columns if k in e.index)
        assert t.loc[w, "accuracy"] == pytest.approx(acc, abs=1e-12)
    assert t["vote_weight"].isna().all() and t["missing_reason"].str.contains("confusion matrix").all()
    glad = ck.GLAD(**FAST["GLAD"]).fit(df)
    t = table("GLAD")
    np.testing.assert_allclose(t["skill"], glad.alphas_.reindex(workers).to_numpy(), atol=1e-12)
    assert t["accuracy"].isna().all() and t["missing_reason"].str.contains("difficulty").all()
    mace = ck.MACE(**FAST["MACE"]).fit(df)
    competence = pd.Series(mace.spamming_[:, 1], index=pd.unique(df["worker"])).reindex(workers).to_numpy()
    np.testing.assert_allclose(table("MACE")["skill"], competence, atol=1e-12)


def test_bundled_set_wsd() -> None:
    """Snow et al. WSD (1,770 labels, 3 classes): Crowd-Kit's labels; its accuracy on the 177 gold tasks as
    Crowd-Kit's, printed per method."""
    df = pd.read_csv(DATA / "snow_wsd" / "labels.csv", dtype=str)
    gold = pd.read_csv(DATA / "snow_wsd" / "truth.csv", dtype=str).set_index("task")["label"]
    for name in ("MACE", "Wawa", "MMSR", "ZeroBasedSkill", "DawidSkene", "OneCoinDawidSkene", "MajorityVote"):
        params = FAST.get(name, {})
        cons = fit_skills(df, method=f"crowdkit:{name}", crowdkit_params=params).consensus.set_index("task")["label"]
        ref = crowdkit_reference(name, df, params)[0].reindex(cons.index).astype(str)
        assert (cons == ref).all(), name
        shuffled = df.sample(frac=1.0, random_state=1)  # the file's row order never changes the answer
        again = fit_skills(shuffled, method=f"crowdkit:{name}", crowdkit_params=params).consensus
        assert (again.set_index("task")["label"] == cons).all(), name
        acc = float((cons.reindex(gold.index) == gold).mean())
        print(f"WSD crowdkit:{name}: accuracy {acc:.4f}")
        assert acc > 0.9


def test_wawa_predict_is_broken_upstream() -> None:
    """Why the adapter runs Wawa's and ZeroBasedSkill's vote itself: their own predict fails here."""
    df = canonical_frame(FAMILY[0][1])
    import sklearn

    if tuple(int(x) for x in sklearn.__version__.split(".")[:2]) >= (1, 6):
        with pytest.raises(AttributeError, match="__sklearn_tags__"):
            ck.Wawa().fit_predict(df)
    else:  # an older scikit-learn: Crowd-Kit's own predict runs, and is the adapter's vote
        assert (ck.Wawa().fit_predict(df).sort_index() == crowdkit_reference("Wawa", df, {})[0].sort_index()).all()


def _spec(skills: dict[str, Any]) -> dict[str, Any]:
    return {"name": "p", "labels": {"path": "labels.csv"}, "skills": skills}


def test_spec_forms_and_params_are_validated_once() -> None:
    """``method: crowdkit:GLAD`` + ``crowdkit_params`` and the mapping ``method: {crowdkit: GLAD, params: ...}`` are
    the same options; the class name matches in any case; values are coerced and range-checked by the aggregator's
    declared parameters."""
    a = parse_spec(_spec({"method": "crowdkit:GLAD", "crowdkit_params": {"n_iter": 50}})).skills
    b = parse_spec(_spec({"method": {"crowdkit": "glad", "params": {"n_iter": "50"}}})).skills
    assert a == b and a.method == "crowdkit:GLAD" and a.crowdkit_params == {"n_iter": 50}
    assert parse_spec(_spec({"method": "crowdkit:Wawa"})).skills.crowdkit_params == {}


@pytest.mark.parametrize(
    ("skills", "words"),
    [
        ({"method": "crowdkit:GLAD", "crowdkit_params": {"n_iter": -1}}, "crowdkit:GLAD n_iter=-1: Input should be"),
        ({"method": "crowdkit:MACE", "crowdkit_params": {"method": "gibbs"}}, "crowdkit:MACE method='gibbs'"),
        ({"method": "crowdkit:MACE", "crowdkit_params": {"alpha": 0}}, "alpha=0: Input should be greater than 0"),
        ({"method": "crowdkit:KOS", "crowdkit_params": {"random_state": 2**40}}, "random_state="),
        ({"method": "crowdkit:GLAD", "crowdkit_params": {"niter": 3}}, "niter: not a parameter of crowdkit:GLAD"),
        ({"method": "crowdkit:Wawa", "crowdkit_params": {"n_iter": 3}}, "its parameters: none"),
        (
            {"method": "crowdkit:ZeroBasedSkill", "crowdkit_params": {"lr_init": float("inf")}},
            "lr_init=inf: Input should be a finite",
        ),
        ({"method": "ds", "crowdkit_params": {"n_iter": 3}}, "apply to a crowdkit: method only, not ds"),
        ({"method": "crowdkit:Nope"}, "unknown method 'crowdkit:Nope'"),
    ],
)
def test_bad_params_are_named(skills: dict[str, Any], words: str) -> None:
    with pytest.raises(SpecError, match=r"skills\.") as err:
        parse_spec(_spec(skills))
    assert words in str(err.value)
    with pytest.raises(ValidationError):
        SkillsOptions(**skills)


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_the_ranges_admit_what_crowdkit_runs(name: str) -> None:
    """Each declared parameter at the edge of its range runs in Crowd-Kit (a bound it cannot run is a defect)."""
    df = FAMILY[0][1]
    model = AGGREGATORS[name].params
    edges: dict[str, Any] = {}
    for param, info in model.model_fields.items():
        lo = next((getattr(m, "ge", None) for m in info.metadata if getattr(m, "ge", None) is not None), None)
        if lo is None:
            lo = next((getattr(m, "gt", None) for m in info.metadata if getattr(m, "gt", None) is not None), None)
            lo = None if lo is None else lo + 1e-3
        if lo is not None and not (param.endswith("n_iter") and lo < 1 and name in ("GLAD",)):
            edges[param] = lo
    if name == "MACE":
        edges.update(n_restarts=1, n_iter=1)
    result = fit_skills(df, method=f"crowdkit:{name}", crowdkit_params=edges)
    assert len(result.consensus) == df["task"].nunique()


def test_without_the_extra_the_spec_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """crowd-kit made unimportable: the spec fails at validation (before any step) and names the extra; a fit
    reached another way (the import failing at run time) says the same."""
    monkeypatch.setitem(sys.modules, "crowdkit", None)
    monkeypatch.setitem(sys.modules, "crowdkit.aggregation", None)
    with pytest.raises(SpecError, match=r"skills.method: method crowdkit:GLAD runs crowd-kit.*crowdflow\[crowdkit\]"):
        parse_spec(_spec({"method": "crowdkit:GLAD"}))
    assert parse_spec(_spec({"method": "ds"})).skills.method == "ds"  # the native methods need nothing
    lm = encode_labels(FAMILY[0][1])
    with pytest.raises(SpecError, match=r"pip install 'crowdflow\[crowdkit\]'"):
        fit_crowdkit(lm, "crowdkit:Wawa")


def test_the_library_imports_without_crowdkit() -> None:
    """``import crowdflow`` and the skills options never import crowd-kit (a fresh interpreter)."""
    import subprocess

    code = (
        "import sys; import crowdflow, crowdflow.spec; from crowdflow.skills import SkillsOptions; "
        "SkillsOptions(method='crowdkit:GLAD'); print('crowdkit' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_partitioned_runs_refuse_a_crowdkit_method(tmp_path: Path) -> None:
    from flows.pipeline import check_partitioned

    folder = tmp_path / "labels"
    folder.mkdir()
    FAMILY[0][1].to_parquet(folder / "part-0.parquet")
    spec = parse_spec(
        {
            "name": "p",
            "labels": {"path": str(folder)},
            "skills": {"method": "crowdkit:Wawa"},
            "runner": {"kind": "dask"},
        }
    )
    with pytest.raises(SpecError, match="one process"):
        check_partitioned(spec)
