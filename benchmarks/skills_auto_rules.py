"""Selection rules for ``method: auto`` judged on the public gold sets, leave one set out (issue #35, part 1).

Run: ``python -m benchmarks.skills_auto_rules`` (writes ``benchmarks/results/skills_auto_rules.md``).

For every public gold label set (/work/shared/data, at most 20 classes; rows as in ``benchmarks.skills_real``):
each candidate of ``method: auto`` is refitted on all labels (its gold error) and scored by held-out predictive
log-likelihood (``crowdflow.skills.auto``) under two splits:

- per task (the library's split, ``fold_ids``): a share of each task's labels held out, 5 folds, seeds 0 and 1;
- per worker: a share of each worker's labels held out (5 folds, seed 0; a label is kept in training when its
  task would otherwise have none left in that fold, and a worker or task with one label is never held out).

Rules compared (each picks one candidate per set without gold):

- ``argmax``: the highest mean held-out log-likelihood (the library's rule);
- ``1-SE(c)``: the simplest candidate whose paired shortfall to the top is at most c task-clustered standard
  errors (simplest first: mv, onecoin_ds, ds, ds_classic, ebcc), c ∈ {0.5, 1, 2};
- the same on the per-worker split, on two seeds' folds pooled, and with EBCC among the candidates (sets of at
  most ``--ebcc-max-labels`` labels; above that EBCC is left out of that rule, said in the table).

Leave one set out: the rule family's hyper-parameter (c, with c = 0 for argmax) is chosen on the other sets by
their mean gold error (ties: the smaller c) and the held-out set's error is reported; a rule is never tuned on
the set it is judged on.
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

from benchmarks.gold_sets import gold_sets, read_gold_set  # noqa: E402
from crowdflow.labels import LabelMatrix  # noqa: E402
from crowdflow.skills import SkillsOptions, fit_skills, prediction_error, prepare_labels  # noqa: E402
from crowdflow.skills import auto as A  # noqa: E402, N812

OUT = Path(__file__).resolve().parent / "results" / "skills_auto_rules.md"
ORDER = ["mv", "onecoin_ds", "ds", "ds_classic", "ebcc"]  # simplest first
DEFAULT = ["ds", "ds_classic", "onecoin_ds", "mv"]
CS = (0.0, 0.5, 1.0, 2.0)


def worker_folds(lm: LabelMatrix, k: int, seed: int) -> np.ndarray:
    """Fold of every label, stratified per worker; −1 = never held out (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n = lm.n_labels
    counts = np.bincount(lm.worker_idx, minlength=lm.n_workers)
    order = np.lexsort((rng.random(n), lm.worker_idx))
    start = np.concatenate(([0], np.cumsum(counts)))[lm.worker_idx[order]]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - start
    f = (rank + rng.integers(0, k, size=lm.n_workers)[lm.worker_idx]) % k
    per_task = np.bincount(lm.task_idx, minlength=lm.n_tasks)
    f[(counts[lm.worker_idx] < 2) | (per_task[lm.task_idx] < 2)] = -1
    for fold in range(k):  # keep one label of a task in training when the fold would take all of them
        held = np.bincount(lm.task_idx[f == fold], minlength=lm.n_tasks)
        bare = np.flatnonzero(held == per_task)
        if bare.size:
            first = np.flatnonzero((f == fold) & np.isin(lm.task_idx, bare))
            _, keep = np.unique(lm.task_idx[first], return_index=True)
            f[first[keep]] = -1
    out: np.ndarray = f.astype(np.int64)
    return out


def score(lm: LabelMatrix, folds: np.ndarray, names: list[str], o: SkillsOptions) -> dict[str, object]:
    """Per held-out label log-likelihood of every candidate, the task of each, and whether every fold converged."""
    held = folds >= 0
    per = {nm: np.full(lm.n_labels, np.nan) for nm in names}
    conv = dict.fromkeys(names, True)
    for f in range(int(folds.max()) + 1):
        m = folds == f
        if not m.any():
            continue
        train = A._subset(lm, ~m)
        for nm in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = A.CANDIDATES[nm].fit(train, o)
            per[nm][m] = A.heldout_log_lik(p, lm.task_idx[m], lm.worker_idx[m], lm.class_idx[m])
            conv[nm] &= bool(p.converged)
    return {"ll": {nm: v[held] for nm, v in per.items()}, "task": lm.task_idx[held], "converged": conv}


def pick(scored: list[dict[str, object]], c: float, cands: list[str]) -> str:
    """The rule: argmax (c = 0) or the simplest candidate within c task-clustered standard errors of the top."""
    ll = {nm: np.concatenate([s["ll"][nm] for s in scored]) for nm in cands if nm in scored[0]["ll"]}  # type: ignore[index]
    task = np.concatenate([np.asarray(s["task"]) + i * 10**9 for i, s in enumerate(scored)])
    means = {nm: float(v.mean()) for nm, v in ll.items()}
    top = max(means, key=lambda nm: means[nm])
    for nm in ORDER:
        if nm in ll:
            d = ll[top] - ll[nm]
            se = A.clustered_std_error(d, task) * math.sqrt(len(scored))  # pooled seeds repeat the same labels
            if d.mean() <= c * (0.0 if np.isnan(se) else se) + 1e-15:
                return nm
    return top


def collect(ebcc_max_labels: int, worker_max_labels: int, only: list[str] | None) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    o = SkillsOptions()
    for folder in gold_sets(only, unseen=False):
        labels, truth = read_gold_set(folder)
        if labels["label"].nunique() > 20:
            continue
        t0 = time.perf_counter()
        lm, _ = prepare_labels(labels)
        names = DEFAULT + (["ebcc"] if lm.n_labels <= ebcc_max_labels else [])
        gold = {}
        for nm in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = fit_skills(labels, spectral=False, **A.CANDIDATES[nm].options)
            gold[nm] = prediction_error(res.consensus, truth)
        rec: dict[str, object] = {"gold": gold, "labels": lm.n_labels, "names": names}
        rec["task0"] = score(lm, A.fold_ids(lm, 5, 0), names, o)
        rec["task1"] = score(lm, A.fold_ids(lm, 5, 1), DEFAULT, o)
        if lm.n_labels <= worker_max_labels:
            rec["worker0"] = score(lm, worker_folds(lm, 5, 0), DEFAULT, o)
        out[folder.name] = rec
        print(f"  {folder.name}: {time.perf_counter() - t0:.1f} s", flush=True)
    return out


RULES = {  # name -> (splits, candidates, c values)
    "argmax, per task (the library's rule)": (["task0"], DEFAULT, (0.0,)),
    "1-SE(c), per task, c chosen leave-one-set-out": (["task0"], DEFAULT, CS[1:]),
    "argmax or 1-SE(c), per task, c ∈ {0, 0.5, 1, 2} chosen leave-one-set-out": (["task0"], DEFAULT, CS),
    "argmax, per task, two seeds' folds pooled": (["task0", "task1"], DEFAULT, (0.0,)),
    "argmax, per worker": (["worker0"], DEFAULT, (0.0,)),
    "argmax, per task, EBCC a candidate": (["task0"], ORDER, (0.0,)),
}


def evaluate(recs: dict[str, dict[str, object]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, picks = [], {}
    for rule, (splits, cands, cs) in RULES.items():
        sets = [n for n, r in recs.items() if all(s in r for s in splits)]
        err = {c: {n: recs[n]["gold"][pick([recs[n][s] for s in splits], c, cands)] for n in sets} for c in cs}  # type: ignore[index]
        chosen = {}
        for n in sets:  # leave one set out: c by the mean gold error on the other sets
            other = {c: float(np.mean([err[c][m] for m in sets if m != n])) for c in cs}
            best = min(other.values())
            c_star = min(c for c in cs if other[c] <= best + 1e-12)
            chosen[n] = (c_star, err[c_star][n], pick([recs[n][s] for s in splits], c_star, cands))
        best_gold = {n: min(recs[n]["gold"][k] for k in recs[n]["gold"] if k in cands) for n in sets}  # type: ignore[index]
        gap = {n: chosen[n][1] - best_gold[n] for n in sets}
        rows.append(
            {
                "rule": rule,
                "sets": len(sets),
                "mean gold error (held-out set)": float(np.mean([chosen[n][1] for n in sets])),
                "picks best candidate on gold": sum(g < 1e-12 for g in gap.values()),
                "worst gold error given up": max(gap.values()),
                "worst set": max(gap, key=lambda n: gap[n]) if max(gap.values()) > 0 else "",
                "c chosen": ", ".join(sorted({f"{chosen[n][0]:g}" for n in sets})),
            }
        )
        picks[rule] = {n: chosen[n][2] for n in sets}
    return pd.DataFrame(rows), pd.DataFrame(picks)


def per_set_table(recs: dict[str, dict[str, object]]) -> pd.DataFrame:
    rows = []
    for n, r in recs.items():
        s = r["task0"]
        ll = {k: float(v.mean()) for k, v in s["ll"].items()}  # type: ignore[index]
        top = max((k for k in ll if k in DEFAULT), key=lambda k: ll[k])
        row: dict[str, object] = {"data": n, "labels": r["labels"]}
        for k in ORDER:
            if k in ll:
                d = s["ll"][top] - s["ll"][k]  # type: ignore[index]
                se = A.clustered_std_error(d, np.asarray(s["task"]))
                row[f"{k} held-out"] = f"{ll[k]:.4f}" + ("" if k == top else f" ({-d.mean():+.4f} ± {se:.4f})")
                row[f"{k} gold"] = f"{r['gold'][k]:.4f}"  # type: ignore[index]
        row["every fold converged"] = all(s["converged"].values())  # type: ignore[union-attr]
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ebcc-max-labels", type=int, default=10_000)
    ap.add_argument("--worker-max-labels", type=int, default=30_000)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    recs = collect(args.ebcc_max_labels, args.worker_max_labels, args.only)
    summary, picks = evaluate(recs)
    from benchmarks.skills_real import markdown

    per = per_set_table(recs)
    text = "\n".join(
        [
            "# Selection rules for `method: auto`, leave one set out (issue #35, part 1)",
            "",
            f"`python -m benchmarks.skills_auto_rules` ({time.perf_counter() - t0:.0f} s on the shared 2-core host). "
            "Rules, splits and the leave-one-set-out protocol: the module docstring. The hyper-parameter c of a "
            "rule is chosen on the other sets; `mean gold error (held-out set)` is the mean, over the sets, of the "
            "error of the pick on the set left out. The per-worker split runs on sets of at most "
            f"{args.worker_max_labels:,} labels, EBCC on sets of at most {args.ebcc_max_labels:,} (its rule's "
            "`sets` column says on how many).",
            "",
            markdown(summary, list(summary.columns)),
            "",
            "## Picks per set",
            "",
            markdown(picks.reset_index(names="data").fillna(""), ["data", *picks.columns]),
            "",
            "## Held-out log-likelihood per label (per task, seed 0) and gold error of each candidate's refit",
            "",
            "Mean log p of a held-out label; in brackets the difference to the best of the default candidates "
            "(negative: below it) with its task-clustered standard error (`crowdflow.skills.auto.clustered_std_error`).",
            "",
            markdown(per, list(per.columns)),
            "",
        ]
    )
    print(text)
    if not args.no_write:
        OUT.write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
