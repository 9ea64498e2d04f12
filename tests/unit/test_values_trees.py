"""Plain values, structures and object paths as the manifest stores them."""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
from typing import Any, NamedTuple

import pytest
import torch
from torch.utils import _pytree as pytree

from aot_build import trees, values


class Color(enum.Enum):
    RED = 1


class Point(NamedTuple):
    x: torch.Tensor
    n: int


@dataclasses.dataclass
class Box:
    value: torch.Tensor
    label: str


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -2.5,
        "s",
        (1, 2.0),
        [1, (2, None)],
        {"a": 1, 2: "b"},
        torch.float16,
        torch.device("cpu"),
        Color.RED,
        float("inf"),
        torch.Size([2, 3]),
    ],
)
def test_plain_values_round_trip_with_their_types(value: Any) -> None:
    back = values.decode(values.encode(value))
    expected = tuple(value) if isinstance(value, torch.Size) else value
    assert back == expected and type(back) is type(expected)


def test_nan_and_type_strict_equality() -> None:
    nan = values.decode(values.encode(float("nan")))
    assert math.isnan(nan) and values.same(float("nan"), nan)
    assert not values.same(1, 1.0) and not values.same(True, 1) and values.same((1, 2), (1, 2))
    assert not values.same(torch.ones(2), torch.ones(2))  # an ambiguous == is not "the same"


@pytest.mark.parametrize("value", [object(), {1, 2}, torch.ones(1), print, lambda: 1])
def test_objects_are_not_plain(value: Any) -> None:
    with pytest.raises(values.Unencodable):
        values.encode(value)
    assert not values.is_plain(value)


@pytest.mark.parametrize(
    "raw", [{"nope": 1}, {"dtype": "not_a_dtype"}, {"tuple": 3}, [1], {"enum": "x:Y", "name": "Z"}]
)
def test_decode_refuses_what_encode_never_wrote(raw: Any) -> None:
    with pytest.raises(ValueError):
        values.decode(raw)


def test_structures_come_back_as_the_same_types() -> None:
    t = torch.ones(2)
    torch.export.register_dataclass(Box)
    out = {"p": Point(t, 3), "b": Box(t, "x"), "l": [t, (t,)], "o": collections.OrderedDict(k=t)}
    leaves, spec = pytree.tree_flatten(out)
    raw = trees.encode(spec)
    assert raw["children"][0]["type"] == "namedtuple" and raw["children"][0]["context"].endswith(":Point")
    assert trees.decode(raw) == spec
    rebuilt = trees.unflattener(raw)(leaves)
    assert type(rebuilt["p"]) is Point and rebuilt["p"].n == 3
    assert type(rebuilt["b"]) is Box and rebuilt["b"].label == "x"
    assert type(rebuilt["o"]) is collections.OrderedDict and rebuilt["l"][1][0] is t


def test_local_types_cannot_be_stored() -> None:
    Local = collections.namedtuple("Local", "a")
    Local.__qualname__ = "f.<locals>.Local"
    _, spec = pytree.tree_flatten(Local(1))
    with pytest.raises(trees.TreeError, match="defined locally"):
        trees.encode(spec, "output")
