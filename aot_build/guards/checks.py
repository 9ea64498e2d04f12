"""The kinds of check a guard makes on the object at its path: each defined once, here.

A kind says what its expectation looks like in the manifest, what constant the run-time
evaluators compare against (:meth:`Kind.bind`: resolved once, when an entry is bound), whether
an object passes (:meth:`Kind.holds`: the Python evaluator and the reference for the C one,
which implements the same table under the same opcode), and how a failure reads
(:meth:`Kind.explain`).

==========  ================================  ===============================================
kind        expectation (JSON)                holds when the object ...
==========  ================================  ===============================================
type        ``"module:qualname"`` of a class  is exactly an instance of that class
id          an identity (see :func:`identity`) is that very object (a function, class, module)
eq          an encoded value                  equals it, of the same type at every level
len         an int                            has that many items
keys        encoded keys, in order            is a dict (or a mappingproxy) with exactly those keys, in order
has         an encoded key                    contains it (``key in obj``)
lacks       an encoded key                    does not contain it
hasattr     ``[name, bool]``                  has (or has not) that attribute
same        a node index                      is the object at that other node (aliases)
notnone     null                              is not None
weight      a weight index                    is the tensor the entry was bound to (weights)
isinstance  ``["module:qualname", bool]``     is (or is not) an instance of that class, as its
                                              ``__instancecheck__`` answers now (an ABC's registry)
issubclass  ``["module:qualname", bool]``     is (or is not) a subclass of that class, likewise
defines     ``[name, bool]``                  is a class that defines (or does not) that attribute,
                                              itself or in a base (its metaclass not counted)
==========  ================================  ===============================================
"""

from __future__ import annotations

import hashlib
import sys
import types
from collections.abc import Callable
from typing import Any

from .. import values
from ..names import class_ref, import_ref, qualified_name
from ..records import TupleRecord, record
from .paths import dict_keys

#: A constant that no object is: what an identity that cannot be found again binds to.
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<not found>"})()


class Check(TupleRecord):
    """One check: a :data:`KINDS` name and its expectation in manifest (JSON) form."""

    kind: str
    expect: Any = None


@record(frozen=True)
class Kind:
    """One kind of check; see the module docstring.

    Args:
        name: the manifest name.
        opcode: its number in the C evaluator (``_evaluator.c``).
        holds: ``holds(obj, const) -> bool``.
        explain: ``explain(label, obj, expect) -> str``, for a failed check.
        bind: ``bind(expect, found) -> const``; ``found`` is the object at the path when the
            entry is bound (identities of local functions are recognised by their code).
        doc: one line for docs and ``inspect``.
    """

    name: str
    opcode: int
    holds: Callable[[Any, Any], bool]
    explain: Callable[[str, Any, Any], str]
    bind: Callable[[Any, Any], Any]
    doc: str


def _describe(v: Any) -> str:
    return f"{type(v).__name__} {values.describe(v)}"


def _decoded(expect: Any, found: Any) -> Any:
    return values.decode(expect)


def _same_type(obj: Any, cls: Any) -> bool:
    return type(obj) is cls


def _class(expect: Any, found: Any) -> Any:
    if isinstance(expect, dict):  # a class made at run time (made_class): the object's, if it fits
        made = expect.get("made")
        if not isinstance(made, dict):
            raise ValueError(f"bad class {expect!r}")
        return type(found) if found is not MISSING and made_class(type(found)) == made else MISSING
    try:
        return import_ref(str(expect))
    except LookupError:
        return MISSING


def made_class(cls: type) -> dict[str, Any] | None:
    """How a class that no import path finds is recognised: its name and its bases' paths. For
    classes torch makes at run time for one object (``torch.nn.utils.parametrize`` makes a
    ``ParametrizedLinear(Linear)`` for each module it parametrizes) and C struct sequences, whose
    instance is what their name finds (``sys.version_info``, ``sys.flags``). None for others."""
    struct = issubclass(cls, tuple) and hasattr(cls, "n_sequence_fields")
    if not (cls.__module__.startswith("torch.") or struct):
        return None
    bases = [class_ref(b) for b in cls.__bases__]
    return None if None in bases else {"name": cls.__qualname__, "bases": bases}


def _len(obj: Any, n: Any) -> bool:
    try:
        return len(obj) == n
    except TypeError:
        return False


#: What a ``keys`` check applies to: dicts and read-only views of one (``types.MappingProxyType``).
_MAPPINGS = (dict, types.MappingProxyType)
#: What a ``keys`` check reads: a mapping's keys, or a set's elements, in iteration order.
_KEYED = (*_MAPPINGS, set, frozenset)


def _keys(obj: Any, keys: Any) -> bool:
    try:
        return isinstance(obj, _KEYED) and values.same(dict_keys(obj), keys)
    except Exception:  # a subclass's keys() that fails: not the keys compiled for
        return False


def _has(obj: Any, key: Any) -> bool:
    try:
        return key in obj
    except TypeError:
        return False


def _hasattr(obj: Any, spec: Any) -> bool:
    return hasattr(obj, spec[0]) is spec[1]


def _bind_hasattr(expect: Any, found: Any) -> tuple[str, bool]:
    if not isinstance(expect, (list, tuple)) or len(expect) != 2:
        raise ValueError(f"bad attribute expectation {expect!r}")
    return str(expect[0]), bool(expect[1])


def defines(cls: type, name: str) -> bool:
    """Whether ``cls`` or a base defines ``name`` (its metaclass not counted): what the
    ``defines`` kind compares, and what the build records it for."""
    return any(name in vars(k) for k in cls.__mro__)


def _defines(obj: Any, spec: Any) -> bool:
    return isinstance(obj, type) and defines(obj, spec[0]) is spec[1]


def _explain_defines(label: str, obj: Any, expect: Any) -> str:
    name, had = expect
    if had:
        return f"{label}.{name} is no longer defined by the class or its bases (compiled with it)"
    return (
        f"{label}.{name} is now defined by the class or a base (compiled without it: an attribute "
        "added to the class, or its __bases__ changed, after import)"
    )


def _bind_isinstance(expect: Any, found: Any) -> tuple[Any, bool]:
    if not isinstance(expect, (list, tuple)) or len(expect) != 2 or not isinstance(expect[0], str):
        raise ValueError(f"bad isinstance expectation {expect!r}")
    return _class(expect[0], found), bool(expect[1])


def _isinstance(obj: Any, const: Any) -> bool:
    try:
        return isinstance(obj, const[0]) is const[1]
    except TypeError:  # the class is missing here
        return False


def _issubclass(obj: Any, const: Any) -> bool:
    try:
        return issubclass(obj, const[0]) is const[1]
    except TypeError:  # the class is missing here, or obj is no class
        return False


def _explainer(test: str) -> Callable[[str, Any, Any], str]:
    def explain(label: str, obj: Any, expect: Any) -> str:
        cls, want = expect
        return (
            f"{test}({label}, {cls}) is {not want}, compiled for {want} (a class registered with an "
            "abstract base class after import?)"
        )

    return explain


def _explain_type(label: str, obj: Any, expect: Any) -> str:
    t = type(obj)
    if isinstance(expect, dict):
        made = expect.get("made") or {}
        expect = f"a {made.get('name')} made at run time from {', '.join(made.get('bases', []))}"
    return f"{label} is a {t.__module__}.{t.__qualname__}, compiled for {expect}"


def _explain_id(label: str, obj: Any, expect: Any) -> str:
    what = expect.get("ref") if isinstance(expect, dict) else None
    if what is None and isinstance(expect, dict) and "code" in expect:
        what = f"the function {expect['code'].get('name')} of line {expect['code'].get('line')}"
    return f"{label} was replaced (compiled for {what}, now {_describe(obj)})"


def _explain_eq(label: str, obj: Any, expect: Any) -> str:
    want = values.decode(expect)
    if isinstance(want, (set, frozenset)) and type(obj) is type(want):  # a set of classes: which
        try:
            added, removed = [v for v in obj if v not in want], [v for v in want if v not in obj]
        except TypeError:
            added = removed = []
        changes = [f"now contains {_elements(added)} (it did not when compiled)"] if added else []
        changes += [f"no longer contains {_elements(removed)}"] if removed else []
        if changes:
            return f"{label} {' and '.join(changes)}"
    # the build traces under no_grad: a function reading grad mode is compiled for it off
    grad = label.endswith("is_grad_enabled()")
    fix = " (call under torch.no_grad() or torch.inference_mode())" if grad else ""
    return f"{label} is {_describe(obj)}, compiled for {_describe(want)}{fix}"


def _elements(found: list[Any]) -> str:
    """Elements of a set, by name where they are classes, in a fixed order."""
    names = [f"{v.__module__}.{v.__qualname__}" if isinstance(v, type) else values.describe(v) for v in found]
    return ", ".join(sorted(names))


def _explain_len(label: str, obj: Any, expect: Any) -> str:
    try:
        n = len(obj)
    except TypeError:
        return f"{label} is a {type(obj).__name__}, compiled for a container of {expect} items"
    hooks = " (hooks are not compiled in)" if "hooks" in label else ""
    return f"{label} has {n} entries, compiled with {expect}{hooks}"


def _explain_keys(label: str, obj: Any, expect: Any) -> str:
    keys = values.decode(expect)
    if isinstance(obj, (set, frozenset)):
        hint = ""
        same_elements = sorted(map(repr, keys)) == sorted(map(repr, obj))
        if same_elements and any(isinstance(k, (str, bytes)) for k in keys):
            hint = (
                " (a set of strings iterates in another order in each process, as strings hash "
                "differently: iterate a tuple, a list or sorted(...) of it)"
            )
        return f"{label} iterates as {values.describe(list(obj))}, compiled for {values.describe(keys)}{hint}"
    found = dict_keys(obj) if isinstance(obj, _MAPPINGS) else f"a {type(obj).__name__}"
    return f"{label} has keys {values.describe(found)}, compiled for {values.describe(keys)}"


def _explain_has(label: str, obj: Any, expect: Any) -> str:
    return f"{label} no longer contains {_elements([values.decode(expect)])}"


def _explain_lacks(label: str, obj: Any, expect: Any) -> str:
    key = values.decode(expect)
    if isinstance(key, str) and label.endswith(".__dict__"):
        name = obj.get("__name__") if isinstance(obj, dict) else None
        if isinstance(name, str) and getattr(sys.modules.get(name), "__dict__", None) is obj:  # globals
            return (
                f"{label[: -len('.__dict__')]}.{key} is now a global of the module: its code calls it in "
                f"place of the builtin {key!r} (no such global when compiled)"
            )
        on = "class" if isinstance(obj, types.MappingProxyType) else "instance"  # a class's namespace
        return f"{label[: -len('.__dict__')]}.{key} is now set on the {on} (it was not when compiled)"
    return f"{label} now contains {_elements([key])} (it did not when compiled)"


def _explain_hasattr(label: str, obj: Any, expect: Any) -> str:
    name, had = expect
    now, then = ("no longer exists", "with") if had else ("now exists", "without")
    return f"{label}.{name} {now} (compiled {then} it)"


def _explain_same(label: str, obj: Any, expect: Any) -> str:
    return f"{label} is no longer the same object as {expect} (one object when compiled)"


def _explain_notnone(label: str, obj: Any, expect: Any) -> str:
    return f"{label} is now None"


def _explain_weight(label: str, obj: Any, expect: Any) -> str:
    return f"weight {label} was replaced"


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("type", 1, _same_type, _explain_type, _class, "is exactly an instance of the class"),
        Kind(
            "id",
            2,
            lambda o, c: o is c,
            _explain_id,
            lambda e, f: bind_identity(e, f),
            "is that very function, class or module",
        ),
        Kind("eq", 3, values.same, _explain_eq, _decoded, "equals the value, same types throughout"),
        Kind("len", 4, _len, _explain_len, lambda e, f: int(e), "has that many items"),
        Kind(
            "keys",
            5,
            _keys,
            _explain_keys,
            _decoded,
            "is a dict with these keys (a set: elements), in order",
        ),
        Kind("has", 6, _has, _explain_has, _decoded, "contains the key"),
        Kind("lacks", 7, lambda o, k: not _has(o, k), _explain_lacks, _decoded, "does not contain the key"),
        Kind("hasattr", 8, _hasattr, _explain_hasattr, _bind_hasattr, "has (or has not) the attribute"),
        Kind(
            "same",
            9,
            lambda o, c: o is c,
            _explain_same,
            lambda e, f: int(e),
            "is the very object found at another node",
        ),
        Kind("notnone", 10, lambda o, c: o is not None, _explain_notnone, lambda e, f: None, "is not None"),
        Kind(
            "weight",
            11,
            lambda o, c: o is c,
            _explain_weight,
            lambda e, f: int(e),
            "is the tensor the entry was bound to",
        ),
        Kind(
            "isinstance",
            12,
            _isinstance,
            _explainer("isinstance"),
            _bind_isinstance,
            "is (or is not) an instance of the class, as the class answers now",
        ),
        Kind(
            "issubclass",
            13,
            _issubclass,
            _explainer("issubclass"),
            _bind_isinstance,
            "is (or is not) a subclass of the class, as the class answers now",
        ),
        Kind(
            "defines",
            14,
            _defines,
            _explain_defines,
            _bind_hasattr,
            "is a class that defines (or does not define) the attribute, itself or in a base",
        ),
    )
}


# ---------------------------------------------------------------- identities


def code_fingerprint(code: types.CodeType) -> dict[str, Any]:
    """What identifies a function's code across processes: its name, first line and a hash of
    its bytecode, names and constants (nested code included); not its file's install path."""
    h = hashlib.sha256()

    def feed(c: types.CodeType) -> None:
        h.update(c.co_code)
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars)).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                feed(const)
            else:
                h.update(repr(const).encode())

    feed(code)
    return {"name": code.co_qualname, "line": code.co_firstlineno, "hash": h.hexdigest()[:32]}


def identity(value: Any) -> dict[str, Any] | None:
    """How the shim finds ``value`` again in the user's process: ``{"ref": "module:qualname"}``
    for a module, class or function found again by importing it, ``{"code": fingerprint}`` for a
    code object; None when it has no such identity."""
    if isinstance(value, types.ModuleType):
        return {"ref": f"{value.__name__}:"}
    if isinstance(value, types.CodeType):
        return {"code": code_fingerprint(value)}
    if isinstance(value, type):
        cls = class_ref(value)
        return None if cls is None else {"ref": cls}
    ref = qualified_name(value)
    if ref is not None:
        try:
            found = import_ref(ref)
        except LookupError:
            found = MISSING
        if found is value:
            return {"ref": ref}
        # a property's getter, a classmethod's or a cache's function: its qualname names the wrapper
        for attr in ("fget", "__func__", "__wrapped__"):
            if getattr(found, attr, None) is value:
                return {"ref": f"{ref}.{attr}"}
    name = getattr(value, "__name__", None)
    if isinstance(value, types.BuiltinFunctionType) and isinstance(name, str):
        # torch's operators are builtins of a hidden class (torch.clamp's __self__ is
        # torch._C._VariableFunctionsClass); find the public module that exports them.
        owner = getattr(value, "__self__", None)
        homes = [owner.__name__] if isinstance(owner, types.ModuleType) else []
        homes += [getattr(value, "__module__", None) or "", *_BUILTIN_HOMES]
        for home in homes:
            module = sys.modules.get(home)
            if module is not None and getattr(module, name, None) is value:
                return {"ref": f"{home}:{name}"}
    return None


#: Modules searched for a builtin function's public name (see :func:`identity`).
_BUILTIN_HOMES = (
    "torch",
    "torch.nn.functional",
    "torch.special",
    "torch.linalg",
    "torch.fft",
    "torch._C._nn",
    "operator",
    "math",
    "builtins",
)


def bind_identity(expect: Any, found: Any) -> Any:
    """The object an identity names in this process (:data:`MISSING` when it cannot be found):
    a code fingerprint binds to ``found`` (the code at the path now) when that code matches."""
    if not isinstance(expect, dict):
        raise ValueError(f"bad identity {expect!r}")
    if "ref" in expect:
        try:
            return import_ref(str(expect["ref"]))
        except LookupError:
            return MISSING
    if "code" in expect:
        if isinstance(found, types.CodeType) and code_fingerprint(found) == expect["code"]:
            return found
        return MISSING
    raise ValueError(f"bad identity {expect!r}")


def problem(check: Check, label: str, obj: Any, const: Any) -> str | None:
    """What is wrong with ``obj`` for ``check`` (None: it holds), given its bound constant."""
    kind = KINDS[check.kind]
    try:
        ok = kind.holds(obj, const)
    except Exception:
        ok = False
    return None if ok else kind.explain(label, obj, check.expect)
