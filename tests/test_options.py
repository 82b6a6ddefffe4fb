"""The options base (crowdflow.contracts.options.Options): frozen, strict keys, finite floats, validated overrides."""

from __future__ import annotations

import math

import pytest
from pydantic import Field, ValidationError

from crowdflow.contracts.options import Options


class _Demo(Options):
    """Options of a toy method."""

    step: float = Field(0.5, gt=0.0, le=1.0, description="step size")
    rounds: int = Field(10, ge=1, description="number of rounds")
    mode: str = Field("a", description="a mode")


def test_defaults_and_overrides_are_validated() -> None:
    assert _Demo.resolve() == _Demo()
    o = _Demo.resolve(rounds=3)
    assert (o.step, o.rounds) == (0.5, 3)
    o2 = _Demo.resolve(o, step=0.25)
    assert (o2.step, o2.rounds) == (0.25, 3)  # the override keeps what the first object set
    assert _Demo.resolve(o) is o
    with pytest.raises(ValidationError, match="rounds"):
        _Demo.resolve(o, rounds=0)
    with pytest.raises(ValidationError, match="extra"):
        _Demo.resolve(stepp=0.1)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_floats_must_be_finite(bad: float) -> None:
    with pytest.raises(ValidationError, match="finite"):
        _Demo(step=bad)


def test_frozen_and_type_checked() -> None:
    o = _Demo()
    with pytest.raises(ValidationError, match="frozen"):
        o.step = 0.1  # type: ignore[misc]
    with pytest.raises(TypeError, match="_Demo"):
        _Demo.resolve(object())  # type: ignore[arg-type]
