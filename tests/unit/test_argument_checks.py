"""The shim's generated argument check (aot_build.load.checks), on manifest records made here:
a plain value given to a call must be the very value the variant was compiled for."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from aot_build import values
from aot_build.load.checks import CheckBuilder
from aot_build.manifest import InputTensor, Leaf, OutLeaf, Variant


def _check(value: Any) -> Any:
    """The check of a variant taking a tensor ``x`` and a plain value ``k`` compiled as ``value``."""
    leaves = (Leaf(tensor=InputTensor("float32", "cpu", (3,))), Leaf(value=values.encode(value)))
    variant = Variant(None, leaves, None, (OutLeaf("tensor"),), labels=("x", "k"))
    return CheckBuilder(variant, cuda=False).build()


@pytest.mark.parametrize(
    ("built_for", "given", "fits"),
    [
        (0.0, 0.0, True),
        (0.0, -0.0, False),  # x / k and copysign differ: the sign of zero is part of the value
        (-0.0, -0.0, True),
        (-0.0, 0.0, False),
        (0.0, 0, False),  # another type
        (1.5, 1.5, True),
        (float("nan"), float("nan"), True),
        (3, 3, True),
        (3, True, False),
    ],
)
def test_a_plain_value_must_be_the_compiled_one(built_for: Any, given: Any, fits: bool) -> None:
    check = _check(built_for)
    x = torch.zeros(3)
    result = check.fast(None, x, given)
    if fits:
        assert result == (x,)
    else:
        assert isinstance(result, int) and result >= 0
        detail = check.failures[result].explain(None, (x, given))
        was = f"{type(built_for).__name__} {built_for!r}"
        assert detail == f"k is {type(given).__name__} {given!r}, compiled for {was}"
