"""Changes to ``method: auto`` judged on every public gold set, against today's rule (issue #35, round 3).

Run: ``python -m benchmarks.skills_auto_changes`` (writes ``benchmarks/results/skills_auto_changes.md``).

Sets: every classification gold set of /work/shared/data and benchmarks/data (the latter "not tuned on"), rows as
in ``benchmarks.skills_real`` (nulls dropped, the last answer per (task, worker)). For each set, each candidate of
the default (ds, ds_classic, onecoin_ds, mv) is refitted on all labels by ``fit_skills`` (its gold error and its
consensus) and scored two ways without gold:

- held-out predictive log-likelihood per label (``crowdflow.skills.auto.choose``, 5 folds per task, seed 0): the
  library's score; ``today`` = its arg-max;
- BIC on all labels: ``log L − (k/2) log n`` with log L the observed-data log-likelihood of the candidate's fit on
  every label (Σ_t log Σ_z q_z Π_labels π_j[z, y]), k its free parameters (ds and ds_classic W·M(M−1) + M−1,
  onecoin_ds W + M−1, mv 1: its one shared accuracy, uniform class prior) and n the number of labels. A score that
  charges each per-worker parameter, so a full confusion per few-label worker must pay for itself.

Each change is reported against today per set: its pick, its gold error, the gold tasks only one of the two gets
wrong and the exact two-sided sign (McNemar) test of those counts, and the error given up against the best
candidate on gold. Adoption rule (fixed before the run): a change is adopted only if it lowers the error on at
least one set and raises it on none by more than +0.005, whatever the discordant-pair test says (a +0.005 rise
on a set where the default is at the best peer is a new miss of issue #35's target).

Diagnostics of the two sets the rule misses (sections at the end):

- gal_trec2011_vuurens: the crowd (labels per worker and per task, workers' accuracy on gold) and why Crowd-Kit's
  KOS is best on gold: its decision is the sign of Σ_j A_tj v_j with v the leading eigenvector of the workers'
  agreement matrix AᵀA (A_tj = ±1); the KOS posterior softened by a scale c and every worker's confusion from
  that posterior (one M-step, Laplace α = 1) is scored by the same held-out likelihood as the candidates, and so
  is the DS posterior under the same worker law, to see whether any scale of the KOS posterior predicts the
  held-out labels better than DS's (it would have to, to be picked by any likelihood rule);
- ducks_welinder: agreement of the gold with majority vote, with DS and with each worker; workers' accuracy on
  gold against DS's estimated accuracy; the share of "yes" by species (``truth_species.csv``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from scipy.stats import binomtest  # noqa: E402

from benchmarks.gold_sets import gold_sets, read_gold_set, set_name  # noqa: E402
from crowdflow.labels import LabelMatrix  # noqa: E402
from crowdflow.skills import SkillsOptions, fit_skills, prepare_labels  # noqa: E402
from crowdflow.skills import auto as A  # noqa: E402, N812
from crowdflow.skills.dawid_skene import dawid_skene, one_coin_dawid_skene  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "skills_auto_changes.md"
CANDS = ["ds", "ds_classic", "onecoin_ds", "mv"]
TOL = 0.005


def _ds_smooth(lm: LabelMatrix, o: SkillsOptions, progress: object = None) -> A.Predictive:
    """DS (β = ``ds_prior``) with Laplace smoothing α = 1 of every confusion row, a candidate tried here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = dawid_skene(lm, tol=o.ds_tol, max_iter=o.ds_max_iter, smoothing=1.0, tie_break="smallest", prior=o.ds_prior)
    return A.Predictive(r.posteriors, r.confusion, r.converged, r.iterations)


#: DS with α = 1 (``ds_smoothing: 1``) as a fifth candidate: on gal_trec2011_vuurens the DS posterior scored under
#: an α = 1 worker law predicts held-out labels better than DS's own α = 0.01 fit (section below)
SMOOTH = A.Candidate({"method": "ds", "ds_smoothing": 1.0}, _ds_smooth)


def load(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    labels, truth = read_gold_set(folder)
    return labels, truth.drop_duplicates("task")


def sets(only: list[str] | None) -> list[tuple[str, Path]]:
    return [(set_name(f), f) for f in gold_sets(only)]


def n_params(name: str, w: int, m: int) -> int:
    """Free parameters of a candidate's model (module docstring)."""
    if name in ("ds", "ds_classic"):
        return w * m * (m - 1) + m - 1
    if name == "onecoin_ds":
        return w + m - 1
    return 1


def mv_log_lik(lm: LabelMatrix, o: SkillsOptions) -> float:
    """Observed-data log-likelihood of majority vote's model (one shared accuracy p, uniform class prior)."""
    pred = A.CANDIDATES["mv"].fit(lm, o)
    m = lm.n_classes
    p = float(pred.confusion[0, 0, 0]) if lm.n_workers else 0.5
    counts = lm.task_class_counts().toarray()
    n_t = counts.sum(axis=1, keepdims=True)
    z = counts * math.log(p) + (n_t - counts) * math.log((1 - p) / (m - 1)) - math.log(m)
    top = z.max(axis=1, keepdims=True)
    return float((top[:, 0] + np.log(np.exp(z - top).sum(axis=1))).sum())


def full_log_lik(name: str, lm: LabelMatrix, o: SkillsOptions) -> float:
    kw = {"tol": o.ds_tol, "max_iter": o.ds_max_iter, "smoothing": max(o.ds_smoothing, 1e-3), "tie_break": "smallest"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "ds":
            return float(dawid_skene(lm, prior=o.ds_prior, **kw).log_likelihood[-1])  # type: ignore[arg-type]
        if name == "ds_classic":
            return float(dawid_skene(lm, prior=0.0, **kw).log_likelihood[-1])  # type: ignore[arg-type]
        if name == "onecoin_ds":
            return float(one_coin_dawid_skene(lm, **kw).log_likelihood[-1])  # type: ignore[arg-type]
    return mv_log_lik(lm, o)


def wrong(consensus: pd.DataFrame, truth: pd.DataFrame) -> pd.Series:
    """1 where the consensus misses the gold, over the gold tasks that have labels (as ``prediction_error``)."""
    got = consensus.set_index("task")["label"].astype(str)
    t = truth.set_index("task")["label"].astype(str)
    t = t[t.index.isin(got.index)]
    return (got.reindex(t.index) != t).astype(int)


def sign_test(a: pd.Series, b: pd.Series) -> tuple[int, int, float]:
    only_a, only_b = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
    p = 1.0 if only_a + only_b == 0 else float(binomtest(only_a, only_a + only_b, 0.5).pvalue)
    return only_a, only_b, p


def collect(only: list[str] | None) -> list[dict[str, object]]:
    o = SkillsOptions()
    recs = []
    for name, folder in sets(only):
        labels, truth = load(folder)
        if labels["label"].nunique() > 20:
            continue
        t0 = time.perf_counter()
        lm, _ = prepare_labels(labels)
        miss = {}
        for c in CANDS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = fit_skills(labels, spectral=False, **A.CANDIDATES[c].options)
            miss[c] = wrong(res.consensus, truth)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = fit_skills(labels, spectral=False, **SMOOTH.options)
        miss["ds_smooth"] = wrong(res.consensus, truth)
        five = {**{c: A.CANDIDATES[c] for c in CANDS}, "ds_smooth": SMOOTH}
        ch5 = A.choose(lm, o, five, n_folds=5, seed=0)
        held = {str(r["candidate"]): float(r["mean_log_lik"]) for r in ch5.scores.to_dict(orient="records")}
        today = max(CANDS, key=lambda c: held[c])  # the library's arg-max over the default candidates
        n = lm.n_labels
        bic = {
            c: full_log_lik(c, lm, o) - 0.5 * n_params(c, lm.n_workers, lm.n_classes) * math.log(max(n, 2))
            for c in CANDS
        }
        recs.append(
            {
                "data": name,
                "labels": n,
                "workers": lm.n_workers,
                "M": lm.n_classes,
                "gold": len(miss["ds"]),
                "miss": miss,
                "held": held,
                "bic": {c: v / n for c, v in bic.items()},
                "picks": {"today": today, "BIC": max(bic, key=lambda c: bic[c]), "DS α=1 a candidate": ch5.choice},
            }
        )
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    return recs


def change_table(recs: list[dict[str, object]], change: str) -> tuple[pd.DataFrame, dict[str, object]]:
    rows = []
    for r in recs:
        miss: dict[str, pd.Series] = r["miss"]  # type: ignore[assignment]
        picks: dict[str, str] = r["picks"]  # type: ignore[assignment]
        today, new = picks["today"], picks[change]
        e_today, e_new = float(miss[today].mean()), float(miss[new].mean())
        best = min(float(miss[c].mean()) for c in CANDS)  # the best of the default four, as in skills_real.md
        only_new, only_today, p = sign_test(miss[new], miss[today])
        rows.append(
            {
                "data": r["data"],
                "gold": r["gold"],
                "workers": r["workers"],
                "labels": r["labels"],
                "today pick": today,
                "today error": e_today,
                f"{change} pick": new,
                f"{change} error": e_new,
                "change": e_new - e_today,
                "change only wrong": only_new,
                "today only wrong": only_today,
                "McNemar p": p,
                "given up today": e_today - best,
                f"given up {change}": e_new - best,
            }
        )
    df = pd.DataFrame(rows)
    helps = int((df["change"] < -1e-12).sum())
    hurts = df[df["change"] > TOL + 1e-12]
    summary = {
        "helps": helps,
        "hurts": len(hurts),
        "hurts_sets": ", ".join(
            f"{d} ({c:+.4f}, p {p:.3f})" for d, c, p in hurts[["data", "change", "McNemar p"]].values
        ),
        "mean_today": float(df["today error"].mean()),
        "mean_new": float(df[f"{change} error"].mean()),
        "adopt": helps >= 1 and hurts.empty,
    }
    return df, summary


def scores_table(recs: list[dict[str, object]]) -> pd.DataFrame:
    rows = []
    for r in recs:
        row: dict[str, object] = {"data": r["data"]}
        for c in [*CANDS, "ds_smooth"]:
            if c == "ds_smooth":
                row["ds α=1 held-out"] = r["held"][c]  # type: ignore[index]
                row["ds α=1 gold"] = float(r["miss"][c].mean())  # type: ignore[index]
                continue
            row[f"{c} held-out"] = r["held"][c]  # type: ignore[index]
            row[f"{c} BIC/n"] = r["bic"][c]  # type: ignore[index]
            row[f"{c} gold"] = float(r["miss"][c].mean())  # type: ignore[index]
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the two misses


def _signs(lm: LabelMatrix) -> sp.csr_matrix:
    s = np.where(lm.class_idx == 1, 1.0, -1.0)
    return sp.csr_matrix((s, (lm.task_idx, lm.worker_idx)), shape=(lm.n_tasks, lm.n_workers))


def kos_score(lm: LabelMatrix) -> np.ndarray:
    """Σ_j A_tj v_j, v the leading eigenvector of AᵀA without its diagonal (sign: positive sum), scaled to max 1.

    Its sign is Crowd-Kit's KOS decision on the binary sets here (checked in the diagnostic below)."""
    a = _signs(lm)
    c = (a.T @ a).toarray()
    np.fill_diagonal(c, 0.0)
    _, vecs = np.linalg.eigh(c)
    v = vecs[:, -1] * (1.0 if vecs[:, -1].sum() >= 0 else -1.0)
    s = np.asarray(a @ v).ravel()
    out: np.ndarray = s / (np.abs(s).max() or 1.0)
    return out


def _m_step(lm: LabelMatrix, post: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    m = lm.n_classes
    g = np.zeros((lm.n_workers, m, m))
    for y in range(m):
        sel = lm.class_idx == y
        for z in range(m):
            g[:, z, y] = np.bincount(lm.worker_idx[sel], weights=post[lm.task_idx[sel], z], minlength=lm.n_workers)
    g += alpha
    out: np.ndarray = g / g.sum(axis=2, keepdims=True)
    return out


def vuurens_section(folder: Path, scales: tuple[float, ...] = (2, 4, 8, 16, 32, 64)) -> list[str]:
    labels, truth = load(folder)
    lm, _ = prepare_labels(labels)
    o = SkillsOptions()
    n_w = np.bincount(lm.worker_idx, minlength=lm.n_workers)
    n_t = np.bincount(lm.task_idx, minlength=lm.n_tasks)
    tasks = pd.Index(lm.tasks)
    gi = tasks.get_indexer(truth["task"])
    ok = gi >= 0
    cls = [str(c) for c in lm.classes]
    gy = np.array([cls.index(str(c)) for c in truth["label"][ok]])
    gi = gi[ok]
    # workers' accuracy on gold
    on_gold = np.isin(lm.task_idx, gi)
    gold_of_task = np.full(lm.n_tasks, -1)
    gold_of_task[gi] = gy
    right = lm.class_idx[on_gold] == gold_of_task[lm.task_idx[on_gold]]
    w_on = lm.worker_idx[on_gold]
    n_g = np.bincount(w_on, minlength=lm.n_workers)
    acc_g = np.bincount(w_on, weights=right, minlength=lm.n_workers) / np.maximum(n_g, 1)
    five = n_g >= 5
    kos = kos_score(lm)
    kos_err = float(((kos[gi] > 0).astype(int) != gy).mean())
    from crowdkit.aggregation import KOS

    ck = pd.Series(KOS().fit_predict(labels)).astype(str)
    ck_err = float((ck.reindex(truth["task"]).to_numpy() != truth["label"].astype(str).to_numpy()).mean())
    # held-out: KOS posterior at scale c, and the DS posterior, both with one Laplace M-step as the worker law
    folds = A.fold_ids(lm, 5, 0)
    held = folds >= 0
    slot = np.full(lm.n_labels, -1)
    slot[held] = np.arange(int(held.sum()))
    ll = {c: np.empty(int(held.sum())) for c in [*scales, "ds (own law)", "ds posterior"]}
    for f in range(5):
        out = folds == f
        tr = A._subset(lm, ~out)
        s = kos_score(tr)
        args = (lm.task_idx[out], lm.worker_idx[out], lm.class_idx[out])
        for c in scales:
            p1 = 1.0 / (1.0 + np.exp(-float(c) * s))
            post = np.stack([1 - p1, p1], axis=1)
            ll[c][slot[out]] = A.heldout_log_lik(A.Predictive(post, _m_step(tr, post)), *args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dsp = A.CANDIDATES["ds"].fit(tr, o)
        ll["ds (own law)"][slot[out]] = A.heldout_log_lik(dsp, *args)
        ll["ds posterior"][slot[out]] = A.heldout_log_lik(
            A.Predictive(dsp.posteriors, _m_step(tr, dsp.posteriors)), *args
        )
    task_h = lm.task_idx[held][np.argsort(slot[held])]
    ref = ll["ds posterior"]
    rows = []
    for k, v in ll.items():
        d = v - ref
        rows.append(
            {
                "posterior": f"KOS, scale c = {k:g}" if not isinstance(k, str) else k,
                "worker law": "DS's own fit" if k == "ds (own law)" else "one M-step from the posterior, α = 1",
                "held-out log-lik per label": float(v.mean()),
                "vs DS posterior (same law)": float(d.mean()),
                "± (task-clustered SE)": A.clustered_std_error(d, task_h),
            }
        )
    from benchmarks.skills_real import markdown

    df = pd.DataFrame(rows)
    q = lambda x, p: float(np.quantile(x, p))  # noqa: E731
    return [
        "## gal_trec2011_vuurens: the crowd, and why KOS is not picked by a likelihood",
        "",
        f"{lm.n_labels:,} labels, {lm.n_workers} workers, {lm.n_tasks:,} tasks, {len(gi)} with gold "
        f"({np.mean(gy == 1):.3f} of them class 1). Labels per worker: median {q(n_w, 0.5):.0f}, quartiles "
        f"{q(n_w, 0.25):.0f}–{q(n_w, 0.75):.0f}, max {n_w.max()}; {int((n_w < 10).sum())} workers have fewer than 10. "
        f"Labels per task: median {q(n_t, 0.5):.0f}, quartiles {q(n_t, 0.25):.0f}–{q(n_t, 0.75):.0f}. "
        f"Workers with ≥ 5 gold labels: {int(five.sum())}; their accuracy on gold: median {q(acc_g[five], 0.5):.2f}, "
        f"10th percentile {q(acc_g[five], 0.1):.2f}; {int((acc_g[five] < 0.4).sum())} below 0.4 (adversarial), "
        f"{int(((acc_g[five] >= 0.4) & (acc_g[five] <= 0.6)).sum())} in 0.4–0.6 (near random).",
        "",
        f"KOS here is the leading eigenvector of the workers' agreement matrix: sign(Σ_j A_tj v_j) has gold error "
        f"{kos_err:.4f}, Crowd-Kit's KOS {ck_err:.4f}. Its weights v_j grow with a worker's number of co-labels "
        f"(correlation of v with labels per worker: {np.corrcoef(kos_score_weights(lm), n_w)[0, 1]:.2f}), so the "
        "few-label workers barely vote, where DS gives them a log-odds weight from a handful of labels.",
        "",
        "Held-out log-likelihood (the library's 5 folds per task, seed 0) of the KOS posterior, softened by a scale c "
        "(P(class 1) = σ(c·s_t), s_t scaled to max |s| = 1), with every worker's confusion from one Laplace M-step "
        "(α = 1) on that posterior, against the DS posterior under the same worker law and under its own fit. A "
        "likelihood rule could pick KOS only if some c beat the DS posterior here; the oracle c (chosen on the "
        "held-out labels themselves) does not:",
        "",
        markdown(df, list(df.columns)),
        "",
        *_per_worker_split(lm, o),
        "",
        *_crowd_vs_grades(folder, labels, truth, kos, lm),
        "",
    ]


def _per_worker_split(lm: LabelMatrix, o: SkillsOptions) -> list[str]:
    """The per-worker split of ``benchmarks.skills_auto_rules`` (run there only up to 30,000 labels) on this set."""
    from benchmarks.skills_auto_rules import score, worker_folds

    out = []
    for seed in (0, 1):
        s = score(lm, worker_folds(lm, 5, seed), CANDS, o)
        ll: dict[str, np.ndarray] = s["ll"]  # type: ignore[assignment]
        top = max(ll, key=lambda k: float(ll[k].mean()))
        diffs = ", ".join(
            f"{k} {float((ll[k] - ll[top]).mean()):+.4f} ± {A.clustered_std_error(ll[k] - ll[top], np.asarray(s['task'])):.4f}"
            for k in CANDS
            if k != top
        )
        out.append(f"seed {seed}: {top} on top ({diffs})")
    return [
        "Held out per worker instead of per task (a share of each worker's labels; `skills_auto_rules.worker_folds`, "
        "5 folds), the ranking is the same: " + "; ".join(out) + "."
    ]


def _crowd_vs_grades(
    folder: Path, labels: pd.DataFrame, truth: pd.DataFrame, kos: np.ndarray, lm: LabelMatrix
) -> list[str]:
    """NIST's graded gold (0 not, 1 partly, 2 highly relevant; the set's gold is grade ≥ 1) against the crowd's
    share of 'relevant' labels and the DS and KOS decisions, and the gold tasks exactly one of DS and KOS gets wrong."""
    raw = folder / "raw" / "task1_unlabeled_g_truth_cons_public.txt"
    if not raw.exists():
        return []
    g = pd.read_csv(raw, sep="\t", usecols=[1, 2, 3], dtype=str)
    g.index = g["TopicId"] + "_" + g["DocId"]
    t = truth.set_index("task")["label"].astype(str)
    grade = g["G-Truth"].reindex(t.index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = fit_skills(labels, spectral=False, method="ds").consensus.set_index("task")["label"].astype(str)
    kos_l = pd.Series(np.where(kos > 0, str(lm.classes[1]), str(lm.classes[0])), index=pd.Index(lm.tasks).astype(str))
    yes = labels.assign(y=(labels["label"] == str(lm.classes[1])).astype(float)).groupby("task")["y"].mean()
    df = pd.DataFrame({"grade": grade, "gold": t, "ds": ds.reindex(t.index), "kos": kos_l.reindex(t.index)})
    df["yes"] = yes.reindex(t.index)
    rows = [
        {
            "NIST grade": gr,
            "gold tasks": len(x),
            "crowd's share of 'relevant'": float(x["yes"].mean()),
            "DS says relevant": float((x["ds"] == "1").mean()),
            "KOS says relevant": float((x["kos"] == "1").mean()),
        }
        for gr, x in df.groupby("grade")
    ]
    a = (df["ds"] != df["gold"]) & (df["kos"] == df["gold"])
    b = (df["kos"] != df["gold"]) & (df["ds"] == df["gold"])
    from benchmarks.skills_real import markdown

    tab = pd.DataFrame(rows)
    return [
        "NIST's graded gold (the set's gold is grade ≥ 1; `raw/task1_unlabeled_g_truth_cons_public.txt`) against the "
        "crowd: the crowd calls about half of NIST's not-relevant documents relevant, and KOS says 'relevant' less "
        "often there than DS:",
        "",
        markdown(tab, list(tab.columns)),
        "",
        f"The {int(a.sum())} gold tasks only DS gets wrong: NIST grades {df[a]['grade'].value_counts().sort_index().to_dict()}, "
        f"crowd's share of 'relevant' median {df[a]['yes'].median():.2f} (quartiles {df[a]['yes'].quantile(0.25):.2f}–"
        f"{df[a]['yes'].quantile(0.75):.2f}); the {int(b.sum())} only KOS gets wrong: grades "
        f"{df[b]['grade'].value_counts().sort_index().to_dict()}, share median {df[b]['yes'].median():.2f}. KOS's lead "
        "is on documents the crowd itself splits on, mostly ones NIST graded not relevant.",
    ]


def kos_score_weights(lm: LabelMatrix) -> np.ndarray:
    a = _signs(lm)
    c = (a.T @ a).toarray()
    np.fill_diagonal(c, 0.0)
    _, vecs = np.linalg.eigh(c)
    out: np.ndarray = vecs[:, -1] * (1.0 if vecs[:, -1].sum() >= 0 else -1.0)
    return out


def ducks_section(folder: Path) -> list[str]:
    labels, truth = load(folder)
    species = pd.read_csv(folder / "truth_species.csv", dtype=str).set_index("task")["species"]
    lm, _ = prepare_labels(labels)
    o = SkillsOptions()
    t = truth.set_index("task")["label"].astype(str)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mv = fit_skills(labels, spectral=False, method="mv", tie_break="smallest")
        ds = fit_skills(labels, spectral=False, method="ds")
    mv_l = mv.consensus.set_index("task")["label"].astype(str).reindex(t.index)
    ds_l = ds.consensus.set_index("task")["label"].astype(str).reindex(t.index)
    lab = labels.assign(gold=labels["task"].map(t), species=labels["task"].map(species))
    lab["right"] = (lab["label"] == lab["gold"]).astype(float)
    per_w = lab.groupby("worker").agg(n=("right", "size"), gold_acc=("right", "mean"))
    ds_acc = ds.skills.set_index("worker")["accuracy"].astype(float)
    per_w["ds_acc"] = ds_acc.reindex(per_w.index)
    corr = float(per_w[["gold_acc", "ds_acc"]].corr(method="spearman").iloc[0, 1])
    beat_mv = int((per_w["gold_acc"] > 1 - float((mv_l != t).mean())).sum())
    rows = []
    for sp_name, g in lab.groupby("species"):
        tasks_sp = species.index[species == sp_name]
        rows.append(
            {
                "species": sp_name,
                "gold": t.reindex(tasks_sp).iloc[0],
                "tasks": len(tasks_sp),
                "share of 'yes' labels": float((g["label"] == "1").mean()),
                "MV says yes": float((mv_l.reindex(tasks_sp) == "1").mean()),
                "DS says yes": float((ds_l.reindex(tasks_sp) == "1").mean()),
                "MV error": float((mv_l.reindex(tasks_sp) != t.reindex(tasks_sp)).mean()),
                "DS error": float((ds_l.reindex(tasks_sp) != t.reindex(tasks_sp)).mean()),
            }
        )
    ch = A.choose(lm, o, {c: A.CANDIDATES[c] for c in CANDS}, n_folds=5, seed=0)
    sc = ch.scores.set_index("candidate")
    from benchmarks.skills_real import markdown

    df = pd.DataFrame(rows)
    yes_geese = (
        lab[lab["species"] == "Canada Goose"].groupby("worker")["label"].apply(lambda s: float((s == "1").mean()))
    )
    return [
        "## ducks_welinder: the gold against the crowd",
        "",
        f"Gold = 'Mallard or American Black Duck' over {len(t)} images; {lm.n_labels:,} labels by {lm.n_workers} workers "
        f"({lm.n_labels // lm.n_workers} each). Gold error: MV {float((mv_l != t).mean()):.4f}, DS "
        f"{float((ds_l != t).mean()):.4f}; held-out log-likelihood per label: ds {sc.loc['ds', 'mean_log_lik']:.4f}, mv "
        f"{sc.loc['mv', 'mean_log_lik']:.4f} (mv − ds {sc.loc['mv', 'diff_vs_choice']:+.4f} ± "
        f"{sc.loc['mv', 'diff_std_error']:.4f}, task-clustered), onecoin_ds {sc.loc['onecoin_ds', 'mean_log_lik']:.4f}.",
        "",
        "Per species (the labels split on 'bird or not', the gold on 'duck or not'):",
        "",
        markdown(df, list(df.columns)),
        "",
        f"Workers' accuracy on the gold: median {per_w['gold_acc'].median():.3f}, quartiles "
        f"{per_w['gold_acc'].quantile(0.25):.3f}–{per_w['gold_acc'].quantile(0.75):.3f}, best {per_w['gold_acc'].max():.3f}; "
        f"{beat_mv} of {len(per_w)} workers alone are more accurate than majority vote. DS's estimated accuracy "
        f"(of the crowd's own latent class) against the accuracy on gold: Spearman {corr:+.2f} — DS ranks the workers by "
        "agreement with the latent 'bird' class, which is not the gold's question. On the Canada geese (gold: no) the "
        f"workers' share of 'yes' ranges {yes_geese.min():.2f}–{yes_geese.max():.2f} (median {yes_geese.median():.2f}): "
        "a per-worker model learns each worker's goose habit as a confusion and calls the geese by the 'bird' class; "
        "majority vote only wins because the geese split about half and half.",
        "",
    ]


TITLES = {
    "BIC": "pick by BIC on all labels instead of held-out likelihood",
    "DS α=1 a candidate": "DS with Laplace smoothing α = 1 as a fifth candidate (held-out arg-max over five)",
}


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    from benchmarks.skills_real import markdown

    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    recs = collect(args.only)
    parts = []
    for change in ("BIC", "DS α=1 a candidate"):
        df, s = change_table(recs, change)
        verdict = "**adopted**" if s["adopt"] else "**rejected**"
        parts += [
            f"## Change: {TITLES[change]} — {verdict}",
            "",
            f"Lower error than today on {s['helps']} set(s); higher by more than +{TOL} on {s['hurts']}"
            + (f": {s['hurts_sets']}" if s["hurts"] else "")
            + f". Mean gold error over the {len(df)} sets: today {s['mean_today']:.4f}, {change} {s['mean_new']:.4f}. "
            f"`given up`: the pick's error minus the best candidate's on gold.",
            "",
            markdown(df, list(df.columns)),
            "",
        ]
    sc = scores_table(recs)
    vu = [f for n, f in sets(None) if n == "gal_trec2011_vuurens"]
    du = [f for n, f in sets(None) if n == "ducks_welinder"]
    extra = (vuurens_section(vu[0]) if vu else []) + (ducks_section(du[0]) if du else [])
    text = "\n".join(
        [
            "# Changes to `method: auto` on every public gold set (issue #35)",
            "",
            f"`python -m benchmarks.skills_auto_changes` ({time.perf_counter() - t0:.0f} s; 1-min load average "
            f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, shared 2-core host). What each "
            "change is and the adoption rule: the module docstring. Earlier rule variants (1-SE rules, two seeds' "
            "folds pooled, a per-worker split, EBCC as a candidate, a common worker law): "
            "`skills_auto_rules.md`, `skills_auto_common_law.md`.",
            "",
            *parts,
            "## Scores per candidate",
            "",
            "Held-out log-likelihood per label (today's score), BIC per label (log L − (k/2) log n, divided by n) "
            "and the gold error of each candidate's refit.",
            "",
            markdown(sc, list(sc.columns)),
            "",
            *extra,
        ]
    )
    print(text)
    if not args.no_write:
        OUT.write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
