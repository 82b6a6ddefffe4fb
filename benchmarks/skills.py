"""Skills benchmarks: the real-data table (vs. Crowd-Kit), the synthetic crowds, the scale table and paper Table 2.

Run: ``python -m benchmarks.skills`` (``--skip-real`` / ``--skip-family`` / ``--skip-scale`` /
``--skip-table2``; ``--sizes 5 6 7``; ``--table2-runs 50 --table2-alt-runs 20``). The parts are
``benchmarks.skills_real`` (writes ``results/skills_real.md``), ``benchmarks.skills_family`` (the default
on the design and confirmation families of synthetic crowds vs. Crowd-Kit DS; writes
``results/skills_family.md``), ``benchmarks.skills_scale`` (writes ``results/skills_scale.md``) and
``benchmarks.skills_table2`` (paper Table 2: star plus one triangle, noise injected into C; writes its own
section of ``results/skills.md``); see their docstrings. Only Table 2:
``python -m benchmarks.skills --skip-real --skip-family --skip-scale``.
"""

from __future__ import annotations

import argparse

from benchmarks import skills_family, skills_real, skills_scale, skills_table2


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-family", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="*", default=[5, 6, 7])
    ap.add_argument("--skip-table2", action="store_true")
    ap.add_argument("--table2-runs", type=int, default=50)
    ap.add_argument("--table2-alt-runs", type=int, default=20)
    args = ap.parse_args(argv)
    if not args.skip_real:
        skills_real.main(["--repeats", str(args.repeats), "--slow-ck-max-labels", "30000"])
    if not args.skip_family:
        skills_family.main([])
    if not args.skip_scale:
        skills_scale.main(["--sizes", *map(str, args.sizes)])
    if not args.skip_table2:
        skills_table2.main(["--runs", str(args.table2_runs), "--alt-runs", str(args.table2_alt_runs)])


if __name__ == "__main__":
    main()
