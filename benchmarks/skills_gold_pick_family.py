"""``method: auto`` with a share of gold answers on the synthetic crowd families (issue #35, task i35-goldpick).

Run: ``python -m benchmarks.skills_gold_pick_family [--share 0.1] [--quick]`` (writes
``benchmarks/results/skills_gold_pick_family.md`` unless ``--quick`` or ``--no-write``).

Data: the two families of ``benchmarks.skills_family`` (:func:`crowdflow.synth.skills.crowd_family`: design, seed
2024, 40 configurations + 8 corner cases; confirmation, seed 7, 40). Per crowd a random ``share`` of the tasks
(seed 0) are gold tasks whose answers are given (``gold_in_fit``); every error below is measured on the OTHER tasks,
whose answers no fit and no choice ever sees, so no cross-fitting is needed:

- ``default``: ``method: auto`` without gold (the held-out likelihood pick);
- ``auto + gold``: ``method: auto`` with the gold answers (the gold rule may replace the pick; the pick's refit pins
  the gold when it takes it);
- ``DS β=1``, ``DS β=0``, ``1-coin DS``, ``MV``: each candidate without gold; ``best candidate``: the lowest of
  those four on that crowd (known only to an oracle of the truth);
- ``oracle``: the MAP label under the true confusions and class prior.

Summary per family: mean error, worst and mean gap to the best candidate, the crowds more than 0.005 above it, and
how often the gold rule switched, and to what.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.skills_family import oracle_error  # noqa: E402
from crowdflow.skills import SkillsOptions, fit_skills, prediction_error, prepare_labels  # noqa: E402
from crowdflow.skills.gold import gold_codes  # noqa: E402
from crowdflow.synth import skills as synth  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "skills_gold_pick_family.md"
CANDIDATES = {"DS β=1": {"method": "ds"}, "DS β=0": {"method": "ds", "ds_prior": 0.0}, "1-coin DS": {"method": "onecoin_ds"}, "MV": {"method": "mv"}}  # fmt: skip
TOL = 0.005


def run(configs: list[synth.CrowdConfig], family: str, share: float) -> pd.DataFrame:
    rows = []
    for config in configs:
        data = synth.crowd_labels(config)
        lm, _ = prepare_labels(data.labels, data.classes)
        rng = np.random.default_rng(0)
        truth = data.truth.astype({"task": str, "label": str})
        is_gold = rng.random(len(truth)) < share
        gold, rest = truth[is_gold], truth[~is_gold]
        o = SkillsOptions(classes=data.classes, spectral=False)
        row: dict[str, object] = {"family": family, "crowd": config.name, "labels": len(data.labels)}
        row["gold tasks"] = int(is_gold.sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # EM may stop at its iteration cap (flagged in metadata)
            plain = fit_skills(lm, o)
            codes, _ = gold_codes(lm, gold)
            with_gold = fit_skills(lm, SkillsOptions.resolve(o, gold_in_fit=True), gold=codes)
            for name, kw in CANDIDATES.items():
                row[name] = prediction_error(fit_skills(lm, SkillsOptions.resolve(o, **kw)).consensus, rest)
        row["default"] = prediction_error(plain.consensus, rest)
        row["auto + gold"] = prediction_error(with_gold.consensus, rest)
        row["auto pick"] = plain.metadata["auto_choice"]
        row["gold pick"] = f"{with_gold.metadata['auto_choice']} ({with_gold.metadata['auto_gold']['rule']})"
        row["best candidate"] = min(float(row[n]) for n in CANDIDATES)  # type: ignore[arg-type]
        row["oracle"] = oracle_error(data)
        rows.append(row)
        print(f"  {family} {config.name} done", flush=True)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    out = {}
    for c in ["default", "auto + gold", *CANDIDATES]:
        gap = df[c] - df["best candidate"]
        out[c] = {
            "mean error": df[c].mean(),
            "mean gap to best candidate": gap.mean(),
            "worst gap": gap.max(),
            f"crowds > best + {TOL}": int((gap > TOL + 1e-12).sum()),
        }
    return pd.DataFrame(out).T


def _fmt(v: object) -> str:
    if isinstance(v, float | np.floating):
        return f"{v:.4f}" if not float(v).is_integer() or abs(float(v)) < 1 else f"{int(v)}"
    return str(v)


def _md(df: pd.DataFrame, index: bool = True) -> str:
    cols = ([df.index.name or ""] if index else []) + list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for i, r in df.iterrows():
        lines.append("| " + " | ".join(([str(i)] if index else []) + [_fmt(v) for v in r]) + " |")
    return "\n".join(lines)


def report(results: dict[str, pd.DataFrame], share: float, seconds: float, load: tuple[float, float]) -> str:
    lines = [
        "# Method auto with a share of gold answers on the synthetic families",
        "",
        f"`python -m benchmarks.skills_gold_pick_family --share {share}`; {platform.machine()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}; load average {load[0]:.1f} at the start, {load[1]:.1f} "
        f"at the end; {seconds:.0f} s. A random {share:.0%} of each crowd's tasks are gold tasks with their answers "
        "given; every error is on the other tasks, whose answers no fit or choice sees. `default`: method auto without "
        'gold; `auto + gold`: with it (docs/methods/skills.md §7.4, "With gold answers"); the four candidates '
        "without gold; `best candidate`: the lowest of the four on that crowd, which only the truth knows.",
        "",
    ]
    for family, df in results.items():
        switched = df[df["gold pick"].str.endswith("(gold)")]
        better = int((switched["auto + gold"] < switched["default"] - 1e-12).sum())
        worse = int((switched["auto + gold"] > switched["default"] + 1e-12).sum())
        gap = df["auto + gold"] - df["best candidate"]
        worst = df.loc[gap.idxmax()]
        s = summary(df)
        s.index.name = "method"
        lines += [
            f"## {family}",
            "",
            _md(s),
            "",
            f"The gold rule switched on {len(switched)} of {len(df)} crowds ({better} then lower error on the other "
            f"tasks than the no-gold default, {worse} higher); picks with gold: "
            + ", ".join(f"{k} {v}" for k, v in df["gold pick"].value_counts().items())
            + f". Worst crowd for auto + gold: {worst['crowd']} ({worst['auto + gold']:.4f} vs best candidate "
            f"{worst['best candidate']:.4f}, default {worst['default']:.4f}, {int(worst['gold tasks'])} gold tasks, "
            f"gold pick {worst['gold pick']}).",
            "",
            "<details><summary>every crowd</summary>",
            "",
            _md(df.drop(columns=["family"]), index=False),
            "",
            "</details>",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--share", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="12 configurations per family, <= 2e4 labels; no write")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    if args.quick:
        families = {
            "design family, quick": synth.crowd_family(12, 2024, max_labels=20_000, corners=False),
            "confirmation family, quick": synth.crowd_family(12, 7, max_labels=20_000, corners=False),
        }
    else:
        families = {
            "design family (seed 2024: 40 random configurations + 8 corner cases)": synth.crowd_family(40, 2024),
            "confirmation family (seed 7: 40 random configurations)": synth.crowd_family(40, 7, corners=False),
        }
    results = {name: run(configs, name, args.share) for name, configs in families.items()}
    text = report(results, args.share, time.perf_counter() - t0, (load0, os.getloadavg()[0]))
    print(text)
    if not (args.no_write or args.quick):
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
