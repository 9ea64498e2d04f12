"""Record classes for the modules the shim imports: dataclasses that cost ~25 µs to define.

``@dataclass`` generates each class's ``__init__``, ``__eq__``, ``__repr__`` (and, frozen,
``__setattr__``, ``__delattr__``, ``__hash__``) as source text and compiles it: 150–500 µs per
class on the 2-core machines here. The first call of an entry defines about twenty record
classes (manifest, guard tree, targets, checks), which was a third of importing the shim. A
:func:`record` class behaves as the dataclass would, from shared generic methods compiled once:

* an ``__init__`` taking the fields positionally or by name, with defaults and
  ``field(default_factory=...)``; ``__post_init__`` is called when defined;
* ``__eq__`` over the fields with ``compare=True`` (same class only), ``__repr__`` over the
  fields with ``repr=True``; ``repr=False`` keeps the class's own ``__repr__`` or object's;
* ``frozen=True``: assigning or deleting an attribute raises
  :class:`dataclasses.FrozenInstanceError`, and the record hashes by its compared fields;
  otherwise, as a dataclass with ``eq``, it is unhashable;
* ``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work on it (see
  :func:`_dataclass_field`); its :class:`dataclasses.Field` objects are made when one of them
  first asks (the run path never does: the shim's 19 records make 106 fewer objects).

Not supported (a class needing them stays a ``@dataclass``): ``order``, ``slots``, ``kw_only``,
``InitVar``, ``init=False`` fields, inheriting fields from a base class. Build-only modules use
``@dataclass``; the run path pays for every class it defines, so it uses this.

:class:`TupleRecord` is the same for ``typing.NamedTuple``, which compiles each class's
``__new__`` from source (150–240 µs per class here): ``class Check(TupleRecord)`` with annotated
fields is a ``NamedTuple`` to type checkers and, at run time, a tuple subclass with the same
fields, defaults, ``repr``, ``_replace``, ``_asdict``, ``_make`` and pickling, defined in ~20 µs.
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
import sys
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar, overload

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # only tells type checkers that a record is a dataclass
    try:
        from typing_extensions import dataclass_transform
    except ImportError:

        def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
            return lambda f: f


T = TypeVar("T", bound=type)

_MISSING: Any = dataclasses.MISSING


def _dataclass_field(name: str, annotation: Any, default: Any) -> dataclasses.Field[Any]:
    """A :class:`dataclasses.Field` for ``name`` as ``@dataclass`` makes it, so that the
    standard functions (``fields``, ``replace``, ``asdict``) accept records. They keep only
    fields whose private ``_field_type`` is the private ``dataclasses._FIELD`` (the other
    kinds are ClassVar and InitVar pseudo-fields); unchanged from Python 3.8 to 3.13, and
    ``tests/unit/test_records.py`` fails if it changes."""
    f: dataclasses.Field[Any] = (
        default if isinstance(default, dataclasses.Field) else dataclasses.field(default=default)
    )
    f.name = name
    f.type = annotation
    f._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
    return f


class _Spec:
    """What :func:`record` reads from a class's annotations once: each field's default (or
    factory) and whether it is compared and shown. The :class:`dataclasses.Field` objects are
    made only when asked for (see :class:`_LazyFields`): the run path never asks."""

    __slots__ = ("annotations", "compared", "defaults", "explicit", "factories", "names", "shown")

    def __init__(self, cls: type) -> None:
        self.names: list[str] = []
        self.annotations: dict[str, Any] = {}
        self.defaults: dict[str, Any] = {}
        self.factories: dict[str, Any] = {}
        self.explicit: dict[str, dataclasses.Field[Any]] = {}  # field(...) given in the class
        self.compared: list[str] = []
        self.shown: list[str] = []
        for name, annotation in inspect.get_annotations(cls).items():
            text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
            if text.startswith(("ClassVar", "typing.ClassVar")):
                continue
            self.names.append(name)
            self.annotations[name] = annotation
            default = cls.__dict__.get(name, _MISSING)
            compare = shown = True
            if isinstance(default, dataclasses.Field):
                if not default.init or default.kw_only is True:
                    raise TypeError(
                        f"@record {cls.__qualname__}: field {name!r}: init=False and kw_only need @dataclass"
                    )
                self.explicit[name] = default
                compare, shown = default.compare, default.repr
                if default.default_factory is not _MISSING:
                    self.factories[name] = default.default_factory
                # as @dataclass: the class attribute is the plain default, or absent
                if default.default is _MISSING:
                    delattr(cls, name)
                else:
                    self.defaults[name] = default.default
                    setattr(cls, name, default.default)
            elif default is not _MISSING:
                if type(default).__hash__ is None:
                    # as @dataclass: every instance would share (and change) one list or dict
                    raise ValueError(
                        f"@record {cls.__qualname__}: mutable default {type(default).__name__} for "
                        f"field {name!r}; use field(default_factory={type(default).__name__})"
                    )
                self.defaults[name] = default
            if compare:
                self.compared.append(name)
            if shown:
                self.shown.append(name)
        for base in cls.__mro__[1:-1]:
            if "__dataclass_fields__" in base.__dict__:
                raise TypeError(f"@record {cls.__qualname__}: fields inherited from {base.__qualname__}")

    def fields(self) -> dict[str, dataclasses.Field[Any]]:
        """The fields as ``@dataclass`` makes them."""
        out = {}
        for name in self.names:
            given = self.explicit.get(name)
            default = given if given is not None else self.defaults.get(name, _MISSING)
            out[name] = _dataclass_field(name, self.annotations[name], default)
        return out


class _LazyFields:
    """``cls.__dataclass_fields__`` made on first read (``dataclasses.fields``, ``replace``,
    ``asdict``, ``is_dataclass``), then stored on the class in its place."""

    def __init__(self, cls: type, spec: _Spec) -> None:
        self.cls = cls
        self.spec = spec

    def __get__(self, obj: Any, owner: Any = None) -> dict[str, dataclasses.Field[Any]]:
        fields = self.spec.fields()
        type.__setattr__(self.cls, "__dataclass_fields__", fields)
        return fields


def _make_init(cls: type, spec: _Spec) -> Callable[..., None]:
    names = tuple(spec.names)
    defaults, factories = spec.defaults, spec.factories
    required = [n for n in names if n not in defaults and n not in factories]
    for n in names[len(required) :]:
        if n in required:
            raise TypeError(f"@record {cls.__qualname__}: non-default field {n!r} follows a default one")
    post_init = getattr(cls, "__post_init__", None)
    n_names = len(names)
    qualname = cls.__qualname__
    setter = object.__setattr__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) == n_names and not kwargs:  # every field by position: most records made
            self.__dict__.update(zip(names, args, strict=True))
            if post_init is not None:
                post_init(self)
            return
        if len(args) > n_names:
            raise TypeError(f"{qualname}() takes {n_names} arguments, {len(args)} given")
        for name, value in zip(names, args, strict=False):
            setter(self, name, value)
        for name in names[len(args) :]:
            if name in kwargs:
                setter(self, name, kwargs.pop(name))
            elif name in defaults:
                setter(self, name, defaults[name])
            elif name in factories:
                setter(self, name, factories[name]())
            else:
                raise TypeError(f"{qualname}() missing argument {name!r}")
        if kwargs:
            _unexpected(qualname, kwargs, names)
        if post_init is not None:
            post_init(self)

    __init__.__qualname__ = f"{qualname}.__init__"
    return __init__


def _unexpected(qualname: str, kwargs: dict[str, Any], names: tuple[str, ...]) -> None:
    """A record's call got arguments left over once its fields were filled."""
    extra = next(iter(kwargs))
    raise TypeError(
        f"{qualname}() got an unexpected argument {extra!r}"
        + (" (given by position too)" if extra in names else "")
    )


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, n) for n in type(self).__record_compared__)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:  # a record holding itself shows "...", as a dataclass does
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__record_shown__)
    return f"{type(self).__qualname__}({shown})"


def _process(cls: T, frozen: bool, eq: bool, repr: bool) -> T:
    spec = _Spec(cls)
    cls.__dataclass_fields__ = _LazyFields(cls, spec)  # type: ignore[attr-defined]
    cls.__match_args__ = tuple(spec.names)  # type: ignore[attr-defined,misc]
    cls.__record_compared__ = tuple(spec.compared)  # type: ignore[attr-defined]
    cls.__record_shown__ = tuple(spec.shown)  # type: ignore[attr-defined]
    cls.__init__ = _make_init(cls, spec)  # type: ignore[misc]
    if repr:
        cls.__repr__ = _repr  # type: ignore[assignment]
    if eq:
        cls.__eq__ = _eq  # type: ignore[assignment]
        if frozen:
            cls.__hash__ = _hash  # type: ignore[assignment]
        elif "__hash__" not in cls.__dict__:
            cls.__hash__ = None  # type: ignore[assignment]
    if frozen:
        cls.__setattr__ = _frozen_setattr  # type: ignore[assignment]
        cls.__delattr__ = _frozen_delattr  # type: ignore[assignment]
    return cls


@overload
@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T, /) -> T: ...


@overload
def record(*, frozen: bool = False, eq: bool = True, repr: bool = True) -> Callable[[T], T]: ...


def record(
    cls: T | None = None, /, *, frozen: bool = False, eq: bool = True, repr: bool = True
) -> T | Callable[[T], T]:
    """``@record`` or ``@record(frozen=True, eq=..., repr=...)``: see the module docstring."""
    if cls is not None:
        return _process(cls, frozen, eq, repr)
    return lambda c: _process(c, frozen, eq, repr)


def _tuple_new(cls: Any, *args: Any, **kwargs: Any) -> Any:
    fields = cls._fields
    if len(args) == len(fields) and not kwargs:
        return tuple.__new__(cls, args)
    if len(args) > len(fields):
        raise TypeError(f"{cls.__qualname__}() takes {len(fields)} arguments, {len(args)} given")
    values = list(args)
    for name in fields[len(args) :]:
        if name in kwargs:
            values.append(kwargs.pop(name))
        elif name in cls._field_defaults:
            values.append(cls._field_defaults[name])
        else:
            raise TypeError(f"{cls.__qualname__}() missing argument {name!r}")
    if kwargs:
        _unexpected(cls.__qualname__, kwargs, fields)
    return tuple.__new__(cls, values)


def _tuple_repr(self: Any) -> str:
    shown = ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self, strict=True))
    return f"{type(self).__qualname__}({shown})"


def _tuple_replace(self: Any, **changes: Any) -> Any:
    return type(self)(**{**self._asdict(), **changes})


def _tuple_asdict(self: Any) -> dict[str, Any]:
    return dict(zip(self._fields, self, strict=True))


def _tuple_make(cls: Any, iterable: Iterable[Any]) -> Any:
    values = tuple(iterable)
    if len(values) != len(cls._fields):
        raise TypeError(f"{cls.__qualname__}._make: expected {len(cls._fields)} values, got {len(values)}")
    return tuple.__new__(cls, values)


def _tuple_getnewargs(self: Any) -> tuple[Any, ...]:
    return tuple(self)


class _TupleRecordMeta(type):
    """Makes ``class X(TupleRecord)`` a tuple subclass with X's annotated fields."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:
        if not bases:  # TupleRecord itself
            return super().__new__(mcs, name, bases, ns)
        if bases != (TupleRecord,):
            raise TypeError(f"TupleRecord {name}: inheriting from {bases} is not supported")
        annotations = ns.get("__annotations__")
        if annotations is None:  # Python 3.14 without the __future__ import: evaluated on demand
            annotations = inspect.get_annotations(type(name, (), dict(ns)))
        fields = tuple(annotations)
        defaults: dict[str, Any] = {}
        for i, f in enumerate(fields):
            if f in ns:
                defaults[f] = ns[f]
            elif defaults:
                raise TypeError(f"TupleRecord {name}: non-default field {f!r} follows a default one")
            ns[f] = property(itemgetter(i), doc=f"field {i}: {f}")
        ns.update(
            __slots__=(),
            _fields=fields,
            _field_defaults=defaults,
            __match_args__=fields,
            __new__=_tuple_new,
            __getnewargs__=_tuple_getnewargs,
            _replace=_tuple_replace,
            _asdict=_tuple_asdict,
            _make=classmethod(_tuple_make),
        )
        ns.setdefault("__repr__", _tuple_repr)
        return type(name, (tuple,), ns)


if TYPE_CHECKING:
    from typing import NamedTuple as TupleRecord
else:

    class TupleRecord(metaclass=_TupleRecordMeta):
        """Base of a tuple record: see the module docstring."""
