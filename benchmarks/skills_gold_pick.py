"""``method: auto`` with gold answers on the public sets, cross-fitted over the whole procedure (issue #35, task
i35-goldpick): a section of ``benchmarks/results/skills_real.md`` (run by ``python -m benchmarks.skills_real``).

Every gold task of the set is a known answer (``gold_in_fit``, ``gold_folds`` = 5, seed 0). Two columns, both scored
only on labels that neither the choice nor the fit that produced them saw the answer of:

- ``auto + gold (cross-fitted)``: the whole procedure (:func:`crowdflow.skills.gold.cross_fit` with ``method:
  auto``): for each fold of the gold tasks, the gold rule (:mod:`crowdflow.skills.gold_pick`) is shown the other
  folds' answers only, the chosen candidate is refitted with them pinned (``ds``/``onecoin_ds``; ``mv`` takes no
  gold), and its labels of the fold's tasks are scored. What a team that gives all its gold gets on tasks like its
  gold, including the help of the pinned answers themselves (80 % of the set's gold in each run);
- ``gold choice only (cross-fitted)``: the same folds and the same choices, but the chosen candidate's labels from
  its fit WITHOUT gold: the effect of the choice alone, on the same footing as every peer (no peer uses gold).
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.metrics import gold_metrics
from crowdflow.skills import SkillsOptions, prepare_labels
from crowdflow.skills.fit import prepare_auto
from crowdflow.skills.gold import cross_fit, fold_ids, gold_codes

GOLD = "auto + gold (cross-fitted)"
CHOICE = "gold choice only (cross-fitted)"
TOL = 0.005


def auto_gold_cells(labels: pd.DataFrame, truth: pd.DataFrame) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """The two columns' errors, the run's pick and each fold's, and the two sets of scored labels (task, label)."""
    lm, _ = prepare_labels(labels)
    o = SkillsOptions(gold_in_fit=True, spectral=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = cross_fit(lm, o, truth)
        parts = prepare_auto(lm, o)  # gold-free and deterministic: the same fits cross_fit used
    meta = res.metadata
    scored = res.gold_scored
    assert scored is not None
    _, has = gold_codes(lm, truth)
    folds = fold_ids(has, int(meta["gold_folds"]), o.seed)
    tasks = np.asarray(lm.tasks, dtype=str)
    kept = []
    for f, choice in enumerate(meta["gold_fold_choices"]):
        cons = parts.fits[choice].consensus.astype({"task": str}).set_index("task")["label"]
        kept.append(pd.DataFrame({"task": tasks[folds == f], "label": cons.loc[tasks[folds == f]].to_numpy()}))
    choice_only = pd.concat(kept, ignore_index=True)
    counts = Counter(meta["gold_fold_choices"])
    gold = truth.drop_duplicates("task")
    cells = {
        GOLD: gold_metrics(scored, gold).error,
        CHOICE: gold_metrics(choice_only, gold).error,
        "gold pick": f"{meta['auto_choice']} ({meta['auto_gold']['rule']})",
        "fold picks": ", ".join(f"{c}×{n}" for c, n in counts.most_common()),
        "gold rule note": meta["auto_gold"]["note"],
    }
    return cells, scored[["task", "label"]], choice_only


def gold_pick_section(
    df: pd.DataFrame, best: dict[str, tuple[str, float]], paired: dict[str, dict[str, tuple[int, int, float]]]
) -> list[str]:
    """Per set: the no-gold default, the two gold columns, the best peer, each gold column's gap to it and the exact
    McNemar test of that gap; whether each is within best peer + 0.005."""
    from benchmarks.skills_real import markdown

    rows = []
    for _, r in df.iterrows():
        name = str(r["data"])
        if name not in best or not isinstance(r.get(GOLD), float):
            continue
        peer, err = best[name]
        row: dict[str, Any] = {
            "data": name if r.get("tuned on", True) else f"{name} (not tuned on)",
            "gold": r["gold"],
            "default (no gold)": r["default"],
            "auto pick": r["auto pick"],
            "gold pick": r["gold pick"],
            "fold picks": r["fold picks"],
            GOLD: r[GOLD],
            CHOICE: r[CHOICE],
            "best peer": peer,
            "best peer error": err,
        }
        for col, short in ((GOLD, "auto + gold"), (CHOICE, "choice only")):
            only_a, only_b, p = paired[name][col]
            row[f"{short} − best"] = float(r[col]) - err
            row[f"{short} within +{TOL}"] = "yes" if float(r[col]) - err <= TOL + 1e-12 else "NO"
            row[f"{short} only wrong / peer only wrong, p"] = f"{only_a} / {only_b}, {p:.3f}"
        rows.append(row)
    if not rows:
        return []
    t = pd.DataFrame(rows)
    means = {c: float(t[c].mean()) for c in ("default (no gold)", GOLD, CHOICE, "best peer error")}
    fails = {s: t.loc[t[f"{s} within +{TOL}"] == "NO", "data"].tolist() for s in ("auto + gold", "choice only")}
    switched = t.loc[t["gold pick"].str.endswith("(gold)"), "data"].tolist()
    mean_row = {"data": "**mean**", **means}
    lines = [
        "## Method auto with the gold answers, cross-fitted over the whole procedure (issue #35, i35-goldpick)",
        "",
        "Every gold task of the set is a known answer (`gold_in_fit`, 5 folds of the gold tasks, seed 0). "
        f'`{GOLD}`: for each fold, the gold rule (docs/methods/skills.md §7.4, "With gold answers": a candidate '
        "replaces the held-out likelihood pick only if it gets more gold tasks right and the one-sided exact sign "
        "test on the gold tasks only one of the two gets right gives p ≤ 0.05 / 3) sees only the other folds' "
        "answers, the chosen candidate is refitted with them pinned (ds, onecoin_ds; mv takes none), and its labels "
        "of the fold's tasks are scored: every scored label comes from a choice and a fit that never saw its answer. "
        "It includes what the pinned answers themselves add (each run sees 80 % of the set's gold), which no peer "
        f"gets. `{CHOICE}`: the same folds and choices, the chosen candidate's labels from its fit without gold: the "
        "choice alone, on the peers' footing. `gold pick`: the choice with all the gold (what a run outputs) and the "
        "rule that made it; `fold picks`: the choice in each fold's run. `only wrong / peer only wrong, p`: gold tasks "
        "only that column / only the best peer gets wrong, exact two-sided McNemar p. `default (no gold)` and its "
        "claims (the table above) are unchanged.",
        "",
        f"Within best peer + {TOL}: auto + gold on {len(t) - len(fails['auto + gold'])} of {len(t)} sets"
        + (f" (not on {', '.join(fails['auto + gold'])})" if fails["auto + gold"] else "")
        + f"; choice only on {len(t) - len(fails['choice only'])} of {len(t)}"
        + (f" (not on {', '.join(fails['choice only'])})" if fails["choice only"] else "")
        + f". Mean error: default (no gold) {means['default (no gold)']:.4f}, auto + gold {means[GOLD]:.4f}, "
        f"choice only {means[CHOICE]:.4f}, best peer per set {means['best peer error']:.4f}. The gold overruled the "
        f"likelihood pick (with all the gold) on {len(switched)} set(s){': ' + ', '.join(switched) if switched else ''}.",
        "",
        markdown(pd.concat([t, pd.DataFrame([mean_row])], ignore_index=True), list(t.columns)),
        "",
    ]
    return lines
