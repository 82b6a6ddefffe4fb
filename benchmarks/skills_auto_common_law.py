"""Held-out scoring under one common worker law, so that estimators without a likelihood can be candidates
(issue #35, part 1: "why does the held-out likelihood pick wrongly?").

Run: ``python -m benchmarks.skills_auto_common_law`` (writes ``benchmarks/results/skills_auto_common_law.md``).

The library's rule (``crowdflow.skills.auto``) scores each candidate with its OWN predictive law: a held-out
label y of worker j on task i gets log Σ_k q_c(i, k) π_c[j, k, y], with q_c the candidate's task posterior and
π_c its own worker model (full confusion for DS, one coin for one-coin DS, one shared coin for MV). Two
questions follow: (1) is that fair between models with more and fewer worker parameters, and (2) can methods
with no worker likelihood (Crowd-Kit's KOS, Wawa) be scored at all? This benchmark scores every candidate's
task posterior under ONE common worker law instead: π̂_c = the full-confusion M-step from the training labels
with q_c as the task posterior, Laplace-smoothed (one virtual answer per cell, α = 1, fixed before the run),

    score_c = mean over held-out labels of log Σ_k q_c(i, k) π̂_c[j, k, y],

so the comparison is only about which task posterior explains the labels it did not see. Hard-label methods
(Crowd-Kit KOS on binary sets, Wawa) enter as one-hot posteriors. Same folds as the library (5, seed 0,
``fold_ids``), same rows as ``benchmarks.skills_real`` (nulls dropped, last answer per (task, worker)), on
every classification gold set of /work/shared/data and benchmarks/data. Nothing is tuned: the rule is the
arg-max of either score.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.gold_sets import gold_sets, read_gold_set, set_name  # noqa: E402
from crowdflow.labels import LabelMatrix  # noqa: E402
from crowdflow.skills import SkillsOptions, prediction_error, prepare_labels  # noqa: E402
from crowdflow.skills import auto as A  # noqa: E402, N812

OUT = Path(__file__).resolve().parent / "results" / "skills_auto_common_law.md"
OWN = ["ds", "ds_classic", "onecoin_ds", "mv"]
ALPHA = 1.0
FAILED: dict[str, set[str]] = {}  # Crowd-Kit method -> exceptions it raised on some fit (left out of that set)


def common_confusion(lm: LabelMatrix, q: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """W×M×M: π̂[j, k, y] = (α + Σ_{labels (i, j, y)} q[i, k]) / (Mα + Σ_{labels (i, j, ·)} q[i, k])."""
    m = lm.n_classes
    c = np.full((lm.n_workers, m, m), alpha)
    for y in range(m):
        sel = lm.class_idx == y
        np.add.at(c[:, :, y], lm.worker_idx[sel], q[lm.task_idx[sel]])
    out: np.ndarray = c / c.sum(axis=2, keepdims=True)
    return out


def _crowdkit() -> dict[str, object]:
    try:
        import crowdkit.aggregation as agg
        import crowdkit.aggregation.classification.wawa as wawa
    except ImportError:
        return {}
    wawa.check_is_fitted = lambda *a, **k: None  # type: ignore[attr-defined]  # as in benchmarks.skills_peers
    return {"CK Wawa": agg.Wawa, "CK KOS": agg.KOS}


def _one_hot(lm: LabelMatrix, cls: object) -> np.ndarray:
    df = pd.DataFrame(
        {
            "task": np.asarray(lm.tasks)[lm.task_idx].astype(str),
            "worker": np.asarray(lm.workers)[lm.worker_idx].astype(str),
            "label": np.asarray(lm.classes)[lm.class_idx].astype(str),
        }
    )
    pred = cls().fit_predict(df)  # type: ignore[operator]
    cidx = {str(c): i for i, c in enumerate(lm.classes)}
    q = np.full((lm.n_tasks, lm.n_classes), 1.0 / lm.n_classes)  # a task the method left out: uniform
    tix = pd.Index(np.asarray(lm.tasks).astype(str)).get_indexer(pred.index.astype(str))
    q[tix] = 0.0
    q[tix, [cidx[str(v)] for v in pred.to_numpy()]] = 1.0
    return q


def posteriors(lm: LabelMatrix, o: SkillsOptions, ck: dict[str, object]) -> dict[str, A.Predictive]:
    """Every method's law on these labels: our candidates' own (posterior + own workers), CK's one-hot."""
    out: dict[str, A.Predictive] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for nm in OWN:
            out[nm] = A.CANDIDATES[nm].fit(lm, o)
        for nm, cls in ck.items():
            if nm == "CK KOS" and lm.n_classes != 2:
                continue
            try:
                q = _one_hot(lm, cls)
            except Exception as exc:  # e.g. KOS's KeyError on a task with a zero message: left out, said why
                FAILED.setdefault(nm, set()).add(type(exc).__name__)
                continue
            out[nm] = A.Predictive(q, common_confusion(lm, q))
    return out


def one_set(labels: pd.DataFrame, truth: pd.DataFrame, ck: dict[str, object]) -> dict[str, object]:
    o = SkillsOptions()
    lm, _ = prepare_labels(labels)
    folds = A.fold_ids(lm, 5, 0)
    own: dict[str, list[np.ndarray]] = {}
    common: dict[str, list[np.ndarray]] = {}
    for f in range(5):
        out = folds == f
        train = A._subset(lm, ~out)
        ti, wi, yi = lm.task_idx[out], lm.worker_idx[out], lm.class_idx[out]
        for nm, p in posteriors(train, o, ck).items():
            if nm in OWN:
                own.setdefault(nm, []).append(A.heldout_log_lik(p, ti, wi, yi))
            q = p.posteriors
            common.setdefault(nm, []).append(A.heldout_log_lik(A.Predictive(q, common_confusion(train, q)), ti, wi, yi))
    err = {}
    for nm, p in posteriors(lm, o, ck).items():
        lab = np.asarray(lm.classes)[p.posteriors.argmax(axis=1)]
        err[nm] = prediction_error(pd.DataFrame({"task": np.asarray(lm.tasks).astype(str), "label": lab}), truth)
    own_m = {nm: float(np.concatenate(v).mean()) for nm, v in own.items()}
    com_m = {nm: float(np.concatenate(v).mean()) for nm, v in common.items() if len(v) == 5 and nm in err}
    err = {nm: e for nm, e in err.items() if nm in com_m}
    return {"own": own_m, "common": com_m, "err": err, "labels": lm.n_labels}


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    ck = _crowdkit()
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    rows = []
    for folder in gold_sets(args.only):
        labels, truth = read_gold_set(folder)
        if labels["label"].nunique() > 20:
            continue
        r = one_set(labels, truth, ck)
        err, own, com = r["err"], r["own"], r["common"]  # type: ignore[assignment]
        p_own = max(own, key=lambda n: own[n])  # type: ignore[arg-type, index]
        p_com = max(com, key=lambda n: com[n])  # type: ignore[arg-type, index]
        best = min(err, key=lambda n: err[n])  # type: ignore[arg-type, index]
        name = set_name(folder)
        row: dict[str, object] = {"data": name, "labels": r["labels"]}
        for nm in err:  # type: ignore[union-attr]
            row[f"{nm} own"] = own.get(nm, np.nan)  # type: ignore[union-attr]
            row[f"{nm} common"] = com[nm]  # type: ignore[index]
            row[f"{nm} gold"] = err[nm]  # type: ignore[index]
        row.update(
            {
                "own-law pick": p_own,
                "own-law pick gold": err[p_own],  # type: ignore[index]
                "common-law pick": p_com,
                "common-law pick gold": err[p_com],  # type: ignore[index]
                "best on gold": best,
                "best gold": err[best],  # type: ignore[index]
            }
        )
        rows.append(row)
        print(f"  {folder.name}: own {p_own}, common {p_com}, best {best}", flush=True)
    df = pd.DataFrame(rows)
    secs, load1 = time.perf_counter() - t0, os.getloadavg()[0]
    text = report(df, secs, load0, load1)
    print(text)
    if not args.no_write:
        OUT.write_text(text + "\n")
    return text


def report(df: pd.DataFrame, secs: float, load0: float, load1: float) -> str:
    def f(v: object) -> str:
        if isinstance(v, float | np.floating):
            return "" if np.isnan(v) else f"{v:.4f}"
        return str(v)

    methods = [
        c.removesuffix(" gold") for c in df.columns if c.endswith(" gold") and "pick" not in c and "best" not in c
    ]
    cols = ["data", "labels"]
    for m in methods:
        cols += [c for c in (f"{m} own", f"{m} common", f"{m} gold") if c in df.columns]
    cols += [
        "own-law pick",
        "own-law pick gold",
        "common-law pick",
        "common-law pick gold",
        "best on gold",
        "best gold",
    ]
    head = "| " + " | ".join(cols) + " |\n|" + "|".join("---" for _ in cols) + "|"
    body = "\n".join("| " + " | ".join(f(r[c]) for c in cols) + " |" for _, r in df.iterrows())
    n = len(df)
    own_mean, com_mean = float(df["own-law pick gold"].mean()), float(df["common-law pick gold"].mean())
    own_hit = int((df["own-law pick gold"] <= df["best gold"] + 1e-12).sum())
    com_hit = int((df["common-law pick gold"] <= df["best gold"] + 1e-12).sum())
    return "\n".join(
        [
            "# `auto`: each candidate's own law vs one common worker law (issue #35, part 1)",
            "",
            f"`python -m benchmarks.skills_auto_common_law` ({secs:.0f} s; 1-min load average {load0:.1f} at the "
            f"start, {load1:.1f} at the end; 2 cores shared). Method and rationale: the module docstring. Columns: "
            "`<method> own` = mean held-out log-likelihood under the method's own law (the library's score; our "
            "candidates only), `<method> common` = under the common full-confusion law (α = 1) fitted from the "
            "method's training-fold posterior, `<method> gold` = gold error of the method on all labels.",
            "",
            f"Over {n} sets: own-law arg-max (the library's rule) mean gold error **{own_mean:.4f}**, best on gold "
            f"on {own_hit}; common-law arg-max (with Crowd-Kit KOS and Wawa as candidates) **{com_mean:.4f}**, "
            f"best on gold on {com_hit}.",
            "",
            head,
            body,
            "",
            "Empty `common` / `gold` cells: the method does not apply (KOS: binary sets only) or raised on a fit of "
            "that set and is left out of it"
            + (f" ({'; '.join(f'{k}: {sorted(v)}' for k, v in FAILED.items())})" if FAILED else "")
            + ". Empty `own` cells: Crowd-Kit's methods have no worker likelihood of their own.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
