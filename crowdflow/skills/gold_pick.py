"""``method: auto`` with known answers: the gold tasks choose, guarded by an exact sign test.

docs/methods/skills.md §7.4 ("With gold answers"). Held-out likelihood (:mod:`crowdflow.skills.auto`) picks the
model that best predicts the crowd's own labels; when the crowd answers another question than the gold (the
public sets ducks_welinder and gal_trec2011_vuurens), no label-only score can see it. With ``gold_in_fit`` the
gold answers can:

1. every candidate is fitted on ALL labels WITHOUT any gold answer (one fit each, gold-free, so the same fits
   serve every fold of the cross-fitted score) and its labels of the gold tasks it is shown are compared with
   the answers;
2. against the likelihood pick L, each other candidate c has b_c gold tasks only c gets right and a_c only L gets
   right; the exact one-sided sign test (McNemar's exact test on the discordant tasks) gives

       p_c = P(X ≥ b_c),   X ~ Binomial(a_c + b_c, 1/2),

   the chance of b_c or more wins for c if c and L were equally accurate on tasks like these;
3. c may replace L only when p_c ≤ α / (C − 1) (α = ``auto_gold_level``, 0.05; Bonferroni over the C − 1
   alternatives) and every fit of c converged; among those, the one with the most gold tasks right (ties: the
   better held-out score). Otherwise L stays, and the record says so.

Small or noisy gold cannot override the likelihood pick on a coin flip: with C = 4 candidates the bound is
0.0167, so at least 6 discordant gold tasks, all for c, are needed (2⁻⁶ = 0.016); 5 gold tasks can never switch.

Why fitted without the gold rather than cross-fitted with it: ``mv`` cannot use gold, so fits without it
compare every candidate on the same footing; they are gold-free, so one fit per candidate serves the run and
every fold of the honest score (:func:`crowdflow.skills.gold.cross_fit`) instead of C fits a fold; and the
question asked is which model's latent class is the gold's, which a few pinned tasks do not change. The cost:
the refit of ``ds``/``onecoin_ds`` pins the gold and is a little better on it than the fit compared here, so
the rule leans slightly toward ``mv``; the cross-fitted score of the whole procedure shows the net effect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binom

from crowdflow.labels import LabelMatrix

__all__ = ["GoldChoice", "gold_choose", "gold_codes", "sign_test"]


def gold_codes(lm: LabelMatrix, truth: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Known answers as codes of ``lm``: (label code per task, −1 where none or not a fitted class; mask of the tasks
    that have a gold answer at all). Ids and labels compare as text, as :func:`crowdflow.metrics.gold_metrics` does
    (the gold cross-fit's answers, and a candidate's consensus labels for the gold rule)."""
    gold = truth[["task", "label"]].dropna().astype({"task": str, "label": str}).drop_duplicates("task")
    tasks = pd.Index(np.asarray(lm.tasks, dtype=str)).get_indexer(pd.Index(gold["task"]))
    labels = pd.Index(np.asarray(lm.classes, dtype=str)).get_indexer(pd.Index(gold["label"]))
    codes = np.full(lm.n_tasks, -1, dtype=np.int64)
    has = np.zeros(lm.n_tasks, dtype=bool)
    inside = tasks >= 0
    codes[tasks[inside]] = labels[inside]
    has[tasks[inside]] = True
    return codes, has


def sign_test(wins: int, losses: int) -> float:
    """Exact one-sided sign test: P(X ≥ wins), X ~ Binomial(wins + losses, 1/2); 1.0 with no discordant task."""
    n = wins + losses
    return float(binom.sf(wins - 1, n, 0.5)) if n > 0 else 1.0


@dataclass(frozen=True)
class GoldChoice:
    """The outcome of the gold rule.

    Attributes
    ----------
    choice : str
        The chosen candidate.
    likelihood_choice : str
        The held-out likelihood pick (what ``auto`` chooses without gold).
    rule : str
        ``"gold"`` when the gold answers replaced the likelihood pick, else ``"likelihood"``.
    scores : pandas.DataFrame
        One row per candidate: candidate, n_gold, n_right, accuracy, wins (gold tasks only it gets right against
        the likelihood pick), losses (only the likelihood pick gets right), p_value (one-sided exact sign test),
        converged, eligible (p_value ≤ threshold and converged), chosen.
    level, threshold : float
        α and α / (C − 1).
    note : str
        Why the choice is what it is, in one sentence.
    """

    choice: str
    likelihood_choice: str
    rule: str
    scores: pd.DataFrame
    level: float
    threshold: float
    note: str

    def record(self) -> dict[str, Any]:
        """The manifest entry (JSON-ready)."""
        rows = [
            {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in self.scores.to_dict(orient="records")
        ]
        return {
            "choice": self.choice,
            "likelihood_choice": self.likelihood_choice,
            "rule": self.rule,
            "level": self.level,
            "threshold": self.threshold,
            "note": self.note,
            "candidates": rows,
        }


def gold_choose(
    labels: Mapping[str, np.ndarray],
    gold: np.ndarray,
    likelihood_choice: str,
    level: float,
    converged: Mapping[str, bool] | None = None,
    order: Sequence[str] | None = None,
) -> GoldChoice:
    """Choose among candidates by their labels on the gold tasks, guarded by the sign test (module docstring).

    Parameters
    ----------
    labels : mapping
        Candidate → label code of every task (length T), from its fit without gold.
    gold : numpy.ndarray
        Known answer code of every task, −1 where unknown (or not shown to this choice).
    likelihood_choice : str
        The held-out likelihood pick, a key of ``labels``.
    level : float
        α; 0 never switches.
    converged : mapping, optional
        Candidate → whether its fit converged (default: all did).
    order : sequence, optional
        Candidates by held-out score, best first: breaks ties in gold accuracy (default: the order of ``labels``).
    """
    names = list(labels)
    ok = dict.fromkeys(names, True) | dict(converged or {})
    rank = {n: i for i, n in enumerate(order or names)}
    known = gold >= 0
    right = {n: (np.asarray(labels[n]) == gold) & known for n in names}
    base = right[likelihood_choice]
    threshold = level / max(len(names) - 1, 1)
    rows: list[dict[str, Any]] = []
    for n in names:
        wins, losses = int((right[n] & ~base).sum()), int((base & ~right[n]).sum())
        p = sign_test(wins, losses)
        rows.append(
            {
                "candidate": n,
                "n_gold": int(known.sum()),
                "n_right": int(right[n].sum()),
                "accuracy": float(right[n].sum() / known.sum()) if known.any() else float("nan"),
                "wins": wins,
                "losses": losses,
                "p_value": p,
                "converged": bool(ok[n]),
                "eligible": bool(n != likelihood_choice and wins > losses and p <= threshold and ok[n]),
            }
        )
    table = pd.DataFrame(rows)
    eligible = [r for r in rows if r["eligible"]]
    if eligible:
        best = min(eligible, key=lambda r: (-int(r["n_right"]), rank.get(str(r["candidate"]), len(rank))))
        choice, rule = str(best["candidate"]), "gold"
        note = (
            f"the gold answers chose {choice}: {best['wins']} gold tasks only it gets right against {best['losses']} "
            f"only {likelihood_choice} (the held-out likelihood pick) gets right, one-sided exact sign test p = "
            f"{float(best['p_value']):.2g} ≤ {threshold:.3g} (α = {level:g} over {len(names) - 1} alternatives)"
        )
    else:
        choice, rule = likelihood_choice, "likelihood"
        top = table[table["candidate"] != likelihood_choice].sort_values("p_value", kind="stable").head(1)
        if known.sum() == 0:
            note = "no gold task to compare on: the held-out likelihood pick stays"
        elif len(top):
            t = top.iloc[0]
            c, p, w, lo = str(t["candidate"]), float(t["p_value"]), int(t["wins"]), int(t["losses"])
            if w > lo and p <= threshold:  # significant but not eligible: it did not converge
                note = (
                    f"{c} beats {likelihood_choice} on the gold ({w} vs {lo} discordant gold tasks, p = {p:.2g}) but "
                    f"stopped at its iteration cap: the held-out likelihood pick {likelihood_choice} stays"
                )
            else:
                note = (
                    f"the gold answers do not overrule the held-out likelihood pick {likelihood_choice}: the strongest "
                    f"alternative, {c}, has {w} gold tasks only it gets right against {lo}, p = {p:.2g} > "
                    f"{threshold:.3g}"
                )
        else:
            note = "one candidate: nothing to compare"
    table["chosen"] = table["candidate"] == choice
    return GoldChoice(choice, likelihood_choice, rule, table, float(level), float(threshold), note)
