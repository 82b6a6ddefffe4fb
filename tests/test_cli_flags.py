"""Every per-job CLI flag reaches the spec the run receives (issue #24: options declared once).

The flags of ``crowdflow skills|rank|personal-rank|personal-models|assign|next-batch`` are generated from the
job's options model and ``ChecksSpec``. This test walks every generated flag of every command, gives it a valid
value different from the model's default (another choice, the other boolean, a number inside the field's range;
a flag that needs a companion setting, such as ``--eta`` with ``--solver gd``, gets the first one that makes the
spec valid), builds the spec exactly as the command does, and checks that the field holds that value. Before,
``crowdflow skills --solver gd`` was declared but never read, so the run silently used ``scaled``.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

import pytest

from crowdflow.contracts.errors import SpecError
from crowdflow.spec import JOB_INPUTS, JOB_OPTIONS
from flows.cli import JOB_COMMANDS, build_parser, spec_from_args

NUMBERS = ["2", "3", "0.5", "0.1", "10", "1e-3", "100", "1e-9", "0.9", "7", "1000", "0.01", "50000"]
SEQUENCES = ["a,b", "0.1,0.2", "2,4", "x1,x2", "ds,mv"]  # the last: a list of method names (auto_candidates)


def _subparser(command: str) -> argparse.ArgumentParser:
    actions = build_parser()._subparsers._group_actions  # type: ignore[union-attr]
    return actions[0].choices[command]


def _base(command: str, job: str) -> list[str]:
    required, _ = JOB_INPUTS[job]
    argv = [command, "--out", "out"]
    for kind in required:
        argv += ["--" + kind.replace("_", "-"), f"{kind}.csv"]
    if job == "next_batch":
        argv += ["--skills-run", "skills-out"]
    return argv


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.dest.count(".") == 1 and not a.dest.startswith("input.")]


def _candidates(action: argparse.Action) -> list[list[str]]:
    flag = action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [[flag], [action.option_strings[1]]]
    if isinstance(action, argparse._StoreConstAction):
        return [[flag]]
    if action.choices:
        return [[flag, str(c)] for c in action.choices]
    if str(action.metavar).startswith("NAME=VALUE"):  # a mapping (crowdkit_params: reached with a crowdkit method)
        return [[flag, "n_iter=5"]]
    if action.metavar and str(action.metavar).endswith("[,...]"):
        return [[flag, v] for v in SEQUENCES]
    if "ADDRESS" in str(action.metavar):
        return [[flag, "tcp://127.0.0.1:8786"]]
    return [[flag, v] for v in NUMBERS]


def _value(spec: Any, dest: str) -> Any:
    block, field = dest.split(".")
    return getattr(getattr(spec, block), field)


CASES = [(command, job) for command, (job, _) in JOB_COMMANDS.items()]


@pytest.mark.parametrize(("command", "job"), CASES, ids=[c for c, _ in CASES])
def test_every_flag_changes_the_spec_the_run_receives(command: str, job: str) -> None:
    parser = build_parser()
    sub = _subparser(command)
    base_args = parser.parse_args(_base(command, job))
    default_spec = spec_from_args(base_args)
    companions = [
        c for a in _flags(sub) if a.choices or isinstance(a, argparse.BooleanOptionalAction) for c in _candidates(a)
    ]
    flags = _flags(sub)
    assert {a.dest.split(".")[0] for a in flags} == {JOB_OPTIONS[job], "checks"}
    unreached = []
    for action in flags:
        default = _value(default_spec, action.dest)
        reached = False
        for extra, cand in itertools.product([[], *companions], _candidates(action)):
            if extra and extra[0] == cand[0]:
                continue
            try:
                spec = spec_from_args(parser.parse_args([*_base(command, job), *extra, *cand]))
            except (SpecError, SystemExit):
                continue
            got = _value(spec, action.dest)
            if got != default:
                reached = True
                break
        if not reached:
            unreached.append(action.option_strings[0])
    assert unreached == [], f"{command}: flags that never change the spec: {unreached}"


def test_solver_flag_reaches_the_skills_fit() -> None:
    """The bug the issue names: --solver gd was declared and dropped."""
    args = build_parser().parse_args(["skills", "--labels", "l.csv", "--out", "o", "--solver", "gd", "--eta", "0.01"])
    spec = spec_from_args(args)
    assert spec.skills.solver == "gd" and spec.skills.eta == 0.01


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["personal-rank", "--comparisons", "c.csv", "--out", "o", "--rank", "abc"], "personal_rankings.rank"),
        (["personal-rank", "--comparisons", "c.csv", "--out", "o", "--seed", "-1"], "personal_rankings.seed"),
        (["skills", "--labels", "l.csv", "--out", "o", "--eta", "0.01"], "skills"),
        (["skills", "--labels", "l.csv", "--out", "o", "--solver", "eg"], "skills"),
        (["rank", "--comparisons", "c.csv", "--out", "o", "--kappa", "inf"], "ranking.kappa"),
    ],
)
def test_bad_flag_values_are_spec_errors(argv: list[str], words: str) -> None:
    with pytest.raises(SpecError, match=words):
        spec_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize("command", sorted(JOB_COMMANDS))
def test_every_commands_help_renders(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``crowdflow <command> --help`` prints every generated flag and exits 0: a description holding ``%`` (argparse
    formats help with it) once crashed ``crowdflow rank --help``; flows.cli._help escapes it for every field."""
    from flows.cli import main

    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: crowdflow {command}") and "--out" in out


def test_a_percent_in_a_description_survives_argparse() -> None:
    from flows.cli import _help

    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--budget", help=_help("flag at most 5 % of the weight (default: 0.05)"))
    assert "5 % of the weight" in parser.format_help()
