"""The skills default on synthetic crowds: Dawid–Skene with the diagonal prior vs. Crowd-Kit and our other methods.

Run: ``python -m benchmarks.skills_family`` (writes ``benchmarks/results/skills_family.md``; ``--quick`` runs
12 configurations of each family at ≤ 2·10^4 labels and does not write).

Data: :func:`crowdflow.synth.skills.crowd_family` (docs/methods/skills.md §5.8): honest workers one-coin or
with full, asymmetric confusion matrices, spammers, adversaries, 2–5 classes, uniform or skewed class
priors, uniform or Zipf worker activity, 200–20,000 tasks, 30–10^5 labels. Two families:

- *design* (seed 2024, 40 random configurations + 8 corner cases): the family on which the default's
  β = 1 was chosen (the value with the smallest worst gap to Crowd-Kit DS there, without looking at the
  real gold sets; docs/methods/skills.md §7.3);
- *confirmation* (seed 7, 40 random configurations): drawn after β was fixed.

Per configuration, on every task (the truth is known everywhere): the default (``fit_skills`` with its
defaults: ``method: auto`` since issue #35), DS with ``ds_prior=1`` (the default before it), classic DS (``ds_prior=0``), one-coin DS, PGD-scaled and MV, each a whole
``fit_skills`` call (``spectral=False``); Crowd-Kit DawidSkene (``fit_predict``, the peer) on the same rows;
and the *oracle*, the MAP label with the true confusion matrices and class prior (the Bayes rule, a floor
no method reaches). Summary per family: mean error, mean excess over the oracle, worst and best gap to
Crowd-Kit DS, the number of configurations more than 0.005 worse than Crowd-Kit DS, and the worst gap of
the default to classic DS. Times are not compared here (see ``skills_real``).
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

from crowdflow.skills import fit_skills, prediction_error, prepare_labels  # noqa: E402
from crowdflow.synth import skills as synth  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "skills_family.md"
OURS = [
    ("default", {}),
    ("DS β=1", {"method": "ds"}),
    ("DS β=0", {"method": "ds", "ds_prior": 0.0}),
    ("1-coin DS", {"method": "onecoin_ds"}),
    ("PGD-scaled", {"method": "pgd", "solver": "scaled"}),
    ("MV", {"method": "mv"}),
]
TOL = 0.005  # the "never worse than Crowd-Kit DS by more than 0.005"


def oracle_error(data: synth.CrowdLabels) -> float:
    """Error of the MAP label under the true confusion matrices and class prior (ties to the first class)."""
    lm, _ = prepare_labels(data.labels, data.classes)
    pos = {w: i for i, w in enumerate(data.workers)}
    worker = np.array([pos[w] for w in lm.workers])[lm.worker_idx]
    log_joint = np.tile(np.log(data.class_prior), (lm.n_tasks, 1))
    np.add.at(log_joint, lm.task_idx, np.log(data.confusion[worker, :, lm.class_idx]))
    cons = pd.DataFrame({"task": lm.tasks, "label": lm.classes[log_joint.argmax(axis=1)]})
    return prediction_error(cons, data.truth)


def _crowdkit_ds(labels: pd.DataFrame) -> pd.DataFrame | None:
    try:
        from crowdkit.aggregation import DawidSkene
    except ImportError:  # the bench extra is not installed
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = DawidSkene().fit_predict(labels)
    return pd.DataFrame({"task": pred.index.astype(str), "label": pred.astype(str).to_numpy()})


def run(configs: list[synth.CrowdConfig], family: str) -> pd.DataFrame:
    rows = []
    for config in configs:
        data = synth.crowd_labels(config)
        row: dict[str, object] = {"family": family, "crowd": config.name, "labels": len(data.labels)}
        for name, options in OURS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # EM may stop at its iteration cap (flagged in metadata)
                res = fit_skills(data.labels, classes=data.classes, spectral=False, **options)
            row[name] = prediction_error(res.consensus, data.truth)
            if name == "default":
                row["auto pick"] = res.metadata.get("auto_choice", "")
        ck = _crowdkit_ds(data.labels)
        row["CK DS"] = np.nan if ck is None else prediction_error(ck, data.truth)
        row["oracle"] = oracle_error(data)
        rows.append(row)
        print(f"  {family} {config.name} done", flush=True)
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["CK DS", *[n for n, _ in OURS]]
    out = {}
    for c in cols:
        gap = df[c] - df["CK DS"]
        out[c] = {
            "mean error": df[c].mean(),
            "mean − oracle": (df[c] - df["oracle"]).mean(),
            "worst gap to CK DS": gap.max(),
            f"configs > CK DS + {TOL}": int((gap > TOL + 1e-12).sum()),
            "best gap to CK DS": gap.min(),
            "worst gap to DS β=0": (df[c] - df["DS β=0"]).max(),
        }
    table = pd.DataFrame(out).T
    count = f"configs > CK DS + {TOL}"
    table[count] = table[count].astype(int)
    return table


def _md(df: pd.DataFrame, index_name: str) -> str:
    d = df.reset_index().rename(columns={"index": index_name})

    def fmt(v: object) -> str:
        if isinstance(v, float | np.floating):
            return "" if np.isnan(v) else f"{v:.4f}"
        return str(v)

    head = "| " + " | ".join(map(str, d.columns)) + " |"
    sep = "|" + "|".join("---" for _ in d.columns) + "|"
    return "\n".join([head, sep] + ["| " + " | ".join(fmt(v) for v in r) + " |" for r in d.itertuples(index=False)])


def report(results: dict[str, pd.DataFrame], seconds: float, load: tuple[float, float]) -> str:
    try:
        import crowdkit

        ck_version = getattr(crowdkit, "__version__", "installed")
    except ImportError:
        ck_version = "not installed"
    lines = [
        "# The skills default on synthetic crowds (design and confirmation families)",
        "",
        "`python -m benchmarks.skills_family`; data `crowdflow.synth.skills.crowd_family` "
        "(docs/methods/skills.md §5.8), error over all tasks. "
        f"Machine: {platform.machine()}, Python {platform.python_version()}, numpy {np.__version__}, "
        f"Crowd-Kit {ck_version}; load average {load[0]:.1f} at the start, {load[1]:.1f} at the end; "
        f"{seconds:.0f} s.",
        "",
        "`default` = `fit_skills` with its defaults: `method: auto` since issue #35 (the candidate among DS β=1, "
        "DS β=0, 1-coin DS and MV with the best held-out label likelihood, refitted on all labels; its pick is the "
        "`auto pick` column); `DS β=1` = Dawid–Skene EM with one virtual correct answer per true class and worker "
        "(`ds_prior=1`, the default before issue #35); `DS β=0` = classic Dawid–Skene (`ds_prior=0`); `oracle` = "
        "MAP with the true parameters (the Bayes rule).",
        "",
    ]
    for family, df in results.items():
        lines += [f"## {family}", "", _md(summary(df), "method"), ""]
        worst = df.assign(gap=df["default"] - df["CK DS"]).sort_values("gap", ascending=False).head(3)
        cases = "; ".join(
            f"{r['crowd']} {r['default']:.4f} vs {r['CK DS']:.4f} (oracle {r['oracle']:.4f})"
            for _, r in worst.iterrows()
        )
        lines += [f"Largest gaps of the default to CK DS: {cases}.", ""]
    for family, df in results.items():
        cols = ["crowd", "labels", "oracle", "CK DS", *[n for n, _ in OURS], "auto pick"]
        lines += [f"### {family}: every configuration", "", _md(df[cols].set_index("crowd"), "crowd"), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="12 configurations per family, <= 2e4 labels; no write")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    if args.quick:
        families = {
            "design family (seed 2024), quick": synth.crowd_family(12, 2024, max_labels=20_000, corners=False),
            "confirmation family (seed 7), quick": synth.crowd_family(12, 7, max_labels=20_000, corners=False),
        }
    else:
        families = {
            "design family (seed 2024: 40 random configurations + 8 corner cases)": synth.crowd_family(40, 2024),
            "confirmation family (seed 7: 40 random configurations, drawn after β was fixed)": synth.crowd_family(
                40, 7, corners=False
            ),
        }
    results = {name: run(configs, name) for name, configs in families.items()}
    text = report(results, time.perf_counter() - t0, (load0, os.getloadavg()[0]))
    print(text)
    if not (args.no_write or args.quick):
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
