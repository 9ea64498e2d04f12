"""@aot_entry: what decorating records, and what it refuses."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest
import torch

import aot_build
from aot_build import AotEntry, aot_entry
from aot_build.decorate import registered_entries
from aot_build.decorate.calls import CallSignature
from aot_build.errors import EntryError, FallbackError

_calls: list[str] = []


def _never_called() -> tuple[Any, ...]:
    _calls.append("example_inputs")
    raise AssertionError("example_inputs must not be called at decoration time")


@aot_entry(example_inputs=_never_called)
def lazy_entry(x: torch.Tensor) -> torch.Tensor:
    """Docstring kept."""
    return x + 1


@aot_entry(example_inputs=(torch.zeros(2),))
def tuple_entry(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def _plain(x: torch.Tensor) -> torch.Tensor:
    return x - 1


direct_entry = aot_entry(_plain, example_inputs=(torch.zeros(1),))


@aot_entry(example_inputs=lambda: [torch.zeros(1)])
def list_returning(x: torch.Tensor) -> torch.Tensor:
    return x


def _boom() -> tuple[Any, ...]:
    raise RuntimeError("no data here")


@aot_entry(example_inputs=_boom)
def raising_inputs(x: torch.Tensor) -> torch.Tensor:
    return x


def test_decorator_returns_entry_keeping_the_function() -> None:
    assert isinstance(lazy_entry, AotEntry)
    assert lazy_entry.__wrapped__.__name__ == "lazy_entry"
    assert lazy_entry.__name__ == "lazy_entry"
    assert lazy_entry.__doc__ == "Docstring kept."
    assert lazy_entry.__module__ == __name__
    assert isinstance(lazy_entry.__wrapped__, type(_plain))
    assert lazy_entry.__wrapped__(torch.ones(1)).item() == 2.0


def test_example_inputs_callable_not_called_at_decoration() -> None:
    assert _calls == []
    assert "lazy_entry" in repr(lazy_entry)


def test_registry_key_is_module_colon_qualname() -> None:
    assert lazy_entry.key == f"{__name__}:lazy_entry"
    assert direct_entry.key == f"{__name__}:_plain"
    keys = {e.key for e in registered_entries(__name__)}
    assert {f"{__name__}:lazy_entry", f"{__name__}:tuple_entry", f"{__name__}:_plain"} <= keys
    assert all(e.__wrapped__.__module__ == __name__ for e in registered_entries(__name__))
    # a prefix selects a module and the modules below it, not names that merely start alike
    assert registered_entries(__name__[:-1]) == []


def test_source_names_file_and_line() -> None:
    path, line = tuple_entry.source.rsplit(":", 1)
    assert path == __file__
    lines = open(__file__, encoding="utf-8").read().splitlines()
    def_line = lines.index("def tuple_entry(x: torch.Tensor) -> torch.Tensor:") + 1
    assert int(line) in (def_line - 1, def_line)  # the decorator's line or the def's


def test_example_inputs_tuple_and_callable() -> None:
    ((args, dynamic),) = tuple_entry.input_sets()
    assert torch.equal(args[0], torch.zeros(2)) and dynamic is None
    with pytest.raises(EntryError, match=r"non-empty list of such tuples, got list"):
        list_returning.input_sets()
    with pytest.raises(
        EntryError, match=r"raising_inputs.*example_inputs\(\) raised RuntimeError: no data here"
    ):
        raising_inputs.input_sets()


@aot_entry(
    example_inputs=lambda: [(torch.zeros(2),), (torch.zeros(3, 2),)],
    dynamic_shapes=[({0: torch.export.Dim("n", max=8)},), None],
)
def two_sets(x: torch.Tensor) -> torch.Tensor:
    return x


@aot_entry(example_inputs=[(torch.zeros(2),), (torch.zeros(3),)], dynamic_shapes=({0: None},))
def sets_with_one_spec(x: torch.Tensor) -> torch.Tensor:
    return x


@aot_entry(example_inputs=(torch.zeros(4),), dynamic_shapes=lambda: ({0: torch.export.Dim("n", max=8)},))
def lazy_dynamic(x: torch.Tensor) -> torch.Tensor:
    return x


def test_dynamic_shapes_may_be_a_callable() -> None:
    ((_, spec),) = lazy_dynamic.input_sets()
    assert isinstance(spec, tuple) and set(spec[0]) == {0}


def test_several_input_sets_pair_with_their_dynamic_shapes() -> None:
    sets = two_sets.input_sets()
    assert [tuple(a[0].shape) for a, _ in sets] == [(2,), (3, 2)]
    assert isinstance(sets[0][1], tuple) and sets[1][1] is None
    with pytest.raises(EntryError, match=r"2 input sets, so dynamic_shapes must be a list with one entry"):
        sets_with_one_spec.input_sets()


def test_variadic_parameters_refused() -> None:
    def star(*xs: torch.Tensor) -> torch.Tensor:
        return xs[0]

    star.__qualname__ = "star"
    with pytest.raises(EntryError, match=r"takes \*xs.*Name every parameter"):
        aot_entry(star, example_inputs=(torch.zeros(1),))

    def kw(x: torch.Tensor, **options: Any) -> torch.Tensor:
        return x

    kw.__qualname__ = "kw"
    with pytest.raises(EntryError, match=r"takes \*\*options"):
        aot_entry(kw, example_inputs=(torch.zeros(1),))


def _defaults(x: torch.Tensor, mask: torch.Tensor | None = None, *, scale: float = 1.0) -> torch.Tensor:
    return x


def test_calls_bind_to_one_canonical_tuple() -> None:
    sig = aot_entry(_defaults, example_inputs=(torch.zeros(1),)).call_signature
    x, m = torch.zeros(1), torch.ones(1)
    assert sig.canonical((x,), {}) == (x, None, 1.0)
    assert sig.canonical((x, None), {}) == (x, None, 1.0)
    assert sig.canonical((x,), {"mask": m}) == (x, m, 1.0)
    assert sig.canonical((x, m), {"scale": 2.0}) == (x, m, 2.0)
    assert sig.canonical((x,), {"nope": 1}) is None  # the function raises its own TypeError
    assert sig.canonical((), {}) is None
    with pytest.raises(EntryError, match=r"gives 3 positional value\(s\).*\(x, mask, scale\)"):
        sig.canonical_example((x, m, 2.0), "where")


def test_calls_take_the_defaults_the_function_has_now() -> None:
    """A default set after import is what the call passes (eager Python uses it), so a
    variant compiled for the old value does not fit the call."""

    def scaled(x: torch.Tensor, k: float = 2.0, *, shift: float = 0.0) -> torch.Tensor:
        return x * k + shift

    sig = CallSignature(scaled, "scaled")
    x = torch.zeros(1)
    assert sig.canonical((x,), {}) == (x, 2.0, 0.0)
    scaled.__defaults__ = (3.0,)
    assert sig.canonical((x,), {}) == (x, 3.0, 0.0)
    assert scaled.__kwdefaults__ is not None
    scaled.__kwdefaults__["shift"] = 1.0  # changed in place
    assert sig.canonical((x,), {}) == (x, 3.0, 1.0)
    assert sig.canonical((x, 2.0), {"shift": 0.0}) == (x, 2.0, 0.0)


def test_lambda_refused() -> None:
    with pytest.raises(EntryError, match="module-level"):
        aot_entry(lambda x: x, example_inputs=(1,))


def test_nested_function_refused() -> None:
    with pytest.raises(EntryError, match=r"<locals>\.inner .*only module-level functions"):

        @aot_entry(example_inputs=(torch.zeros(1),))
        def inner(x: torch.Tensor) -> torch.Tensor:
            return x


@pytest.mark.parametrize(
    "bad",
    [torch.zeros(1), {"x": torch.zeros(1)}, None, 3],
    ids=["tensor", "dict", "none", "int"],
)
def test_bad_example_inputs_refused(bad: Any) -> None:
    with pytest.raises(EntryError, match=r"example_inputs must be a tuple.*got " + type(bad).__name__):
        aot_entry(_plain, example_inputs=bad)


@pytest.mark.parametrize(
    "obj",
    [functools.partial(_plain), torch.relu, print],
    ids=["partial", "torch-builtin", "builtin"],
)
def test_non_function_refused(obj: Any) -> None:
    with pytest.raises(EntryError, match="expected a plain Python function"):
        aot_entry(obj, example_inputs=(torch.zeros(1),))


def _exception_chain(exc: BaseException | None) -> list[BaseException]:
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def test_method_of_plain_class_refused_via_set_name() -> None:
    source = (
        "import torch\n"
        "from aot_build import aot_entry\n"
        "class Model:\n"
        "    @aot_entry(example_inputs=(torch.zeros(1),))\n"
        "    def forward(self, x):\n"
        "        return x\n"
    )
    namespace: dict[str, Any] = {"__name__": "fake_methods_module"}
    # Python < 3.12 wraps errors of __set_name__ in RuntimeError; 3.12+ raises them as is.
    with pytest.raises(Exception) as info:
        exec(compile(source, "fake_methods_module.py", "exec"), namespace)
    errors = [e for e in _exception_chain(info.value) if isinstance(e, EntryError)]
    assert errors, f"no EntryError in {_exception_chain(info.value)!r}"
    assert "method Model.forward" in str(errors[0])
    assert "only in torch.nn.Module subclasses" in str(errors[0])


class Scaler(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.k = torch.nn.Parameter(torch.tensor(2.0))

    @aot_entry(example_inputs=lambda: (Scaler(), torch.ones(3)))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


def test_method_entry_binds_like_a_method() -> None:
    entry = Scaler.__dict__["forward"]
    assert isinstance(entry, AotEntry) and entry.is_method and entry.owner is Scaler
    assert entry.key == f"{__name__}:Scaler.forward"
    assert entry.call_signature.names == ("self", "x")
    s = Scaler()
    with torch.no_grad():
        assert torch.equal(s(torch.ones(3)), torch.full((3,), 2.0))  # nn.Module.__call__ -> forward
        assert torch.equal(s.forward(torch.ones(2)), torch.full((2,), 2.0))
    ((args, _),) = entry.input_sets()
    assert isinstance(args[0], Scaler)


def test_source_tree_call_runs_python_without_warning() -> None:
    """This module ships no manifest: the entry is the plain function, silently."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(tuple_entry(torch.ones(2)), torch.full((2,), 3.0))
        # any shape works: there is nothing compiled to mismatch
        assert torch.equal(tuple_entry(torch.ones(5)), torch.full((5,), 3.0))


def test_source_tree_strict_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOT_BUILD_STRICT", "1")
    with pytest.raises(FallbackError, match=rf"{__name__}:_plain .*ships no aot_build manifest"):
        direct_entry(torch.ones(1))


def test_public_api() -> None:
    assert aot_build.__version__ == "0.4.0"
    assert set(aot_build.__all__) == {"AotEntry", "__version__", "aot_entry"}


def test_two_entries_with_one_name_refused() -> None:
    """A redefinition under the same name would share the manifest key: refused at decoration,
    naming both places; the same definition again (a module reload) is fine."""

    ns: dict[str, Any] = {"__name__": __name__}  # one module namespace

    def make(line_offset: int) -> Any:
        src = "\n" * line_offset + "def twin(x):\n    return x\n"
        exec(compile(src, __file__, "exec"), ns)
        return ns["twin"]

    first = aot_entry(make(900), example_inputs=(torch.zeros(1),))
    again = aot_entry(make(900), example_inputs=(torch.zeros(1),))  # same file:line: a reload
    assert again.key == first.key
    with pytest.raises(EntryError, match=r"another entry has the same name .*:twin \(.*:901\).*Rename one"):
        aot_entry(make(950), example_inputs=(torch.zeros(1),))


def test_a_static_method_over_an_entry_is_a_function_entry() -> None:
    """``@staticmethod`` over ``@aot_entry`` in a class: the entry is never set on the class (no
    ``__set_name__``); it was refused as no method of it. The class holds it as a staticmethod,
    so it is an entry called as a plain function (``Holder.double(x)``, ``Holder().double(x)``),
    its examples the arguments; ``@classmethod`` over it is refused, naming what to write."""
    import types

    from aot_build.compile.inputs import input_sets

    module = types.ModuleType("static_entry_pkg")
    exec(
        "import torch\nfrom aot_build import aot_entry\n"
        "class Holder:\n"
        "    @staticmethod\n"
        "    @aot_entry(example_inputs=lambda: (torch.randn(3),))\n"
        "    def double(x):\n"
        "        return x * 2\n"
        "    @classmethod\n"
        "    @aot_entry(example_inputs=lambda: (torch.randn(3),))\n"
        "    def triple(cls, x):\n"
        "        return x * 3\n",
        module.__dict__,
    )
    entry = module.Holder.__dict__["double"].__func__
    assert entry.class_wrapper() is staticmethod and not entry.is_method
    assert module.Holder.double is entry and module.Holder().double is entry
    (iset,) = input_sets(entry, entry.key)
    assert iset.self_obj is None and len(iset.args) == 1
    by_class = module.Holder.__dict__["triple"].__func__
    assert by_class.class_wrapper() is classmethod and by_class.is_method
    with pytest.raises(EntryError) as info:
        input_sets(by_class, by_class.key)
    assert "@classmethod over @aot_entry: calls would pass the class first (cls)" in str(info.value)
    assert (
        "write @staticmethod over @aot_entry and drop cls, naming the class where the function reads it"
        in str(info.value)
    )
