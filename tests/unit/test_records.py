"""aot_build.records: record classes behave as the dataclasses they replace on the run path."""

from __future__ import annotations

import dataclasses
import gc
import re
from dataclasses import field
from typing import Any, ClassVar, NamedTuple

import pytest

from aot_build import collector
from aot_build.records import TupleRecord, record


def _pair(frozen: bool) -> tuple[type, type]:
    """The same class as a @dataclass and as a @record."""

    def body(decorate: Any) -> type:
        @decorate
        class Point:
            """A point."""

            KIND: ClassVar[str] = "point"
            x: int
            y: int = 0
            tags: list[str] = field(default_factory=list)
            note: str = field(default="", compare=False, repr=False)

            def norm(self) -> int:
                return abs(self.x) + abs(self.y)

        return Point

    return body(dataclasses.dataclass(frozen=frozen)), body(record(frozen=frozen))


@pytest.mark.parametrize("frozen", [False, True])
def test_a_record_behaves_as_the_dataclass(frozen: bool) -> None:
    dc, rc = _pair(frozen)
    for args, kwargs in [((1,), {}), ((1, 2), {}), ((), {"x": 3, "tags": ["a"]}), ((1, 2, ["t"], "n"), {})]:
        d, r = dc(*args, **kwargs), rc(*args, **kwargs)
        assert repr(r) == repr(d)
        assert dataclasses.asdict(r) == dataclasses.asdict(d)
        assert r.norm() == d.norm()
        assert (r == rc(*args, **kwargs)) and not (r == d)  # another class is never equal
    assert [f.name for f in dataclasses.fields(rc)] == [f.name for f in dataclasses.fields(dc)]
    assert dataclasses.is_dataclass(rc) and dataclasses.is_dataclass(rc(1))
    assert rc(1, note="a") == rc(1, note="b")  # compare=False
    assert rc(1) != rc(2)
    assert rc(1).tags is not rc(1).tags  # a fresh default per instance
    assert dataclasses.replace(rc(1, 2), y=5) == rc(1, 5)
    assert rc.KIND == "point" and "KIND" not in [f.name for f in dataclasses.fields(rc)]
    assert rc.__match_args__ == dc.__match_args__
    looped, looped_dc = rc(1), dc(1)
    looped.tags.append(looped)
    looped_dc.tags.append(looped_dc)
    assert repr(looped) == repr(looped_dc) and repr(looped).endswith("Point(x=1, y=0, tags=[...])")
    if frozen:
        assert hash(rc(1, 2, ("a",))) == hash(rc(1, 2, ("a",)))  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            rc(1).x = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del rc(1).x
    else:
        with pytest.raises(TypeError):
            hash(rc(1))  # as a dataclass with eq: unhashable
        r = rc(1)
        r.x = 7
        assert r.x == 7


def test_records_pickle_and_copy() -> None:
    """Records cross process boundaries (build workers, a backend's own pool) and get copied."""
    import copy
    import pickle

    from aot_build.guards.tree import TensorSpec
    from aot_build.manifest import Artifact

    for obj in (Artifact("cpu-avx2", "cpu", "aoti", "x.so"), TensorSpec((2, 3), "float32", "cpu", (3, 1))):
        for again in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)):
            assert again == obj and again is not obj
    spec = TensorSpec((2,), "float32", "cpu", (1,))
    assert hash(pickle.loads(pickle.dumps(spec))) == hash(spec)


def test_bad_calls_raise_as_a_function_would() -> None:
    _, rc = _pair(False)
    with pytest.raises(TypeError, match="missing argument 'x'"):
        rc()
    with pytest.raises(TypeError, match="unexpected argument 'z'"):
        rc(1, z=2)
    with pytest.raises(TypeError, match="given by position too"):
        rc(1, x=2)
    with pytest.raises(TypeError, match="takes 4 arguments, 5 given"):
        rc(1, 2, [], "", 5)


def test_options_post_init_and_refused_classes() -> None:
    @record(repr=False, eq=False)
    class Plain:
        a: int

        def __post_init__(self) -> None:
            self.doubled = self.a * 2

    p = Plain(2)
    assert p.doubled == 4
    assert repr(p).startswith("<") and p != Plain(2) and hash(p)  # object's repr, eq and hash

    with pytest.raises(TypeError, match="non-default field 'b' follows a default one"):

        @record
        class Bad:
            a: int = 0
            b: int

    with pytest.raises(
        ValueError, match=r"mutable default list for field 'a'; use field\(default_factory=list\)"
    ):

        @record
        class Shared:
            a: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="init=False and kw_only need @dataclass"):

        @record
        class Hidden:
            a: int = field(default=0, init=False)

    @record
    class Base:
        a: int

    with pytest.raises(TypeError, match="fields inherited from"):

        @record
        class Child(Base):
            b: int


class _NamedPair(NamedTuple):
    """A pair."""

    kind: str
    expect: Any = None

    def shout(self) -> str:
        return self.kind.upper()


class _RecordPair(TupleRecord):
    """A pair."""

    kind: str
    expect: Any = None

    def shout(self) -> str:
        return self.kind.upper()


def test_a_tuple_record_behaves_as_the_named_tuple() -> None:
    import copy
    import pickle

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("eq",), {}),
        (("eq", 3), {}),
        ((), {"kind": "len", "expect": [1]}),
        (("a",), {"expect": 0}),
    ]
    for args, kwargs in calls:
        n, r = _NamedPair(*args, **kwargs), _RecordPair(*args, **kwargs)
        assert repr(r) == repr(n).replace("_NamedPair", "_RecordPair")
        assert r == n and tuple(r) == tuple(n) and isinstance(r, tuple)  # equal as tuples, as a NamedTuple is
        assert (r.kind, r.expect) == (n.kind, n.expect) and r[0] == n[0] and len(r) == len(n)
        kind, expect = r
        assert (kind, expect) == tuple(n)
        assert r._asdict() == n._asdict()
        assert r._replace(expect=9) == n._replace(expect=9) and type(r._replace(expect=9)) is _RecordPair
        assert r.shout() == n.shout()
        for copied in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
            assert copied == r and type(copied) is _RecordPair
    assert hash(_RecordPair("eq", 3)) == hash(_NamedPair("eq", 3))
    assert _RecordPair._fields == _NamedPair._fields
    assert _RecordPair.__match_args__ == _NamedPair.__match_args__
    assert _RecordPair._field_defaults == _NamedPair._field_defaults
    assert _RecordPair._make(["eq", 1]) == _NamedPair._make(["eq", 1])
    assert tuple.__new__(_RecordPair, ("id", 2)).expect == 2  # how the tree parser makes them
    with pytest.raises(AttributeError):
        _RecordPair("eq").kind = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _RecordPair("eq").other = 1  # type: ignore[attr-defined]  # no instance dict
    for bad_args, bad_kwargs, message in [
        ((), {}, "missing argument 'kind'"),
        (("a", 1, 2), {}, "takes 2 arguments, 3 given"),
        (("a",), {"kind": "b"}, "unexpected argument 'kind' (given by position too)"),
        (("a",), {"other": 1}, "unexpected argument 'other'"),
    ]:
        with pytest.raises(TypeError, match=re.escape(message)):
            _RecordPair(*bad_args, **bad_kwargs)
    with pytest.raises(TypeError, match="expected 2 values, got 1"):
        _RecordPair._make(["eq"])
    with pytest.raises(TypeError, match="non-default field 'b' follows a default one"):

        class Bad(TupleRecord):
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="inheriting"):

        class Mixed(TupleRecord, Exception):  # type: ignore[misc]
            a: int


def test_the_collector_pauses_and_restores() -> None:
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer one's pause
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()  # a caller's own pause is kept
    finally:
        gc.enable()
    with pytest.raises(KeyError), collector.paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_the_run_path_defines_no_dataclass_and_imports_no_build_module() -> None:
    """What a first call imports: the shim's modules define their data classes as records
    (a @dataclass costs 150-500 µs to define, a typing.NamedTuple 150-240 µs) and import
    nothing of the build side."""
    import subprocess
    import sys

    code = (
        "import sys, dataclasses, torch\n"
        "before = set(sys.modules)\n"
        "import aot_build.load.shim\n"
        "new = sorted(m for m in sys.modules if m not in before and m.startswith('aot_build'))\n"
        "print(' '.join(new))\n"
        "for m in new:\n"
        "    for v in list(vars(sys.modules[m]).values()):\n"
        "        if isinstance(v, type) and v.__module__ == m and '__dataclass_params__' in vars(v):\n"
        "            print('DATACLASS', m, v.__qualname__)\n"
        "        ours = isinstance(v, type) and v.__module__ == m\n"
        "        if ours and '_make' in vars(v) and '__orig_bases__' in vars(v):  # typing.NamedTuple's\n"
        "            print('NAMEDTUPLE', m, v.__qualname__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    imported = lines[0].split()
    assert "aot_build.manifest" in imported and "aot_build.guards.bound" in imported
    build_side = [
        m
        for m in imported
        if m.startswith(("aot_build.compile", "aot_build.package", "aot_build.discover"))
        or m in ("aot_build.guards.capture", "aot_build.guards.upgrade", "aot_build.settings")
    ]
    assert build_side == []
    assert [line for line in lines[1:] if line.startswith(("DATACLASS", "NAMEDTUPLE"))] == []
