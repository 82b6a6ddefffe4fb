"""Skills benchmarks: runs the real-data table (vs. Crowd-Kit) and the scale table.

Run: ``python -m benchmarks.skills`` (``--skip-real`` / ``--skip-scale``; ``--sizes 5 6 7``).
The two halves are ``benchmarks.skills_real`` (writes ``results/skills_real.md``) and
``benchmarks.skills_scale`` (writes ``results/skills_scale.md``); see their docstrings.
"""

from __future__ import annotations

import argparse

from benchmarks import skills_real, skills_scale


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="*", default=[5, 6, 7])
    args = ap.parse_args(argv)
    if not args.skip_real:
        skills_real.main(["--repeats", str(args.repeats)])
    if not args.skip_scale:
        skills_scale.main(["--sizes", *map(str, args.sizes)])


if __name__ == "__main__":
    main()
