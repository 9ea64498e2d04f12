"""Build side: what an entry reads beyond its arguments, recorded by torch.compile's tracer.

Dynamo traces the function's bytecode on the example arguments (``fullgraph``, a capture
only: nothing is compiled) and records a guard for every read the traced code depends on:
globals, closure cells, attributes, class attributes, items of any mapping, functions and
partials, environment reads, hooks, module structure, tensors. Each guard is a *source* (how
the value was reached) and a *kind* (what about it was relied on). This module translates
both into the portable form the manifest carries (:mod:`.paths`, :mod:`.checks`), so the shim
checks every such read on each call; a read that cannot be carried is refused here, with an
error naming it and the fix. Tensors read from outside the arguments are the entry's weights.

Dynamo is the source, not a complete one: the reads it does not guard are closed here, each
with a test (tests/unit/test_guards.py):

* an object's ``__dict__`` read as a mapping (``obj.__dict__.get(k, default)``,
  ``len(vars(obj))``): Dynamo reads it through its side-effect table and guards no key;
* a set's iteration order (``list(S)``, ``a, b = S``): Dynamo guards the elements only, and a
  set of strings iterates in another order in each process;
* the iteration order of the sets a set was computed from (``for v in S - T``, ``S | T``):
  Dynamo iterates the new set in their order, guarding only their elements;
* ``w.requires_grad`` of a weight: answered from the tensor Dynamo wrapped;
* what the function finds on the class of an object it creates (``Helper().scale()``), or of a
  ``NamedTuple``: Dynamo guards the class's identity only; and the functions such a method
  holds in its closure (a dataclass's ``__init__``, each field's ``default_factory``), code
  included;
* a class attribute the class gets from its metaclass: no guard at all;
* what a class's metaclass answers for it (``len(Cls)``, ``x in Cls``, ``for x in Cls``: its
  ``__len__``, ``__contains__``, ``__iter__``...): Dynamo guards the class only; ``if Cls:`` and
  ``Cls[k]`` it answers by calling the metaclass's method while tracing, so they are traced
  through it instead (what it reads is then guarded);
* an object created of a class that has no ``__new__`` or ``__init__`` of its own (``A()``):
  Dynamo guards the class's identity only, not that it (and its bases) still lack them;
* a classmethod looked up on a class (``Ops.scale(x)``, ``type(self).act(x)``): Dynamo binds
  and inlines the function it wraps unguarded;
* an entry called inside the traced function (or a module whose ``forward`` is one): it is its
  plain function to the trace, whatever it is bound to in the user's process;
* an attribute found up the class hierarchy (a base's property; ``super().forward``): Dynamo
  guards the classes in between, not the object's own class nor the classes ``super()`` skipped;
* the functions torch's own Python functions read when Dynamo runs them whole in the graph
  (``F.multi_head_attention_forward`` calls ``scaled_dot_product_attention``);

* state read only where ``torch.compiler.is_compiling()`` is False: the function is traced again
  with that answer, as it runs as Python (:meth:`_Subject.python_branches`);

* a read that an inlined function of the standard library makes through its own module's
  globals (``os.getenv("X")`` reads ``os.environ``): Dynamo installs no guard for it;
* ``hasattr(module, "X")`` and ``getattr(module, "X", default)`` of a name the module lacks:
  Dynamo guards the module's identity only;
* a dict's keys taken by ``list(d)`` or ``[*d]``: Dynamo guards their number, not which keys
  in which order;
* a builtin the traced code calls (``abs``): Dynamo guards it in the builtins module, not that
  the calling code's module still lacks a global of that name (``mod.abs = f`` after import);
* what an object's class answers without an attribute being read (``if obj:``,
  ``callable(obj)``, a protocol method it lacks): Dynamo guards the object's type only, not
  that the class still defines (or lacks) ``__bool__``, ``__len__``, ``__call__``...;
* an attribute read that raised ``AttributeError`` inside a ``try`` (``CFG.k`` missing, a slot
  unset): the name's absence is guarded, as for ``hasattr``;
* a dict item read that raised ``KeyError`` inside a ``try`` (``os.environ.get("X")`` for an
  unset ``X``): the key's absence is guarded;
* a method or attribute found on an object's class (``Gate.forward = other`` after import):
  every attribute Dynamo looked up through an instance is checked on the class too;
* torch's global module hooks (``register_module_forward_hook``): checked to be empty;
* the ``__getattribute__`` that an attribute read runs when the object's class defines one in
  Python (transformers' configs): Dynamo inlines it and guards what it reads, not that the
  class still runs it. Checked by identity; the shim's evaluator relies on that check to know
  such reads from the object's dict and class without calling them;
* the ``__getattr__`` a read falls back to (a lazy or proxy object's missing attribute, an
  ``nn.Module``'s parameters and submodules, a class's name its metaclass answers): Dynamo
  inlines it too and guards what it reads, not that the name is still missing from the
  instance and its class (a class attribute of that name, set after import, would be read
  instead), nor that the class still runs that ``__getattr__``;
* how modules are called: Dynamo calls ``forward`` directly when a module's ``__call__`` and
  ``_call_impl`` are torch's own, without guarding that they still are (``nn.Module.__call__``
  replaced by a profiler after import);
* an ``isinstance`` or ``issubclass`` test that the class answers itself (an abstract base
  class's registry, ``Base.register(Impl)`` after import): Dynamo guards the types and the
  class, not the answer; it is asked again on each call;
* an enum's member looked up by value (``Color(1)``): Dynamo calls the class while tracing
  and guards only the class, not the table of members by value it answers from;
* numpy arithmetic (``A * np.float32(10)``, ``np.exp(A)``), which Dynamo traces as torch's:
  numpy's floating-point error state (``np.seterr``), under which Python raises where torch
  returns ``inf``, is checked for an entry that runs any;
* a call into torch that Dynamo answers while tracing and builds into the graph
  (``torch.cuda.is_available()``, ``torch.distributed.get_rank()``, ``torch.is_grad_enabled()``,
  guarded by the function's identity only): called again by each check, its answer compared;
  one with arguments is refused (but ``torch.get_autocast_dtype(device)``, called again with
  the device);
* a ``functools.lru_cache`` (or ``functools.cache``) helper: Dynamo traces the function it wraps
  (the answer computed afresh, its reads guarded) where Python returns what the cache holds
  (filled while the state it reads was other, or changed in place): the helper is called again
  by each check with the arguments traced, its answer compared with the traced one; one that
  answers a tensor is checked by :func:`.cached.cache_is_current` (the tensor it holds equal to
  what the function it wraps computes now); one that answers another object is refused;
* an ``import`` statement the function runs (``from .helpers import K`` in its body): Python
  imports through ``sys.modules`` on every call, Dynamo reads the module it found once: the
  ``sys.modules`` entry the statement returns is checked to be that module still (a patching
  library's ``sys.modules[name] = other``), and a dotted module it imports to be present.

Where Dynamo stops at ordinary library code, a recorder answers in its place and the
translator checks what the answer came from: a logging call at a level that is off (a logger's
method, or the logging module's function: ``logging.debug``), a logger's own attribute
(``LOG.level``), ``max``/``min`` with ``key=`` (traced as :func:`.traced.extreme_by_key`), and a
``functools.singledispatch`` function (dispatched while tracing).
"""

from __future__ import annotations

import abc
import contextlib
import dis
import functools
import inspect
import logging
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from .. import values
from ..errors import CompileError
from ..names import class_ref, import_ref
from . import cached
from .checks import MISSING, Check, defines, identity, made_class
from .paths import ObjPath, PathError, dict_keys, resolve
from .tree import TreeBuilder

#: Dynamo guard kinds about torch's global state: the shim checks grad mode, autocast, the
#: default dtype and device, and torch function / dispatch modes itself, on every call.
_AMBIENT = frozenset(
    {
        "GRAD_MODE",
        "DETERMINISTIC_ALGORITHMS",
        "GLOBAL_STATE",
        "TORCH_FUNCTION_STATE",
        "DEFAULT_DEVICE",
        "AUTOGRAD_SAVED_TENSORS_HOOKS",
        "SHAPE_ENV",
        "DUAL_LEVEL",
        "FUNCTORCH_STACK_MATCH",
    }
)
_IDENTITY = frozenset({"ID_MATCH", "CLASS_MATCH", "MODULE_MATCH", "BUILTIN_MATCH", "FUNCTION_MATCH"})
_VALUE = frozenset({"CONSTANT_MATCH", "EQUALS_MATCH", "BOOL_MATCH", "NONE_MATCH"})
#: torch.nn.Module's global hook tables, which every module call consults.
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_MODULE_REF = ("ref", "torch.nn.modules.module:")
#: aot_build's own source folder (its entries ask ``is_compiling()`` to run as plain code).
_AOT_BUILD_DIR = str(Path(__file__).resolve().parent.parent)
#: A call of ``torch.compiler.is_compiling()``: (code object, line) of each frame, innermost
#: first (a library's own ``is_compiling()`` wrapper is one site per place that calls it).
_Site = tuple[tuple[types.CodeType, int], ...]


@dataclass
class Captured:
    """What one trace of an entry read.

    Args:
        builder: the guards, as a tree under construction (weights get their specs later).
        weights: per tensor read from outside the arguments: its paths and the tensor.
        traced_code: every code object the trace ran (the entry and what it called).
        answered: the functions of torch's state whose calls the trace answered (and the
            tree checks): ``torch.is_grad_enabled``, ``torch.cuda.is_available``, ...
        unchecked: what the checks leave out, and why: each branch that code asking
            ``torch.compiler.is_compiling()`` takes as Python, if Dynamo cannot trace it, and
            each read of such a branch the manifest cannot carry.
    """

    builder: TreeBuilder
    weights: list[tuple[list[ObjPath], torch.Tensor]] = field(default_factory=list)
    traced_code: list[types.CodeType] = field(default_factory=list)
    answered: tuple[Any, ...] = ()
    unchecked: tuple[str, ...] = ()


class CaptureError(CompileError):
    """The trace failed, or read something the manifest cannot carry."""


class _TraceFailed(CaptureError):
    """Dynamo stopped; ``reason``: its explanation, in one line."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


#: How many sites of ``torch.compiler.is_compiling()`` whose Python branch Dynamo cannot trace
#: the build tries before it gives up on those branches (a trace each).
_PYTHON_BRANCH_TRIES = 6


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if line.strip().startswith("Explanation:"):
            return line.strip()[len("Explanation:") :].strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:200]


def _constant_set(value: Any) -> bool:
    """A set of plain values (numbers, strings, tuples of them), which Dynamo takes as one
    constant: its length is guarded where it was unpacked. (Dynamo guards a set of other objects
    by length and element by element, wherever it is read.)"""
    return isinstance(value, (set, frozenset)) and all(
        isinstance(v, (int, float, str, bytes, tuple, type(None))) for v in value
    )


#: What an autocast object holds that Dynamo enters it with (and guards by its identity).
_AUTOCAST_STATE = ("device", "fast_dtype", "_enabled", "_cache_enabled")


def _autocast_classes() -> tuple[type, ...]:
    """torch's autocast classes whose objects Dynamo enters by their state (not the
    ``_UnmanagedAutocast`` of ``torch.amp._enter_autocast``, nor a user's subclass, whose own
    ``__enter__`` Dynamo would skip)."""
    return (torch.amp.autocast_mode.autocast, torch.cpu.amp.autocast, torch.cuda.amp.autocast)


def _class_set(value: Any) -> bool:
    """A set (or frozenset) of classes (compared by identity: no metaclass ``__eq__``): checked
    whole, by its members in any order (a class hashes by its address, so the order differs in
    each process), where Dynamo guards each element by its position in this process's order
    (``list(S)[i]``)."""
    return (
        isinstance(value, (set, frozenset))
        and bool(value)
        and all(
            isinstance(v, type) and type(v).__eq__ is type.__eq__ and type(v).__hash__ is type.__hash__
            for v in value
        )
    )


def _class_namespace(path: ObjPath, value: Any) -> bool:
    """Whether ``value`` at ``path`` is a class's ``__dict__``: always a mappingproxy to Python,
    the dict it shows to the C evaluator (which reads the class's own), so its type is no check."""
    return isinstance(value, types.MappingProxyType) and bool(path.steps) and path.steps[-1][0] == "dict"


def _base_path(path: ObjPath, i: int) -> ObjPath:
    """The path of base ``i`` in the MRO of the class at ``path`` (0: that class itself)."""
    return path if i == 0 else path.child("mro").child("index", i)


def _site(tx: Any) -> _Site | None:
    """Where the frame that Dynamo's translator ``tx`` traces is, and from where it was called."""
    frames = []
    while tx is not None:
        frames.append((tx.f_code, tx.lineno))
        tx = getattr(tx, "parent", None)
    return tuple(frames) or None


def _site_label(site: _Site) -> str:
    """``file:line`` of the call and of the two frames above it (files under site-packages by
    their path there)."""
    return " < ".join(f"{_short(code.co_filename)}:{line}" for code, line in site[:3])


def _short(filename: str) -> str:
    _, found, tail = filename.rpartition("-packages/")
    return tail if found else filename


@contextlib.contextmanager
def _dynamo_settings() -> Iterator[None]:
    """Dynamo as the export sees the function: static shapes, every Python int and float a
    constant (so each one read is guarded), LSTMs and ``torch.autograd.grad`` traced (a whole
    training step in one entry), nothing cached between entries."""
    import torch._dynamo
    from torch._dynamo.eval_frame import set_enable_dynamic
    from torch._dynamo.utils import get_metrics_context
    from torch._dynamo.variables.torch_function import torch_function_mode_stack_state_mgr

    torch._dynamo.reset()
    with (
        torch._dynamo.config.patch(
            specialize_int=True,
            specialize_float=True,
            allow_rnn=True,
            capture_scalar_outputs=True,
            capture_dynamic_output_shape_ops=True,
            assume_static_by_default=True,
            automatic_dynamic_shapes=False,
            force_parameter_static_shapes=True,
            skip_nnmodule_hook_guards=False,
            side_effect_replay_policy="error",
            trace_autograd_ops=True,
        ),
        get_metrics_context(),
        set_enable_dynamic(False),
        torch_function_mode_stack_state_mgr,
        _missing_keys_guarded(),
        _restored_attributes_allowed(),
        _stdlib_reads_guarded(),
        _module_attributes_guarded(),
        _missing_attributes_guarded(),
        _dict_keys_guarded(),
        _dict_reads_guarded(),
        _set_operands_guarded(),
        _made_keys_guarded(),
        _mro_walks_guarded(),
    ):
        try:
            yield
        finally:
            torch._dynamo.reset()


@contextlib.contextmanager
def _missing_keys_guarded() -> Iterator[None]:
    """Dynamo (2.13) records no guard when ``d[key]`` raises KeyError during the trace (it
    goes on to the ``except``, e.g. ``os.environ.get`` of an unset variable): guard the key's
    absence, as it does for ``key in d``."""
    from torch._dynamo.variables.dicts import ConstDictVariable, HashableTracker

    original = ConstDictVariable.getitem_const_raise_exception_if_absent

    def guarded(self: Any, tx: Any, arg: Any) -> Any:
        if HashableTracker(arg) not in self.items:
            self.install_dict_contains_guard(tx, [arg])
        return original(self, tx, arg)

    ConstDictVariable.getitem_const_raise_exception_if_absent = guarded  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConstDictVariable.getitem_const_raise_exception_if_absent = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _stdlib_reads_guarded() -> Iterator[None]:
    """Dynamo (2.13) installs no guard for a read that an inlined function of the standard
    library makes through its own module's globals (it assumes nobody changes them), so
    ``os.getenv("X")`` depended on ``os.environ`` unguarded: install them as any other."""
    import torch._dynamo.guards

    with mock.patch.object(torch._dynamo.guards, "is_from_skip_guard_source", lambda source: False):
        yield


@contextlib.contextmanager
def _dict_keys_guarded() -> Iterator[None]:
    """Dynamo (2.13) guards a dict's keys, in order, where it iterates them, except in
    ``list.extend(d)`` (``[*d]``), which takes them unguarded: a key added or the keys
    reordered after import went unseen. Guard them there too."""
    from torch._dynamo.variables.dicts import ConstDictVariable
    from torch._dynamo.variables.lists import ListVariable

    original = ListVariable.call_method

    def call_method(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        if name == "extend" and len(args) == 1 and isinstance(args[0], ConstDictVariable):
            args[0].install_dict_keys_match_guard()
        return original(self, tx, name, args, kwargs)

    with mock.patch.object(ListVariable, "call_method", call_method):
        yield


@contextlib.contextmanager
def _set_operands_guarded() -> Iterator[None]:
    """Dynamo (2.13) computes ``set().union(d)`` (``intersection``, ``difference``...) itself
    on the operands as constants, which guards each value of a dict operand but not its keys:
    ``len(ChainMap(...))`` (``len(set().union(*self.maps))``) did not see a key added to one of
    its maps. Guard the keys of each operand read from state, as iterating it does."""
    from torch._dynamo.variables.dicts import ConstDictVariable
    from torch._dynamo.variables.sets import SetVariable

    original = SetVariable._fast_set_method

    def fast_set_method(self: Any, tx: Any, fn: Any, args: Any, kwargs: Any) -> Any:
        for operand in (self, *args, *kwargs.values()):
            if isinstance(operand, ConstDictVariable) and operand.source is not None:
                operand.install_dict_keys_match_guard()
        return original(self, tx, fn, args, kwargs)

    with mock.patch.object(SetVariable, "_fast_set_method", fast_set_method):
        yield


@contextlib.contextmanager
def _made_keys_guarded() -> Iterator[None]:
    """Dynamo (2.13) installs no guard at all for ``key in d`` where the key is an object the
    trace made itself and no constant (``weakref.ref(obj)``, which ``WeakKeyDictionary`` and
    ``WeakSet`` test their data with): ``Impl in REGISTRY`` went unchecked. Guard the keys of
    ``d`` there (a key the manifest cannot carry, a weak reference, is refused, as reading an
    item by it is)."""
    from torch._dynamo.variables.dicts import ConstDictVariable

    original = ConstDictVariable.install_dict_contains_guard

    def contains_guard(self: Any, tx: Any, args: Any) -> None:
        key = args[0]
        if (
            self.source is not None
            and key.source is None
            and not key.is_python_constant()
            and not tx.output.side_effects.is_modified(self)
        ):
            self.install_dict_keys_match_guard()
            return
        original(self, tx, args)

    with mock.patch.object(ConstDictVariable, "install_dict_contains_guard", contains_guard):
        yield


@contextlib.contextmanager
def _dict_reads_guarded() -> Iterator[None]:
    """Two reads of a dict's keys that Dynamo (2.13) guards too little, or too much:

    * an object's ``__dict__`` (``vars(obj)``) is read through Dynamo's table of side effects,
      with no guard on its keys: a key read as missing (``obj.__dict__.get(k, default)``, a
      descriptor's usual read; ``k in vars(obj)``) or the keys taken as a whole
      (``len(vars(obj))``, a loop over its items) went unchecked. They get the guards that any
      other dict gets;
    * a class looked up in a table keyed by classes (``copy``'s and ``dataclasses``' dispatch
      tables, keyed by ``type(x)``) and missing there: Dynamo guards every key of the table,
      classes the manifest may not name (numpy's dtype classes); the key's absence is what the
      trace relied on, and the class is named by its import path."""
    from torch._dynamo.guards import install_guard
    from torch._dynamo.variables.dicts import ConstDictVariable, DunderDictVariable

    original = ConstDictVariable.install_dict_contains_guard

    def contains_guard(self: Any, tx: Any, args: Any) -> None:
        key = args[0]
        cls = key.as_python_constant() if key.source is not None and key.is_python_constant() else None
        if (
            self.source is None
            or not isinstance(cls, type)
            or class_ref(cls) is None
            or tx.output.side_effects.is_modified(self)
            or key in self
        ):
            original(self, tx, args)
            return
        install_guard(self.make_guard(functools.partial(type(self).NOT_CONTAINS_GUARD, key=cls)))

    with (
        mock.patch.object(ConstDictVariable, "install_dict_contains_guard", contains_guard),
        mock.patch.object(
            DunderDictVariable,
            "install_dict_keys_match_guard",
            ConstDictVariable.install_dict_keys_match_guard,
        ),
        mock.patch.object(DunderDictVariable, "install_dict_contains_guard", contains_guard),
    ):
        yield


@contextlib.contextmanager
def _mro_walks_guarded() -> Iterator[None]:
    """Dynamo (2.13) reads an attribute found on a base class (a property of ``Base``, read on a
    ``Model``) through that class's ``__dict__``, and guards that the classes between lack the
    name, but not the object's own class (``Model.gain = 5.0`` after import shadows it); and
    ``super().forward`` through the class ``super()`` found it on, without guarding that the
    classes it skipped still lack it (``Mid.forward`` defined after import). Guard those too."""
    from torch._dynamo.guards import GuardBuilder, install_guard
    from torch._dynamo.source import GetItemSource, TypeDictSource, TypeMROSource, TypeSource
    from torch._dynamo.variables.misc import SuperVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable, UserDefinedObjectVariable

    def absent(cls_source: Any, first: int, found: int, name: str) -> None:
        for i in range(first, found):
            at = cls_source if i == 0 else GetItemSource(TypeMROSource(cls_source), i)
            install_guard(
                TypeDictSource(at).make_guard(functools.partial(GuardBuilder.DICT_NOT_CONTAINS, key=name))
            )

    def owner(mro: tuple[type, ...], name: str, start: int = 0) -> int | None:
        return next((i for i in range(start, len(mro)) if name in mro[i].__dict__), None)

    on_classes = UserDefinedClassVariable.get_source_by_walking_mro
    on_objects = UserDefinedObjectVariable.get_source_by_walking_mro
    on_super = SuperVariable._resolved_getattr_and_source

    def class_walk(self: Any, tx: Any, name: str) -> Any:
        out = on_classes(self, tx, name)
        found = owner(self.value.__mro__, name)
        if self.source is not None and found:  # Dynamo guards mro[1:found]; mro[0] is the class
            absent(self.source, 0, 1, name)
        return out

    def object_walk(self: Any, tx: Any, name: str) -> Any:
        out = on_objects(self, tx, name)
        mro = type(self.value).__mro__
        found = owner(mro, name)
        if self.cls_source is not None and found:
            absent(self.cls_source, 0, 1, name)
        return out

    def super_walk(self: Any, tx: Any, name: str) -> Any:
        value, source = on_super(self, tx, name)
        if source is not None and self.objvar is not None and self.objvar.source is not None:
            cls = self.objvar.python_type()
            cls_source: Any = TypeSource(self.objvar.source)
            if issubclass(cls, type):
                cls, cls_source = self.objvar.value, self.objvar.source
            mro = cls.__mro__
            search = self.typevar.as_python_constant()
            if search in mro:
                start = mro.index(search) + 1
                found = owner(mro, name, start)
                if found is not None:
                    absent(cls_source, start, found, name)
        return value, source

    with (
        mock.patch.object(UserDefinedClassVariable, "get_source_by_walking_mro", class_walk),
        mock.patch.object(UserDefinedObjectVariable, "get_source_by_walking_mro", object_walk),
        mock.patch.object(SuperVariable, "_resolved_getattr_and_source", super_walk),
    ):
        yield


@contextlib.contextmanager
def _module_attributes_guarded() -> Iterator[None]:
    """Dynamo (2.13) guards a module by identity only when the trace asks whether it has an
    attribute (``hasattr(mod, "X")``) or reads one it lacks (``getattr(mod, "X", default)``):
    setting ``mod.X`` after import changed eager's answer unseen. Guard the answer, as Dynamo
    does for other objects."""
    import functools

    from torch._dynamo.exc import ObservedAttributeError
    from torch._dynamo.guards import GuardBuilder, install_guard
    from torch._dynamo.variables.misc import PythonModuleVariable

    def guard(var: Any, name: str) -> None:
        if var.source is not None:
            install_guard(var.source.make_guard(functools.partial(GuardBuilder.HASATTR, attr=name)))

    original_getattr = PythonModuleVariable.var_getattr
    original_hasattr = PythonModuleVariable.call_obj_hasattr

    def var_getattr(self: Any, tx: Any, name: str) -> Any:
        try:
            return original_getattr(self, tx, name)
        except ObservedAttributeError:
            guard(self, name)
            raise

    def call_obj_hasattr(self: Any, tx: Any, name: str) -> Any:
        guard(self, name)
        return original_hasattr(self, tx, name)

    with (
        mock.patch.object(PythonModuleVariable, "var_getattr", var_getattr),
        mock.patch.object(PythonModuleVariable, "call_obj_hasattr", call_obj_hasattr),
    ):
        yield


@contextlib.contextmanager
def _missing_attributes_guarded() -> Iterator[None]:
    """Dynamo (2.13) guards the answer of ``hasattr(obj, "k")`` and of ``getattr(obj, "k",
    default)``, but not a read ``obj.k`` that raises AttributeError inside a ``try`` (the
    ``except`` branch runs instead): ``obj.k`` (or the class's) set after import, or a slot left
    unset then filled, went unseen. Guard the attribute's absence, as ``hasattr`` does."""
    from torch._dynamo.exc import ObservedAttributeError
    from torch._dynamo.guards import GuardBuilder, install_guard
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable, UserDefinedObjectVariable

    def guarded(original: Callable[..., Any]) -> Callable[..., Any]:
        def var_getattr(self: Any, tx: Any, name: str) -> Any:
            try:
                return original(self, tx, name)
            except ObservedAttributeError:
                if self.source is not None:
                    install_guard(self.source.make_guard(functools.partial(GuardBuilder.HASATTR, attr=name)))
                raise

        return var_getattr

    with (
        mock.patch.object(
            UserDefinedObjectVariable, "var_getattr", guarded(UserDefinedObjectVariable.var_getattr)
        ),
        mock.patch.object(
            UserDefinedClassVariable, "var_getattr", guarded(UserDefinedClassVariable.var_getattr)
        ),
    ):
        yield


def _falls_back_to_getattr(obj: Any, name: str) -> bool:
    """Whether reading ``obj.name`` ends in its class's Python ``__getattr__`` (an
    ``nn.Module``'s parameters, buffers and submodules do; so does a class's read that its
    metaclass's ``__getattr__`` answers): nothing on the class or in the instance dict (the
    class's namespaces, for a class) has the name."""
    cls = type(obj)
    if not isinstance(getattr(cls, "__getattr__", None), types.FunctionType):
        return False
    if any(name in vars(k) for k in cls.__mro__):
        return False
    if isinstance(obj, type):
        return not any(name in vars(k) for k in obj.__mro__)
    try:
        object.__getattribute__(obj, name)  # the instance dict, or storage of its own
    except AttributeError:
        return True
    return False


@contextlib.contextmanager
def _getattr_fallbacks_recorded(found: dict[tuple[Any, str], None]) -> Iterator[None]:
    """Dynamo (2.13) inlines the ``__getattr__`` an attribute read falls back to and guards
    what it reads, not that the read still falls back: an attribute set on the instance or
    its class after import, or another ``__getattr__``, would go unseen. Record each such
    read (by its object's source and the name) for the translator to guard."""
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable, UserDefinedObjectVariable

    on_objects = UserDefinedObjectVariable.generic_getattr
    on_classes = UserDefinedClassVariable.var_getattr

    def recorded(original: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: Any, tx: Any, name: str) -> Any:
            if self.source is not None and _falls_back_to_getattr(self.value, name):
                found[(self.source, name)] = None
            return original(self, tx, name)

        return read

    with (
        mock.patch.object(UserDefinedObjectVariable, "generic_getattr", recorded(on_objects)),
        mock.patch.object(UserDefinedClassVariable, "var_getattr", recorded(on_classes)),
    ):
        yield


@contextlib.contextmanager
def _module_calls_recorded(found: dict[type, Any]) -> Iterator[None]:
    """Dynamo (2.13) calls an ``nn.Module``'s ``forward`` directly when the module's
    ``__call__`` and ``_call_impl`` are torch's own and it has no hooks: it guards the hooks,
    not that ``__call__`` is still torch's (a profiler or a patch that replaces
    ``nn.Module.__call__``, or a subclass's, after import); nor, for a module the function
    creates (transformers' ``ACT2FN["gelu"]`` makes one), its ``forward``. Record the class of
    each module the trace calls (with the source of one instance, None for one created), for
    the translator to check them."""
    from torch._dynamo.variables.nn_module import UnspecializedNNModuleVariable

    original = UnspecializedNNModuleVariable.call_function

    def recorded(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        # a module the function creates (ACT2FN["gelu"] makes one): None, its class is checked
        found.setdefault(type(self.value), self.source)
        return original(self, tx, args, kwargs)

    with mock.patch.object(UnspecializedNNModuleVariable, "call_function", recorded):
        yield


def _answers_itself(cls: Any, hook: str = "__instancecheck__") -> bool:
    """Whether ``isinstance(obj, cls)`` (``issubclass``: hook ``__subclasscheck__``) runs a
    hook of ``cls``'s metaclass that may read more than ``type(obj)`` (an abstract base
    class's registry, a runtime protocol's attributes); torch's own (``nn.Parameter``'s) are
    answered by the type."""
    if not isinstance(cls, type):
        return False
    meta: type = type(cls)
    for k in meta.__mro__:
        if hook in vars(k):
            return k is not type and not str(k.__module__).startswith("torch")
    return False


@contextlib.contextmanager
def _class_tests_recorded(found: dict[tuple[str, Any, type], None]) -> Iterator[None]:
    """Dynamo (2.13) answers ``isinstance(obj, cls)`` and ``issubclass(c, cls)`` while
    tracing and guards the types and ``cls``, not the answer: against an abstract base class a
    class registered after import (``Base.register(Impl)``) changes eager's answer. Record
    each such test of an object read from package state (the test, the object's source, the
    class), for the translator to check that the class still answers the same."""
    from torch._dynamo.variables.builtin import BuiltinVariable

    def recorder(test: str, hook: str) -> Callable[..., Any]:
        original = getattr(BuiltinVariable, f"call_{test}")

        def recorded(self: Any, tx: Any, arg: Any, spec_var: Any) -> Any:
            result = original(self, tx, arg, spec_var)
            if getattr(arg, "source", None) is not None:
                try:
                    spec = spec_var.as_python_constant()
                except Exception:  # not a constant: Dynamo answered from the types it knows
                    return result
                for cls in spec if isinstance(spec, tuple) else (spec,):
                    if _answers_itself(cls, hook):
                        found[(test, arg.source, cls)] = None
            return result

        return recorded

    with (
        mock.patch.object(BuiltinVariable, "call_isinstance", recorder("isinstance", "__instancecheck__")),
        mock.patch.object(BuiltinVariable, "call_issubclass", recorder("issubclass", "__subclasscheck__")),
    ):
        yield


@contextlib.contextmanager
def _restored_attributes_allowed() -> Iterator[None]:
    """An attribute (or a module global) set and put back within the call (``obj.active = x
    ... finally: obj.active = None``; timm's ``with set_layer_config(exportable=True):``)
    changes nothing a caller can see: Dynamo (2.13) still lists it as a side effect. Leave out
    of that list each object whose every stored attribute ends as a constant identical (or
    equal, of the same type) to its value now."""
    from torch._dynamo.output_graph import OutputGraph
    from torch._dynamo.variables.base import AttributeMutationExisting
    from torch._dynamo.variables.misc import NewGlobalVariable

    original = OutputGraph.get_replayed_side_effect_source_refs

    def unchanged(side_effects: Any, var: Any, global_scope: Any) -> bool:
        stores = side_effects.store_attr_mutations.get(var)
        # the traced frame's module globals stand for a NewGlobalVariable
        state = global_scope if isinstance(var, NewGlobalVariable) else None
        if state is None:
            state = getattr(getattr(var, "value", None), "__dict__", None)
        if not isinstance(var.mutation_type, AttributeMutationExisting) or not stores or state is None:
            return False
        for name, final in stores.items():
            if not final.is_python_constant() or name not in state:
                return False
            new, now = final.as_python_constant(), state[name]
            if not (new is now or (type(new) is type(now) and new == now)):
                return False
        return True

    def refs(self: Any, *, populate_export_metadata: bool = False) -> list[str]:
        side_effects = self.side_effects
        modified = side_effects._get_modified_vars
        scope = self.global_scope
        side_effects._get_modified_vars = lambda: [
            v for v in modified() if not unchanged(side_effects, v, scope)
        ]
        try:
            return original(self, populate_export_metadata=populate_export_metadata)
        finally:
            del side_effects._get_modified_vars

    OutputGraph.get_replayed_side_effect_source_refs = refs  # type: ignore[method-assign]
    try:
        yield
    finally:
        OutputGraph.get_replayed_side_effect_source_refs = original  # type: ignore[method-assign]


@dataclass(frozen=True)
class _StateRead:
    """A call into torch that Dynamo answered at trace time and built into the graph as a
    constant (``torch.cuda.is_available()``, ``torch.is_grad_enabled()``,
    ``torch.distributed.get_rank()``): the function, how the trace reached it (a Dynamo
    source, or None), whether it took arguments, and the answer it gave."""

    fn: Any
    source: Any
    with_args: bool
    value: Any


def _answered_by_the_shim() -> set[Any]:
    """torch's state calls whose answer the shim checks on every call itself (autocast, the
    default dtype, deterministic algorithms, torch function modes), or that Dynamo guards
    already (its ``constant_fold_functions_need_guards``), or whose compiled answer is the
    intended one (``torch.compiler.is_compiling()``, ``torch.jit.is_scripting()``), or that
    depend on their arguments only."""
    from torch._dynamo.variables import torch as dynamo_torch

    return {
        *dynamo_torch.constant_fold_functions_need_guards,
        *dynamo_torch.tracing_state_functions(),
        torch.get_default_dtype,
        torch.is_autocast_cpu_enabled,
        torch.is_autocast_enabled,
        torch._C._is_any_autocast_enabled,
        torch.are_deterministic_algorithms_enabled,
        torch._C._is_torch_function_enabled,
        torch._C._is_torch_function_all_disabled,
        torch._C._is_torch_function_mode_enabled,
        torch._assert,
        torch._utils._get_device_index,
        torch.is_complex,
        torch.is_floating_point,
        torch.nn.functional._Reduction.get_enum,  # type: ignore[attr-defined]
        torch.promote_types,
        torch.autograd._is_checkpoint_valid,
    }


@contextlib.contextmanager
def _state_reads_recorded(found: list[_StateRead]) -> Iterator[None]:
    """Dynamo (2.13) answers some calls into torch at trace time and builds the answer into
    the graph, guarded only by the function's identity: ``torch.cuda.is_available()``,
    ``torch.distributed.is_initialized()`` / ``get_rank()``, ``torch.is_grad_enabled()``
    (which the build traces as False, under no_grad). Record each call answered so, for the
    translator to check that the call still gives that answer (or to refuse it)."""
    from torch._dynamo.variables import torch as dynamo_torch
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    original = TorchInGraphFunctionVariable.call_function
    known = _answered_by_the_shim()
    folded = dynamo_torch.constant_fold_functions

    def recorded(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        result = original(self, tx, args, kwargs)
        fn = self.value
        try:
            skip = fn in known or getattr(fn, "__module__", None) == "math"
        except TypeError:  # unhashable
            skip = True
        if skip:
            return result
        with_args = bool(args or kwargs)
        if not with_args and result.is_python_constant():
            found.append(_StateRead(fn, self.source, False, result.as_python_constant()))
        elif with_args and fn in folded:
            found.append(_StateRead(fn, self.source, True, None))
        return result

    with mock.patch.object(TorchInGraphFunctionVariable, "call_function", recorded):
        yield


@contextlib.contextmanager
def _extremes_by_key_traced() -> Iterator[None]:
    """Dynamo (2.13) stops at ``max(...)`` or ``min(...)`` given ``key=`` (its handler takes no
    keyword): have it trace :func:`.traced.extreme_by_key` instead, a Python spelling of the
    builtin, whose reads (the items, the key function's) it guards as the function's own."""
    from torch._dynamo.variables import ConstantVariable, TupleVariable, UserFunctionVariable
    from torch._dynamo.variables.builtin import BuiltinVariable

    from .traced import extreme_by_key

    original = BuiltinVariable.call_function

    def call_function(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        key = kwargs.get("key")
        if self.fn not in (max, min) or key is None or not args or set(kwargs) - {"key", "default"}:
            return original(self, tx, args, kwargs)
        if key.is_python_constant() and key.as_python_constant() is None:  # key=None: no key
            return original(self, tx, args, {k: v for k, v in kwargs.items() if k != "key"})
        if len(args) > 1 and "default" in kwargs:
            return original(self, tx, args, kwargs)  # max(a, b, default=...): the builtin's TypeError
        items = args[0] if len(args) == 1 else TupleVariable(list(args))
        largest, given = ConstantVariable.create(self.fn is max), ConstantVariable.create("default" in kwargs)
        default = kwargs.get("default", ConstantVariable.create(None))
        traced = UserFunctionVariable(typing.cast(types.FunctionType, extreme_by_key))
        return traced.call_function(tx, [items, key, largest, default, given], {})

    with mock.patch.object(BuiltinVariable, "call_function", call_function):
        yield


@functools.cache
def _single_dispatch_code() -> types.CodeType:
    """The code of every ``functools.singledispatch`` function (the wrapper it returns)."""
    return typing.cast(types.FunctionType, functools.singledispatch(lambda arg: arg)).__code__


@dataclass(frozen=True)
class _Dispatch:
    """A call of a ``functools.singledispatch`` function answered while tracing: the function's
    source, the class it dispatched on, the registry's key that answered and its function."""

    source: Any
    cls: type
    key: type
    impl: types.FunctionType
    #: the registry's classes, in order, while tracing.
    classes: tuple[type, ...]
    #: whether the first argument is a tensor (a Parameter passes as one).
    tensor: bool


@contextlib.contextmanager
def _single_dispatches_answered(found: list[_Dispatch]) -> Iterator[None]:
    """Dynamo (2.13) stops in a ``functools.singledispatch`` function: it looks the class up in
    a ``WeakKeyDictionary`` cache, misses, and fills it (a side effect). Dispatch as the
    function does now (by the class of the first argument, which Dynamo guards) and trace the
    function found, recording each, for the translator to check the registry's classes and
    that function (or to refuse it)."""
    from torch._dynamo.variables.functions import UserFunctionVariable
    from torch._dynamo.variables.tensor import TensorVariable

    original = UserFunctionVariable.call_function

    def call_function(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        fn = self.fn
        if getattr(fn, "__code__", None) is not _single_dispatch_code() or not args or self.source is None:
            return original(self, tx, args, kwargs)
        try:
            cls = args[0].python_type()
        except NotImplementedError:
            return original(self, tx, args, kwargs)
        impl = fn.dispatch(cls)
        keys = [k for k in fn.registry if fn.registry[k] is impl and issubclass(cls, k)]
        if type(impl) is not types.FunctionType or not keys:
            return original(self, tx, args, kwargs)
        tensor = isinstance(args[0], TensorVariable)
        found.append(_Dispatch(self.source, cls, keys[0], impl, tuple(fn.registry), tensor))
        return UserFunctionVariable(impl).call_function(tx, args, kwargs)

    with mock.patch.object(UserFunctionVariable, "call_function", call_function):
        yield


#: The device types whose autocast dtype (``torch.get_autocast_dtype(device)``) a trace may read.
_AUTOCAST_DEVICES = ("cpu", "cuda")


@contextlib.contextmanager
def _autocast_dtypes_answered(found: dict[str, torch.dtype]) -> Iterator[None]:
    """Dynamo (2.13) answers ``torch.get_autocast_dtype("cpu")`` while tracing (it is refused
    below, as depending on the machine) and stops at ``torch.get_autocast_cpu_dtype()``. Both
    read torch's autocast dtype for a device, which ``torch.set_autocast_dtype`` changes while
    autocast is off: answer them as torch does now, recording each device's answer, for the
    translator to check it on each call (only in an entry that reads it)."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    original = TorchInGraphFunctionVariable.call_function
    legacy = {torch.get_autocast_cpu_dtype: "cpu", torch.get_autocast_gpu_dtype: "cuda"}

    def call_function(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        fn = self.value
        device: Any = None
        if fn is torch.get_autocast_dtype and len(args) + len(kwargs) == 1:
            arg = args[0] if args else kwargs.get("device_type")
            if arg is not None and arg.is_python_constant():
                device = arg.as_python_constant()
        elif fn in legacy and not args and not kwargs:
            device = legacy[fn]
        if device not in _AUTOCAST_DEVICES:
            return original(self, tx, args, kwargs)
        found[device] = torch.get_autocast_dtype(device)
        return ConstantVariable.create(found[device])

    with mock.patch.object(TorchInGraphFunctionVariable, "call_function", call_function):
        yield


@dataclass(frozen=True)
class _CachedCall:
    """A call of a ``functools.lru_cache``-wrapped helper that Dynamo traced through (it
    inlines ``__wrapped__``): the helper's source, its name, the arguments (None where one
    is not a constant, or keywords were passed) and the traced answer (``_NO_ANSWER`` where it
    is not a constant)."""

    source: Any
    name: str
    args: tuple[Any, ...] | None
    answer: Any


#: The answer of a traced call that is no Python constant (a tensor the graph computes).
_NO_ANSWER: Any = type("NoAnswer", (), {"__repr__": lambda self: "<computed in the graph>"})()


@contextlib.contextmanager
def _cached_calls_recorded(found: list[_CachedCall]) -> Iterator[None]:
    """Dynamo (2.13) traces an ``lru_cache`` helper's wrapped function, so the compiled code
    computes its answer from the state it reads (guarded), where Python returns what the cache
    holds: an answer cached while that state was other (``K = 2; helper(); K = 3``), or an
    object changed in place since. Record each such call (torch's own helpers, which Dynamo
    trusts too, aside), for the translator to check that the helper still answers so."""
    from torch._dynamo.variables import functions
    from torch._dynamo.variables.functions import WrapperUserFunctionVariable

    original = WrapperUserFunctionVariable.call_function

    def recorded(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        result = original(self, tx, args, kwargs)
        wrapper = self.wrapper_obj
        target = getattr(wrapper, "__wrapped__", None)
        module = getattr(target, "__module__", None) or ""
        if not hasattr(wrapper, "cache_info") or module.partition(".")[0] == "torch":
            return result
        constant = not kwargs and all(a.is_python_constant() for a in args)
        found.append(
            _CachedCall(
                self.source,
                f"{module}.{getattr(target, '__qualname__', '?')}",
                tuple(a.as_python_constant() for a in args) if constant else None,
                result.as_python_constant() if result.is_python_constant() else _NO_ANSWER,
            )
        )
        return result

    with (
        mock.patch.object(WrapperUserFunctionVariable, "call_function", recorded),
        # its warning that the cache is ignored ("silent incorrectness is a potential risk"): the
        # translator checks the answer, or refuses the helper, instead
        mock.patch.object(
            functions, "is_lru_cache_wrapper_trace_without_warning_allowed", lambda value: True
        ),
    ):
        yield


@contextlib.contextmanager
def _package_queries_recorded(found: list[_StateRead]) -> Iterator[None]:
    """Dynamo (2.13) answers ``importlib.util.find_spec(name)`` and
    ``importlib.metadata.version(name)`` while tracing and builds the answer into the graph,
    unguarded: whether an optional package is installed (or imported), or its version, on the
    user's machine went unchecked. Record each such call, which the translator refuses (as it
    does torch's calls answered with arguments): a check would search ``sys.path`` per call."""
    import importlib.metadata
    import importlib.util

    from torch._dynamo.variables.functions import SkipFunctionVariable

    original = SkipFunctionVariable.call_function
    queries = (importlib.util.find_spec, importlib.metadata.version)

    def recorded(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        if any(self.value is query for query in queries):
            found.append(_StateRead(self.value, self.source, True, None))
        return original(self, tx, args, kwargs)

    with mock.patch.object(SkipFunctionVariable, "call_function", recorded):
        yield


@contextlib.contextmanager
def _imports_recorded(found: dict[tuple[Any, str | None], None]) -> Iterator[None]:
    """Dynamo (2.13) runs an ``import`` statement of the traced code once, while tracing, and
    reads the module it found through an alias (``__import_pkg_dot_helpers``), guarding no
    ``sys.modules`` entry: Python imports again on every call, through ``sys.modules``. Record
    the module's source and, for ``import a.b`` (which returns ``a``), the dotted name it loads,
    for the translator to check those entries."""
    import dis

    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    op = dis.opmap["IMPORT_NAME"]
    classes: list[type] = []
    todo: list[type] = [InstructionTranslatorBase]
    while todo:  # each translator class dispatches through its own table, made with the class
        cls = todo.pop()
        classes.append(cls)
        todo.extend(cls.__subclasses__())
    originals: dict[type, Any] = {
        c: vars(c)["dispatch_table"][op] for c in classes if "dispatch_table" in vars(c)
    }

    def recorder(original: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        def recorded(self: Any, inst: Any) -> None:
            fromlist = self.stack[-1].as_python_constant()  # import a.b (none): returns a, loads a.b
            original(self, inst)
            source = getattr(self.stack[-1], "source", None) if self.stack else None
            if source is not None:
                found[(source, None if fromlist else str(inst.argval))] = None

        return recorded

    for cls, original in originals.items():
        vars(cls)["dispatch_table"][op] = recorder(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            vars(cls)["dispatch_table"][op] = original


@contextlib.contextmanager
def _autocast_defaults_recorded(found: dict[str, torch.dtype]) -> Iterator[None]:
    """An autocast block the function opens without a dtype (``with torch.autocast("cpu"):``)
    runs at the default autocast dtype of the moment (``torch.set_autocast_dtype``), which
    Dynamo (2.13) reads while tracing and the artifact keeps, unguarded. Record that dtype for
    each such block's device, as :func:`_autocast_dtypes_answered` records a read of it: the
    translator checks ``torch.get_autocast_dtype(device)`` on each call. A decorator's autocast
    object, made at import, holds its dtype and is checked as an object."""
    from torch._dynamo.variables.ctx_manager import AutocastModeVariable

    original = AutocastModeVariable.create

    def create(func: Any, args: Any, kwargs: Any) -> Any:
        var = original(func, args, kwargs)
        device, dtype, enabled = var.target_values[:3]
        if dtype is None and enabled:
            found[str(device)] = torch.get_autocast_dtype(str(device))
        return var

    with mock.patch.object(AutocastModeVariable, "create", staticmethod(create)):
        yield


#: logging.Logger's methods that log at a fixed level (``log`` and ``isEnabledFor`` take theirs).
_LOG_METHODS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
    "warning_once": logging.WARNING,  # transformers' (on logging.Logger)
    "info_once": logging.INFO,
}
#: logging.Logger's methods that answer a question about the logger (not log).
_LOG_QUERIES = ("isEnabledFor", "getEffectiveLevel")


@dataclass(frozen=True)
class _LoggerCall:
    """A call of a ``logging.Logger`` method at ``level`` (``log.debug(...)``,
    ``log.isEnabledFor(logging.DEBUG)``): the logger's source, the method, and whether the
    logger was enabled for that level while tracing."""

    source: Any
    logger: logging.Logger
    method: str
    level: int
    enabled: bool
    #: called as the logging module's function (``logging.debug(...)``): ``source`` is the
    #: function's, and the logger the module's root logger.
    function: bool = False


@contextlib.contextmanager
def _logger_calls_answered(found: list[_LoggerCall]) -> Iterator[None]:
    """Dynamo (2.13) stops at any call of a logger's method (torch.export drops them). Answer
    ``isEnabledFor(level)`` and ``getEffectiveLevel()`` as the logger does now and drop a
    logging call whose level is off, recording each, for the translator to check that the
    logger stays as it is (a call at a level that is on is refused there: the function run as
    Python logs on every call)."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.misc import LoggingLoggerVariable

    original = LoggingLoggerVariable.call_method

    def call_method(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        logger = self.value
        if tx.export or not isinstance(logger, logging.Logger):
            return original(self, tx, name, args, kwargs)
        level = _LOG_METHODS.get(name)
        if name in ("log", "isEnabledFor") and args and args[0].is_python_constant():
            level = args[0].as_python_constant()
        elif name == "getEffectiveLevel" and not args:
            level = logger.getEffectiveLevel()
        if type(level) is not int:
            return original(self, tx, name, args, kwargs)
        enabled = logger.isEnabledFor(level)
        found.append(_LoggerCall(self.source, logger, name, level, enabled))
        answer = {"isEnabledFor": enabled, "getEffectiveLevel": level}.get(name)
        return ConstantVariable.create(answer)

    with mock.patch.object(LoggingLoggerVariable, "call_method", call_method):
        yield


@contextlib.contextmanager
def _logger_attributes_answered(found: dict[tuple[Any, str], Any]) -> Iterator[None]:
    """Dynamo (2.13) cannot compare a logger's attribute (``if LOG.level <= logging.DEBUG:``:
    an unresolved ``GetAttrVariable``). Answer a plain value the logger holds itself (its
    ``level``, ``name``, ``disabled``, ``propagate``) as it is now, recording each read, for
    the translator to check it by value."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.misc import LoggingLoggerVariable

    original = LoggingLoggerVariable.var_getattr

    def var_getattr(self: Any, tx: Any, name: str) -> Any:
        logger = self.value
        own = vars(logger) if isinstance(logger, logging.Logger) else {}
        value = own.get(name)
        if name not in own or type(value) not in (int, bool, str):
            return original(self, tx, name)
        found[(self.source, name)] = value
        return ConstantVariable.create(value)

    with mock.patch.object(LoggingLoggerVariable, "var_getattr", var_getattr):
        yield


#: The logging module's functions that log through the root logger (``logging.debug(...)``),
#: each by the root logger's method it calls (``exception`` calls ``error``; ``warn`` warns).
_ROOT_LOG_FUNCTIONS = ("debug", "info", "warning", "error", "critical", "log")


@contextlib.contextmanager
def _root_logger_calls_answered(found: list[_LoggerCall]) -> Iterator[None]:
    """Dynamo (2.13) stops in ``logging.debug(...)`` (the module's function: it reads
    ``root.handlers``, to configure logging on the first call). Drop a call at a level that is
    off as :func:`_logger_calls_answered` drops ``LOG.debug(...)``, recording it, for the
    translator to check the root logger and the function (a call at a level that is on is
    refused there)."""
    from torch._dynamo.variables import ConstantVariable
    from torch._dynamo.variables.functions import UserFunctionVariable

    original = UserFunctionVariable.call_function
    functions = {getattr(logging, name): name for name in _ROOT_LOG_FUNCTIONS}

    def call_function(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        name = functions.get(self.fn) if isinstance(self.fn, types.FunctionType) else None
        if name is None or tx.export:
            return original(self, tx, args, kwargs)
        level = _LOG_METHODS.get(name)
        if name == "log" and args and args[0].is_python_constant():
            level = args[0].as_python_constant()
        if type(level) is not int:
            return original(self, tx, args, kwargs)
        root = logging.root
        found.append(_LoggerCall(self.source, root, name, level, root.isEnabledFor(level), function=True))
        return ConstantVariable.create(None)

    with mock.patch.object(UserFunctionVariable, "call_function", call_function):
        yield


#: torch's "is this code being compiled?" functions, which Dynamo answers True while tracing.
_COMPILING = (
    "torch.compiler:is_compiling",
    "torch.compiler:is_dynamo_compiling",
    "torch._utils:is_compiling",
    "torch._dynamo.external_utils:is_compiling",
)


@contextlib.contextmanager
def _compiling_answered(
    compiled_at: frozenset[_Site] | None, asked: list[tuple[_Site, bool]]
) -> Iterator[None]:
    """Dynamo (2.13) answers ``torch.compiler.is_compiling()`` True while tracing: the artifact is
    the branch code takes when compiled, while the function run as Python takes the other one,
    and reads state there that the trace never sees (transformers builds an explicit causal mask
    when compiling, and passes ``is_causal`` to attention otherwise). With ``compiled_at`` given,
    answer False instead, except at those call sites; record each site asked and the answer,
    for :func:`capture` to trace the Python branches too."""
    from torch._dynamo.variables import torch as dynamo_torch

    original = dynamo_torch.tracing_state_functions
    compiling = {import_ref(ref) for ref in _COMPILING}

    class Answers(dict[Any, Any]):
        def __getitem__(self, fn: Any) -> Any:
            if fn not in compiling:
                return super().__getitem__(fn)
            tx = sys._getframe(1).f_locals.get("tx")  # the handler that asks: tx traces the caller
            site = _site(tx)
            # aot_build's own entries ask it to run as the plain function inside a trace
            own = site is not None and site[0][0].co_filename.startswith(_AOT_BUILD_DIR)
            answer = compiled_at is None or site is None or own or site in compiled_at
            if site is not None and not own:
                asked.append((site, answer))
            return answer

    with mock.patch.object(dynamo_torch, "tracing_state_functions", lambda: Answers(original())):
        yield


#: Element types whose values in a set sort the same from any iteration order (distinct,
#: totally ordered): ``sorted(S)`` of such a set does not depend on the order of ``S``.
_TOTALLY_ORDERED = (str, bytes, int)


@contextlib.contextmanager
def _set_orders_recorded(order_free: set[int]) -> Iterator[None]:
    """Dynamo (2.13) guards a set by its elements; a ``for`` loop over it marks its iteration
    order as relied on too (``guard_on_key_order``), but ``list(S)``, ``tuple(S)``, ``a, b = S``
    and ``",".join(S)`` unpack it without: an equal set in another order (refilled, or a set of
    strings in another process, whose hashes differ) gave another result. Mark them too.

    Except where the order cannot matter: ``sorted(S)`` with no ``key=`` of a set of strings,
    bytes or ints (the fix the build's message for an iterated set of strings gives) orders
    them the same from any order, and a set of strings iterates in another order in each
    process. The sets being sorted so are in ``order_free`` (by id) while Dynamo unpacks them
    (:func:`_derived_set_orders_recorded` leaves the sets a derived one came from unmarked too)."""
    from torch._dynamo.source import is_constant_source
    from torch._dynamo.variables.builtin import BuiltinVariable
    from torch._dynamo.variables.sets import SetVariable

    original = SetVariable.unpack_var_sequence
    sort = BuiltinVariable.call_sorted

    def unpacked(self: Any, tx: Any) -> Any:
        if id(self) not in order_free and self.source is not None and not is_constant_source(self.source):
            tx.output.guard_on_key_order.add(self.source)
        return original(self, tx)

    def call_sorted(self: Any, tx: Any, obj: Any, **kwargs: Any) -> Any:
        if "key" in kwargs or not isinstance(obj, SetVariable) or not _sorts_from_any_order(obj):
            return sort(self, tx, obj, **kwargs)
        order_free.add(id(obj))
        try:
            return sort(self, tx, obj, **kwargs)
        finally:
            order_free.discard(id(obj))

    with (
        mock.patch.object(SetVariable, "unpack_var_sequence", unpacked),
        mock.patch.object(BuiltinVariable, "call_sorted", call_sorted),
    ):
        yield


def _sorts_from_any_order(var: Any) -> bool:
    """A set Dynamo holds whose elements are all strings, all bytes, or all ints (bools count
    as ints): its sorted list is the same whatever order it iterates in."""
    try:
        elements = var.as_python_constant()
    except Exception:  # an element that is no constant: a tensor, an object
        return False
    kinds = {
        str if isinstance(e, str) else bytes if isinstance(e, bytes) else int if isinstance(e, int) else None
        for e in elements
    }
    return len(kinds) <= 1 and None not in kinds


#: Set methods whose result is a new set computed from the set and the arguments, and those
#: that change the set by them.
_SET_ALGEBRA = frozenset({"union", "intersection", "difference", "symmetric_difference", "copy"})
_SET_UPDATES = frozenset(
    {"update", "intersection_update", "difference_update", "symmetric_difference_update"}
)
#: The operators Dynamo computes a set's ``|``, ``&``, ``-``, ``^`` by (and their in-place forms).
_SET_OPERATORS = ("nb_or_impl", "nb_and_impl", "nb_subtract_impl", "nb_xor_impl")
_SET_INPLACE = (
    "nb_inplace_or_impl",
    "nb_inplace_and_impl",
    "nb_inplace_subtract_impl",
    "nb_inplace_xor_impl",
)


@contextlib.contextmanager
def _derived_set_orders_recorded(order_free: set[int]) -> Iterator[None]:
    """Dynamo (2.13) computes a set derived from others (``S - T``, ``S | T``, ``S.union(T)``,
    ``u = S.copy(); u -= T``) from their elements, in the order it unpacked them, to a new set
    with no source; iterated (``for v in S - T``), that set runs in the order it has, which
    follows the order of the sets it was computed from (``S = {9, 1}`` after import, equal to the
    ``{1, 9}`` traced, iterates the other way), but only their elements were guarded. Remember
    the sets each derived set was computed from; when it is iterated or unpacked, mark their
    iteration orders as relied on, as Dynamo does for a set iterated directly."""
    from torch._dynamo.source import is_constant_source
    from torch._dynamo.variables.lists import CommonListMethodsVariable
    from torch._dynamo.variables.sets import FrozensetVariable, SetVariable

    origins: dict[int, tuple[Any, frozenset[Any]]] = {}  # id of a derived set: it, the sources

    def sources(*variables: Any) -> frozenset[Any]:
        found: set[Any] = set()
        for var in variables:
            if not isinstance(var, SetVariable):
                continue
            if var.source is None:
                found |= origins.get(id(var), (None, frozenset()))[1]
            elif not is_constant_source(var.source):
                found.add(var.source)
        return frozenset(found)

    def derive(result: Any, *operands: Any) -> None:
        if isinstance(result, SetVariable) and result.source is None:
            found = sources(result, *operands)
            if found:
                origins[id(result)] = (result, found)

    def method(original: Callable[..., Any]) -> Callable[..., Any]:
        def call_method(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
            result = original(self, tx, name, args, kwargs)
            if name in _SET_ALGEBRA:
                derive(result, self, *args)
            elif name in _SET_UPDATES:
                derive(self, *args)
            return result

        return call_method

    def operator(original: Callable[..., Any]) -> Callable[..., Any]:
        def binary(self: Any, tx: Any, other: Any, *rest: Any, **kwargs: Any) -> Any:
            result = original(self, tx, other, *rest, **kwargs)
            derive(result, self, other)
            return result

        return binary

    clone = SetVariable.clone
    iterate = SetVariable.tp_iter_impl
    unpack = SetVariable.unpack_var_sequence

    def cloned(self: Any, **kwargs: Any) -> Any:
        result = clone(self, **kwargs)
        derive(result, self)
        return result

    def relied_on(self: Any, tx: Any) -> None:
        if self.source is None and id(self) in origins and id(self) not in order_free:
            tx.output.guard_on_key_order.update(origins[id(self)][1])

    def iterated(self: Any, tx: Any) -> Any:
        relied_on(self, tx)
        return iterate(self, tx)

    def unpacked(self: Any, tx: Any) -> Any:
        relied_on(self, tx)
        return unpack(self, tx)

    extend = CommonListMethodsVariable.call_method

    def extended(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        if name == "extend" and args and isinstance(args[0], SetVariable):  # list(S - T): its items
            relied_on(args[0], tx)
        return extend(self, tx, name, args, kwargs)

    with contextlib.ExitStack() as stack:
        for cls in (SetVariable, FrozensetVariable):
            stack.enter_context(mock.patch.object(cls, "call_method", method(cls.call_method)))
        for name in (*_SET_OPERATORS, *_SET_INPLACE):
            stack.enter_context(mock.patch.object(SetVariable, name, operator(getattr(SetVariable, name))))
        stack.enter_context(mock.patch.object(SetVariable, "clone", cloned))
        stack.enter_context(mock.patch.object(SetVariable, "tp_iter_impl", iterated))
        stack.enter_context(mock.patch.object(SetVariable, "unpack_var_sequence", unpacked))
        stack.enter_context(mock.patch.object(CommonListMethodsVariable, "call_method", extended))
        yield


@contextlib.contextmanager
def _set_uses_recorded(members: dict[tuple[Any, type], bool], other: set[Any]) -> Iterator[None]:
    """Dynamo (2.13) answers ``cls in S`` for a set of classes from the elements it realized,
    each guarded by its position (``list(S)[i]``): record each such test (the set's source, the
    class, the answer), and the source of each set used otherwise (a method, an operator), for
    the translator to check the membership tested (a set that only answers ``in`` may grow:
    transformers registers each output class it defines) or, for a set used otherwise, all of
    its members."""
    from torch._dynamo.variables.sets import SetVariable

    contains = SetVariable.sq_contains
    method = SetVariable.call_method

    def sq_contains(self: Any, tx: Any, item: Any) -> Any:
        result = contains(self, tx, item)
        try:
            value = item.as_python_constant() if self.source is not None else None
        except Exception:  # not a constant: the set is checked whole
            value = None
        if isinstance(value, type) and result.is_python_constant():
            members[(self.source, value)] = bool(result.as_python_constant())
        elif self.source is not None:
            other.add(self.source)
        return result

    def call_method(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        if self.source is not None and name not in ("__contains__", "__len__", "__iter__"):
            other.add(self.source)
        return method(self, tx, name, args, kwargs)

    with (
        mock.patch.object(SetVariable, "sq_contains", sq_contains),
        mock.patch.object(SetVariable, "call_method", call_method),
    ):
        yield


@contextlib.contextmanager
def _new_objects_recorded(found: dict[tuple[Any, str], None]) -> Iterator[None]:
    """Dynamo (2.13) guards the class of an object the function creates (``Helper()``), not
    what it then finds on that class: a method, ``__init__``, ``__call__``, a property, replaced
    after import, went unseen (the object has no source of its own); nor for an object without
    an instance dict (a NamedTuple's method). Record each name looked up on such an object, with
    the class's source, for the translator to check on the class."""
    from torch._dynamo.source import TypeSource
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    getattr_original = UserDefinedObjectVariable.var_getattr
    method_original = UserDefinedObjectVariable.call_method
    slot_original = UserDefinedObjectVariable._lookup_slot_type_attr
    lookup_original = UserDefinedObjectVariable.lookup_class_mro_attr

    def record(self: Any, name: str) -> None:
        if self.source is None:
            if self.cls_source is not None:
                found[(self.cls_source, name)] = None
        elif not hasattr(self.value, "__dict__"):  # a NamedTuple's: Dynamo guards no instance dict
            found[(TypeSource(self.source), name)] = None

    def var_getattr(self: Any, tx: Any, name: str) -> Any:
        record(self, name)
        return getattr_original(self, tx, name)

    def call_method(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        record(self, name)
        return method_original(self, tx, name, args, kwargs)

    def slot(self: Any, tx: Any, name: str, **kwargs: Any) -> Any:
        # the operators Dynamo runs itself (obj[i], len(obj), x in obj)
        record(self, name)
        return slot_original(self, tx, name, **kwargs)

    def lookup(self: Any, name: str) -> Any:
        if name[:2] == name[-2:] == "__":  # a binary operator's method (obj == y, obj + y)
            record(self, name)
        return lookup_original(self, name)

    with (
        mock.patch.object(UserDefinedObjectVariable, "var_getattr", var_getattr),
        mock.patch.object(UserDefinedObjectVariable, "call_method", call_method),
        mock.patch.object(UserDefinedObjectVariable, "_lookup_slot_type_attr", slot),
        mock.patch.object(UserDefinedObjectVariable, "lookup_class_mro_attr", lookup),
    ):
        yield


@contextlib.contextmanager
def _dir_calls_recorded(found: dict[Any, None]) -> Iterator[None]:
    """Dynamo (2.13) answers ``dir(Cls)`` and ``dir(module)`` while tracing, guarding only the
    object: a name added to the class (or a base) or the module after import changed eager's
    answer unseen. Record the source of each object ``dir`` was asked of, for the translator to
    check the names it holds."""
    from torch._dynamo.variables.builtin import BuiltinVariable

    original = BuiltinVariable.call_dir

    def call_dir(self: Any, tx: Any, arg: Any) -> Any:
        result = original(self, tx, arg)
        if result is not None and getattr(arg, "source", None) is not None:
            found[arg.source] = None
        return result

    with mock.patch.object(BuiltinVariable, "call_dir", call_dir):
        yield


def _python_class_getitem(cls: Any) -> bool:
    """Whether ``cls[key]`` runs a ``__class_getitem__`` written in Python outside ``typing``
    (a registry class's ``Reg["relu"]``), where ``list[int]`` and ``Generic``'s do not."""
    if not isinstance(cls, type):
        return False
    for k in cls.__mro__:
        found = vars(k).get("__class_getitem__")
        if found is not None:
            fn = getattr(found, "__func__", found)
            return isinstance(fn, types.FunctionType) and fn.__module__ != "typing"
    return False


@contextlib.contextmanager
def _class_subscripts_recorded(found: dict[Any, None]) -> Iterator[None]:
    """Dynamo (2.13) answers ``Cls[key]`` for a class whose ``__class_getitem__`` is written in
    Python while tracing, with no guard on what that method reads (``cls._TABLE[key]``). Record
    the source of each such class, for the translator to refuse it."""
    from torch._dynamo.variables.builtin import BuiltinVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    original = BuiltinVariable.call_getitem

    def call_getitem(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        obj = args[0] if args else None
        if isinstance(obj, UserDefinedClassVariable) and _python_class_getitem(obj.value):
            found[obj.source] = None
        return original(self, tx, *args, **kwargs)

    with mock.patch.object(BuiltinVariable, "call_getitem", call_getitem):
        yield


@contextlib.contextmanager
def _sources_recorded(owner: type, method: str, found: dict[Any, None]) -> Iterator[None]:
    """Record the source of each of Dynamo's variables of class ``owner`` whose ``method`` the
    trace calls (one with no source: nothing to check it by)."""
    original = getattr(owner, method)

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.source is not None:
            found[self.source] = None
        return original(self, *args, **kwargs)

    with mock.patch.object(owner, method, recorded):
        yield


@contextlib.contextmanager
def _class_calls_recorded(found: dict[Any, None]) -> Iterator[None]:
    """Dynamo (2.13) creates an object of a class that defines no ``__new__`` or ``__init__`` of
    its own (``A()``, the object's are found on ``object``) guarding the class's identity only:
    ``A.__init__`` (or a base's, or ``__new__``) set after import went unseen. Record the source
    of each class the trace calls, for the translator to check that it still lacks them."""
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    with _sources_recorded(UserDefinedClassVariable, "call_function", found):
        yield


@contextlib.contextmanager
def _class_methods_recorded(found: dict[Any, None]) -> Iterator[None]:
    """Dynamo (2.13) binds a classmethod looked up on a class (``Ops.scale(x)``,
    ``REG["a"].f(x)``, ``type(self).act(x)``) to the function it wraps and inlines it without a
    guard on that function (a staticmethod's is guarded, a classmethod's read through an instance
    too): ``Ops.scale = classmethod(other)`` after import went unseen. Record the source of each
    such descriptor (the class's ``__dict__`` item Dynamo found it at), for the translator to
    check its kind and the function it wraps."""
    from torch._dynamo.variables.functions import ClassMethodVariable

    with _sources_recorded(ClassMethodVariable, "tp_descr_get_impl", found):
        yield


@contextlib.contextmanager
def _metaclass_reads_recorded(found: dict[tuple[Any, str], None], calls: dict[type, None]) -> Iterator[None]:
    """Dynamo (2.13) answers a class attribute that the class gets from its metaclass
    (``Meta.SCALE`` read as ``Cls.SCALE``) with no guard but the class's identity: the
    metaclass's value changed, or the class given one of its own, went unseen. Record each such
    read with the class's source. And it traces a class call as ``type.__call__`` (``__new__``
    and ``__init__``) even where the metaclass defines its own ``__call__`` (a singleton, a
    factory of defaults), so the trace computes another object than Python makes: record each
    such class, for the translator to refuse."""
    from torch._dynamo.variables.user_defined import (
        NO_SUCH_SUBOBJ,
        UserDefinedClassVariable,
        is_data_descriptor,
    )

    getattr_original = UserDefinedClassVariable.var_getattr
    call_original = UserDefinedClassVariable.call_function

    def var_getattr(self: Any, tx: Any, name: str) -> Any:
        if self.source is not None and type(self.value) is not type:
            meta_attr = self.lookup_metaclass_attr(name)
            if (
                meta_attr is not NO_SUCH_SUBOBJ
                and not is_data_descriptor(meta_attr)
                and self.lookup_cls_mro_attr(name) is NO_SUCH_SUBOBJ
            ):
                found[(self.source, name)] = None
        return getattr_original(self, tx, name)

    def call_function(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        if _own_metaclass_call(self.value):
            calls[self.value] = None
        return call_original(self, tx, args, kwargs)

    with (
        mock.patch.object(UserDefinedClassVariable, "var_getattr", var_getattr),
        mock.patch.object(UserDefinedClassVariable, "call_function", call_function),
    ):
        yield


#: The bytecodes that branch on an object's truth (3.11's and 3.12's).
_TRUTH_OPCODES = (
    "POP_JUMP_IF_FALSE",
    "POP_JUMP_IF_TRUE",
    "JUMP_IF_FALSE_OR_POP",
    "JUMP_IF_TRUE_OR_POP",
    "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_FALSE",
)


def _metaclass_function(cls: type, name: str) -> Any:
    """The Python function ``cls``'s metaclass (or a base of it) defines as ``name``; None if
    none defines it, or one defines it otherwise (in C, as ``type`` does)."""
    meta: type = type(cls)
    found = next((vars(k)[name] for k in meta.__mro__ if name in vars(k)), None)
    return found if isinstance(found, types.FunctionType) else None


@contextlib.contextmanager
def _metaclass_protocols_recorded(found: dict[tuple[Any, str], None]) -> Iterator[None]:
    """Dynamo (2.13) answers ``len(Cls)``, ``x in Cls``, ``for x in Cls`` for a class with a
    metaclass of its own by tracing the metaclass's special method, guarding the class's
    identity only: the metaclass's ``__len__`` replaced after import, or one added, went unseen.
    ``if Cls:`` and ``Cls[k]`` it answers by calling them while tracing (what they read is not
    guarded either). Record each special method looked up on a class's metaclass (the class's
    source, the name), for the translator to check that the metaclass still gives (or lacks) the
    very function; and have ``if Cls:`` and ``Cls[k]`` traced through the metaclass's Python
    ``__bool__``, ``__len__`` or ``__getitem__``, as Python calls them."""
    from torch._dynamo import symbolic_convert
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase
    from torch._dynamo.variables import builtin, object_protocol
    from torch._dynamo.variables.constant import ConstantVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    lookup = UserDefinedClassVariable._maybe_get_baseclass_method
    method = UserDefinedClassVariable.call_method
    subscript = UserDefinedClassVariable.mp_subscript_impl
    truth = object_protocol.generic_bool

    def record(var: Any, name: str) -> bool:
        """Whether ``var`` is a class with a metaclass of its own (its use recorded)."""
        if not isinstance(var, UserDefinedClassVariable) or type(var.value) is type:
            return False
        if var.source is not None:
            found[(var.source, name)] = None
        return True

    def looked_up(self: Any, name: str) -> Any:  # len(Cls), x in Cls, iter(Cls), -Cls...
        if name[:2] == name[-2:] == "__":
            record(self, name)
        return lookup(self, name)

    def call_method(self: Any, tx: Any, name: str, args: Any, kwargs: Any) -> Any:
        if name[:2] == name[-2:] == "__":
            record(self, name)
        return method(self, tx, name, args, kwargs)

    def subscripted(self: Any, tx: Any, key: Any) -> Any:  # Cls[k]: type(Cls).__getitem__
        if record(self, "__getitem__") and _metaclass_function(self.value, "__getitem__") is not None:
            return self.call_method(tx, "__getitem__", [key], {})
        return subscript(self, tx, key)

    def traced_truth(tx: Any, obj: Any) -> Any:
        """``bool(Cls)`` traced through the metaclass's Python ``__bool__`` (else ``__len__``), so
        that what it reads is guarded; None where Python answers otherwise (``type``'s)."""
        if not (record(obj, "__bool__") and record(obj, "__len__")):
            return None
        for name in ("__bool__", "__len__"):
            if any(name in vars(k) for k in type(obj.value).__mro__):
                if _metaclass_function(obj.value, name) is None:
                    return None
                result = obj.call_method(tx, name, [], {})
                if not result.is_python_constant():
                    return None
                answer = result.as_python_constant()
                return ConstantVariable.create(bool(answer) if name == "__bool__" else answer > 0)
        return None

    def generic_bool(tx: Any, obj: Any) -> Any:  # bool(Cls)
        answer = traced_truth(tx, obj)
        return truth(tx, obj) if answer is None else answer

    def jump(original: Callable[..., Any]) -> Callable[..., Any]:
        # if Cls: / not Cls: Dynamo asks Python (the class is a constant to it); trace it first
        def handler(self: Any, inst: Any) -> Any:
            if self.stack:
                traced_truth(self, self.stack[-1])
            return original(self, inst)

        return handler

    # each translator class holds its handlers in a table by opcode, made when it was defined
    opcodes = [dis.opmap[name] for name in (*_TRUTH_OPCODES, "UNARY_NOT") if name in dis.opmap]
    translators, todo = [], [InstructionTranslatorBase]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "dispatch_table" in vars(cls):
            translators.append(cls)

    def handlers(table: list[Any]) -> list[Any]:
        table = list(table)
        for op in opcodes:
            if table[op] is not None:
                table[op] = jump(table[op])
        return table

    with (
        mock.patch.object(UserDefinedClassVariable, "_maybe_get_baseclass_method", looked_up),
        mock.patch.object(UserDefinedClassVariable, "call_method", call_method),
        mock.patch.object(UserDefinedClassVariable, "mp_subscript_impl", subscripted),
        mock.patch.object(symbolic_convert, "generic_bool", generic_bool),
        mock.patch.object(builtin, "generic_bool", generic_bool),
        mock.patch.object(object_protocol, "generic_bool", generic_bool),
        contextlib.ExitStack() as stack,
    ):
        for cls in translators:
            stack.enter_context(mock.patch.object(cls, "dispatch_table", handlers(cls.dispatch_table)))
        yield


def _own_metaclass_call(cls: Any) -> bool:
    """Whether calling ``cls`` runs a ``__call__`` its metaclass defines in Python, outside the
    standard library and torch (whose metaclasses Dynamo models: ``EnumMeta``, ``ABCMeta``)."""
    if not isinstance(cls, type) or type(cls) is type:
        return False
    meta: type = type(cls)
    call = next((vars(k)["__call__"] for k in meta.__mro__ if "__call__" in vars(k)), None)
    if not isinstance(call, types.FunctionType):
        return False
    top = str(call.__module__).split(".")[0]
    return top not in sys.stdlib_module_names and top != "torch"


@contextlib.contextmanager
def _torch_functions_recorded(found: dict[Any, None]) -> Iterator[None]:
    """Dynamo (2.13) puts calls of many of torch's own Python functions into the graph whole
    (``F.relu``, ``F.layer_norm``, ``F.multi_head_attention_forward``), guarding the function's
    identity but nothing it reads when it runs: ``F.scaled_dot_product_attention`` replaced after
    import (an attention kernel patched in) changes what ``nn.MultiheadAttention`` computes, and
    went unseen. Record each such function, for the translator to check the functions it reads
    from its module's globals (:func:`_functions_read`)."""
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable

    original = TorchInGraphFunctionVariable.call_function

    def recorded(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        if isinstance(self.value, types.FunctionType):
            found[self.value] = None
        return original(self, tx, args, kwargs)

    with mock.patch.object(TorchInGraphFunctionVariable, "call_function", recorded):
        yield


def _functions_read(fn: types.FunctionType) -> Iterator[tuple[ObjPath, Any]]:
    """The callables ``fn``'s code reads from its module's globals, directly or as an attribute
    of a module held there (``torch.relu``), each with its path: read from the bytecode, since
    the function runs unseen by the tracer. A module that answers attributes itself
    (``torch._VF``, whose ``__getattr__`` would run on every check) is checked as a whole."""
    import dis

    def checked(value: Any) -> bool:
        plain_module = type(value) is types.ModuleType
        return not plain_module and (callable(value) or isinstance(value, types.ModuleType))

    module = str(fn.__globals__.get("__name__", fn.__module__))  # whose globals (not __module__)
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        path: ObjPath | None = None
        value: Any = None
        for ins in dis.get_instructions(code):
            if (
                ins.opname in ("LOAD_ATTR", "LOAD_METHOD")
                and path is not None
                and type(value) is types.ModuleType
            ):
                attr = getattr(value, ins.argval, MISSING)
                if attr is not MISSING:
                    path, value = path.child("getattr", ins.argval), attr
                    continue
            if path is not None and checked(value):
                yield path, value
            path = None
            if ins.opname == "LOAD_GLOBAL" and ins.argval in fn.__globals__:
                path, value = ObjPath(("global", module, ins.argval)), fn.__globals__[ins.argval]
        if path is not None and checked(value):
            yield path, value


@contextlib.contextmanager
def _requires_grad_reads_recorded(found: dict[Any, None]) -> Iterator[None]:
    """Dynamo (2.13) answers ``w.requires_grad`` from the tensor it wrapped, guarded by the
    tensor's own guard, which for a weight becomes a check of its identity (``w.requires_grad_(
    False)`` keeps it) and of the metadata it was verified with (re-verified without this flag,
    so that frozen weights still run compiled). Record each tensor whose flag the trace read, for
    the translator to check the flag itself."""
    from torch._dynamo.variables.tensor import TensorVariable

    original = TensorVariable.method_attr_requires_grad

    def recorded(self: Any, tx: Any) -> Any:
        if self.source is not None:
            found[self.source] = None
        return original(self, tx)

    with mock.patch.object(TensorVariable, "method_attr_requires_grad", recorded):
        yield


@contextlib.contextmanager
def _builtins_recorded(found: dict[tuple[str, str], None]) -> Iterator[None]:
    """Dynamo (2.13) guards a builtin the traced code calls (``abs``) in the builtins module,
    not that the calling code's module still lacks a global of that name: ``mod.abs = f`` set
    after import would be called instead. Record each builtin read with the module whose code
    read it, for the translator to check that the module's globals still lack it."""
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    original = InstructionTranslatorBase.load_builtin_from_argval

    def recorded(self: Any, argval: Any) -> Any:
        name = self.f_globals.get("__name__")
        module = sys.modules.get(name) if isinstance(name, str) else None
        if module is not None and vars(module) is self.f_globals and isinstance(argval, str):
            found[(name, argval)] = None
        return original(self, argval)

    with mock.patch.object(InstructionTranslatorBase, "load_builtin_from_argval", recorded):
        yield


#: the builtins that are the language's own constants (``NotImplemented``, which a
#: ``functools.total_ordering`` method reads): fixed, unchecked.
_LANGUAGE_CONSTANTS = (None, True, False, Ellipsis, NotImplemented)


@contextlib.contextmanager
def _builtin_constants_recorded(found: dict[str, Any]) -> Iterator[None]:
    """Dynamo (2.13) reads a name of the builtins module that is no function (a value a
    package put there: ``builtins.DEBUG_SCALE = 2.0``) as a constant, unguarded. Record each
    such name with its value, for the translator to check it in the builtins module."""
    from torch._dynamo.symbolic_convert import InstructionTranslatorBase

    original = InstructionTranslatorBase.load_builtin_from_argval

    def recorded(self: Any, argval: Any) -> Any:
        value = self.f_builtins.get(argval, NotImplemented) if isinstance(argval, str) else NotImplemented
        if not (callable(value) or any(value is c for c in _LANGUAGE_CONSTANTS) or argval.startswith("__")):
            found[argval] = value
        return original(self, argval)

    with mock.patch.object(InstructionTranslatorBase, "load_builtin_from_argval", recorded):
        yield


@contextlib.contextmanager
def _class_lookups_recorded(found: dict[tuple[Any, str, bool], None]) -> Iterator[None]:
    """Dynamo (2.13) answers ``bool(obj)``, ``len(obj)``, ``callable(obj)``, ``str(obj)`` and the like for an
    object of a Python class from whether the class (or a base) defines ``__bool__``,
    ``__len__``, ``__call__``..., guarding the object's type only: such a method added to the
    class after import, or its ``__bases__`` changed, went unseen. Record each protocol method
    looked up in an object's class hierarchy and not found, and the answers of ``callable`` and
    of truth tests, for the translator to check the class still answers the same."""
    from torch._dynamo import symbolic_convert
    from torch._dynamo.variables import builtin, object_protocol
    from torch._dynamo.variables.base import NO_SUCH_SUBOBJ
    from torch._dynamo.variables.user_defined import UserDefinedObjectVariable

    lookup = UserDefinedObjectVariable.lookup_class_mro_attr
    is_callable = builtin.BuiltinVariable.call_callable
    truth = object_protocol.generic_bool
    to_str = builtin.BuiltinVariable.call_str

    def answered(arg: Any, *names: str) -> None:
        if isinstance(arg, UserDefinedObjectVariable) and arg.source is not None:
            for name in names:
                found[(arg.source, name, defines(type(arg.value), name))] = None

    def looked_up(self: Any, name: str) -> Any:
        result = lookup(self, name)
        # a protocol method (``__iter__``, ``__contains__``): a plain attribute's lookup on the
        # class is checked with the attribute (see _class_attribute)
        if result is NO_SUCH_SUBOBJ and self.source is not None and name[:2] == name[-2:] == "__":
            found[(self.source, name, False)] = None
        return result

    def called_callable(self: Any, tx: Any, arg: Any) -> Any:
        answered(arg, "__call__")
        return is_callable(self, tx, arg)

    def generic_bool(tx: Any, obj: Any) -> Any:  # if obj: ... (its class's __bool__, else __len__)
        answered(obj, "__bool__", "__len__")
        return truth(tx, obj)

    def called_str(self: Any, tx: Any, arg: Any) -> Any:
        # str(obj): its class's __str__ (which Dynamo inlines, unchecked), else object's, which
        # returns repr(obj): Dynamo calls that while tracing, so what __repr__ reads went unseen;
        # trace it as repr(obj), which Dynamo follows (and whose lookups are recorded above)
        if isinstance(arg, UserDefinedObjectVariable):
            answered(arg, "__str__")
            if type(arg.value).__str__ is object.__str__:
                return object_protocol.generic_repr(tx, arg)
        return to_str(self, tx, arg)

    with (
        mock.patch.object(UserDefinedObjectVariable, "lookup_class_mro_attr", looked_up),
        mock.patch.object(builtin.BuiltinVariable, "call_callable", called_callable),
        mock.patch.object(builtin.BuiltinVariable, "call_str", called_str),
        mock.patch.object(symbolic_convert, "generic_bool", generic_bool),
        mock.patch.object(builtin, "generic_bool", generic_bool),
        mock.patch.object(object_protocol, "generic_bool", generic_bool),
    ):
        yield


@contextlib.contextmanager
def _numpy_arithmetic_recorded(found: dict[str, None]) -> Iterator[None]:
    """Dynamo (2.13) traces numpy arithmetic (``A * np.float32(10)``, ``np.exp(A)``, an
    ndarray's operators) into the graph as torch's, which has no floating-point error state:
    what Python does when that arithmetic overflows, divides by zero or is invalid depends on
    numpy's (``np.seterr``), which nothing checked: ``np.seterr(all="raise")`` after import made
    the function raise where the compiled call returned ``inf``. Record whether the trace put
    numpy arithmetic into the graph (a numpy function, method or operator), or computed any
    that hit a floating-point error while tracing, for the translator to check numpy's error
    state (an entry without numpy arithmetic checks nothing)."""
    numpy = sys.modules.get("numpy")
    if numpy is None:  # no numpy arithmetic without numpy imported
        yield
        return
    from torch._dynamo import utils

    def recorded(cls: type) -> Any:
        original = vars(cls)["__init__"]

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            found["numpy"] = None
            original(self, *args, **kwargs)

        return mock.patch.object(cls, "__init__", init)

    def called(kind: str, flag: int) -> None:  # arithmetic computed while tracing hit one
        found["numpy"] = None

    with (
        recorded(utils.numpy_to_tensor_wrapper),
        recorded(utils.numpy_method_wrapper),
        recorded(utils.numpy_operator_wrapper),
        numpy.errstate(all="call", call=called),
    ):
        yield


@contextlib.contextmanager
def _enum_calls_recorded(found: list[tuple[Any, Any, Any]]) -> Iterator[None]:
    """Dynamo (2.13) answers ``Color(value)`` for an enum class by calling it while tracing
    (a constant fold) and guards only the class: the member Python's ``Enum.__new__`` finds in
    the class's ``_value2member_map_`` was taken as it was, so that table changed after import
    went unseen. Record each such call (the class's source, the value, the member), for the
    translator to check that the table still maps the value to that member."""
    import enum

    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    original = UserDefinedClassVariable.call_function

    def call_function(self: Any, tx: Any, args: Any, kwargs: Any) -> Any:
        result = original(self, tx, args, kwargs)
        cls = self.value
        if (
            self.source is not None
            and isinstance(cls, type)
            and issubclass(cls, enum.Enum)
            and len(args) == 1
            and not kwargs
            and args[0].is_python_constant()
            and result.is_python_constant()
        ):
            value = args[0].as_python_constant()
            if type(value) is not cls:  # Color(Color.RED) is that member, read from no table
                found.append((self.source, value, result.as_python_constant()))
        return result

    with mock.patch.object(UserDefinedClassVariable, "call_function", call_function):
        yield


@dataclass
class _Recorded:
    """What the recorders above saw of the reads Dynamo does not guard (module docstring)."""

    #: (object's source, name) of each read that fell back to a Python ``__getattr__``.
    fallbacks: dict[tuple[Any, str], None] = field(default_factory=dict)
    #: calls into torch answered while tracing.
    state_reads: list[_StateRead] = field(default_factory=list)
    #: each call of a ``functools.singledispatch`` function answered while tracing.
    dispatches: list[_Dispatch] = field(default_factory=list)
    #: torch's autocast dtype for each device the trace asked it of (``torch.get_autocast_dtype``).
    autocast_dtypes: dict[str, torch.dtype] = field(default_factory=dict)
    #: calls of ``lru_cache`` helpers traced through.
    cached_calls: list[_CachedCall] = field(default_factory=list)
    #: (module's source, dotted name loaded or None) of each ``import`` statement the trace ran.
    imports: dict[tuple[Any, str | None], None] = field(default_factory=dict)
    #: calls of a logger's methods answered (or dropped) while tracing.
    logger_calls: list[_LoggerCall] = field(default_factory=list)
    #: (logger's source, name) of each of a logger's own attributes read (``LOG.level``): its value.
    logger_attributes: dict[tuple[Any, str], Any] = field(default_factory=dict)
    #: each module class called, with the source of one instance.
    module_classes: dict[type, Any] = field(default_factory=dict)
    #: ("isinstance" or "issubclass", object's source, class) of each test the class answers.
    class_tests: dict[tuple[str, Any, type], None] = field(default_factory=dict)
    #: (module name, name) of each builtin that code of that module read.
    builtins: dict[tuple[str, str], None] = field(default_factory=dict)
    #: each name of the builtins module read that is no function, with its value.
    builtin_constants: dict[str, Any] = field(default_factory=dict)
    #: (object's source, name, found) of each name looked up in an object's class hierarchy.
    class_lookups: dict[tuple[Any, str, bool], None] = field(default_factory=dict)
    #: the source of each class or module ``dir()`` was asked of.
    dir_calls: dict[Any, None] = field(default_factory=dict)
    #: the source of each class subscripted through a Python ``__class_getitem__``.
    class_subscripts: dict[Any, None] = field(default_factory=dict)
    #: each of torch's Python functions the trace put into the graph whole.
    torch_functions: dict[Any, None] = field(default_factory=dict)
    #: the source of each class the trace called (to create an object).
    class_calls: dict[Any, None] = field(default_factory=dict)
    #: the source of each classmethod a class gave (its class's ``__dict__`` item).
    class_methods: dict[Any, None] = field(default_factory=dict)
    #: (class's source, name) of each class attribute the class gets from its metaclass.
    metaclass_reads: dict[tuple[Any, str], None] = field(default_factory=dict)
    #: each class called whose metaclass defines its own ``__call__``.
    metaclass_calls: dict[type, None] = field(default_factory=dict)
    #: (enum class's source, value, member) of each ``Cls(value)`` the trace answered.
    enum_calls: list[tuple[Any, Any, Any]] = field(default_factory=list)
    #: "numpy" where the trace ran numpy arithmetic (which numpy's error state governs).
    numpy_arithmetic: dict[str, None] = field(default_factory=dict)
    #: (class's source, name) of each special method looked up on a class's metaclass.
    metaclass_protocols: dict[tuple[Any, str], None] = field(default_factory=dict)
    #: (class's source, name) of each name looked up on an object the function created.
    new_objects: dict[tuple[Any, str], None] = field(default_factory=dict)
    #: the source of each set (or dict) whose iteration order the trace relied on.
    key_order: set[Any] = field(default_factory=set)
    #: (set's source, class) of each ``cls in S`` the trace answered, with the answer.
    set_members: dict[tuple[Any, type], bool] = field(default_factory=dict)
    #: the source of each set the trace used otherwise than by ``in`` (checked whole).
    sets_used: set[Any] = field(default_factory=set)
    #: the source of each tensor whose ``requires_grad`` the trace read.
    requires_grad: dict[Any, None] = field(default_factory=dict)
    #: where ``torch.compiler.is_compiling()`` answers True; None: everywhere, as Dynamo does.
    compiled_at: frozenset[_Site] | None = None
    #: each call of ``torch.compiler.is_compiling()`` (or its aliases): its site and answer.
    compiling_asked: list[tuple[_Site, bool]] = field(default_factory=list)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        from torch._dynamo.variables import object_protocol
        from torch._dynamo.variables.builtin import BuiltinVariable

        # Dynamo keeps, for the process, a handler per builtin and argument types that holds
        # the method it found (``call_isinstance``): one made while another capture recorded
        # would record into that capture's tables, one made before none at all. It caches each
        # class's slots (``__bool__``...) too, stale once a class changes.
        BuiltinVariable.call_function_handler_cache.clear()
        object_protocol._get_cached_slots.cache_clear()
        try:
            with self._recorders():
                yield
        finally:
            BuiltinVariable.call_function_handler_cache.clear()

    @contextlib.contextmanager
    def _recorders(self) -> Iterator[None]:
        order_free: set[int] = set()  # sets sorted where their order cannot matter, by id
        # one ExitStack, not one with-statement: Python allows 20 nested blocks in a function
        with contextlib.ExitStack() as stack:
            for recorder in (
                _getattr_fallbacks_recorded(self.fallbacks),
                _state_reads_recorded(self.state_reads),
                _package_queries_recorded(self.state_reads),
                _autocast_defaults_recorded(self.autocast_dtypes),
                _builtin_constants_recorded(self.builtin_constants),
                _cached_calls_recorded(self.cached_calls),
                _imports_recorded(self.imports),
                _logger_calls_answered(self.logger_calls),
                _root_logger_calls_answered(self.logger_calls),
                _logger_attributes_answered(self.logger_attributes),
                _module_calls_recorded(self.module_classes),
                _class_tests_recorded(self.class_tests),
                _builtins_recorded(self.builtins),
                _class_lookups_recorded(self.class_lookups),
                _compiling_answered(self.compiled_at, self.compiling_asked),
                _requires_grad_reads_recorded(self.requires_grad),
                _set_orders_recorded(order_free),
                _derived_set_orders_recorded(order_free),
                _dir_calls_recorded(self.dir_calls),
                _class_subscripts_recorded(self.class_subscripts),
                _set_uses_recorded(self.set_members, self.sets_used),
                _new_objects_recorded(self.new_objects),
                _class_methods_recorded(self.class_methods),
                _class_calls_recorded(self.class_calls),
                _metaclass_reads_recorded(self.metaclass_reads, self.metaclass_calls),
                _metaclass_protocols_recorded(self.metaclass_protocols),
                _numpy_arithmetic_recorded(self.numpy_arithmetic),
                _enum_calls_recorded(self.enum_calls),
                _torch_functions_recorded(self.torch_functions),
                # last, so they see the call before Dynamo's own handlers do
                _autocast_dtypes_answered(self.autocast_dtypes),  # Dynamo's answer would be refused
                _extremes_by_key_traced(),
                _single_dispatches_answered(self.dispatches),
            ):
                stack.enter_context(recorder)
            yield


def capture(fn: Callable[..., Any], self_obj: Any, args: tuple[Any, ...], where: str) -> Captured:
    """Trace ``fn`` (with ``self_obj`` first for a method entry) on ``args``; see the module
    docstring. CaptureError names the read that cannot be carried, or why Dynamo stopped.

    Code that asks ``torch.compiler.is_compiling()`` is traced twice: the artifact is the branch
    it takes when compiled, and the guards are those of both branches, so that state only the
    Python branch reads is checked too (a change to it changes what the function returns now)."""
    if torch.are_deterministic_algorithms_enabled():
        raise CaptureError(
            f"{where}: deterministic algorithms are on while the build traces it "
            "(torch.use_deterministic_algorithms(True), called while importing the package?); "
            "artifacts are compiled with them off, and the shim runs them only while they are off.\n"
            "  turn them on in the code that uses the package, not at import"
        )
    module = sys.modules[fn.__module__]
    call = (self_obj, *args) if self_obj is not None else tuple(args)
    subject = _Subject(fn, self_obj, call, module, dict(vars(module)), where)
    try:
        recorded = _Recorded()
        translator = subject.trace(recorded)
        unchecked = subject.python_branches(recorded, translator)
        captured = translator.captured()
        captured.unchecked = unchecked
        with torch.no_grad():  # as traced (a call with grad on fails the check of a read of it)
            _holds_now(captured, fn, self_obj, where)
        return captured
    finally:
        for name in [k for k in vars(module) if k not in subject.before]:
            del vars(module)[name]


@dataclass
class _Subject:
    """What :func:`capture` traces: the function, the call, and its module's globals before
    any trace (Dynamo installs names there, removed afterwards)."""

    fn: Callable[..., Any]
    self_obj: Any
    call: tuple[Any, ...]
    module: types.ModuleType
    before: dict[str, Any]
    where: str

    def trace(self, recorded: _Recorded, adding_to: _Translator | None = None) -> _Translator:
        """One trace, its guards translated (into ``adding_to``'s tree and weights)."""
        from torch._dynamo.convert_frame import fullgraph_capture

        with torch.no_grad(), _dynamo_settings(), recorded.recording():
            try:
                out = fullgraph_capture(self.fn, self.call)
            except Exception as exc:
                raise _TraceFailed(_trace_failure(self.where, exc), _reason(exc)) from exc
        g = out.graph_capture_output
        recorded.key_order.update(g.output_graph.guard_on_key_order)
        module, before = self.module, self.before
        installed = {k: v for k, v in vars(module).items() if k not in before or before[k] is not v}
        sources = dict(g.import_sources)
        translator = _Translator(
            self.fn, self.self_obj, module.__name__, installed, sources, self.where, adding_to
        )
        translator.translate(list(g.output_graph.guards), list(g.traced_code), recorded)
        return translator

    def python_branches(self, compiled: _Recorded, translator: _Translator) -> tuple[str, ...]:
        """Trace again with ``torch.compiler.is_compiling()`` answered False, as the function runs
        as Python, and add what it reads to ``translator``'s; what is left unchecked, listed.

        A library often asks so to avoid code Dynamo cannot trace: where the other branch stops
        the trace, that site is answered True again (the latest site answered False before the
        failure, the likeliest cause) and the trace retried, up to ``_PYTHON_BRANCH_TRIES`` sites."""
        if not compiled.compiling_asked:
            return ()
        unchecked: list[str] = []
        compiled_at: set[_Site] = set()
        while len(compiled_at) < _PYTHON_BRANCH_TRIES:
            python = _Recorded(compiled_at=frozenset(compiled_at))
            try:
                added = self.trace(python, translator)
            except _TraceFailed as exc:
                taken = [site for site, answer in python.compiling_asked if not answer]
                if not taken:
                    raise
                compiled_at.add(taken[-1])
                unchecked.append(
                    f"the branch at {_site_label(taken[-1])} (Dynamo cannot trace it: {exc.reason})"
                )
                continue
            assert added.uncarried is not None
            # a set's or list's items are read one by one: named once
            reads = dict.fromkeys(re.sub(r"\[\d+\]", "[...]", u) for u in added.uncarried)
            unchecked.extend(f"a read there: {u}" for u in reads)
            return tuple(unchecked)
        unchecked.append(f"the branches at every other call (after {_PYTHON_BRANCH_TRIES} tries)")
        return tuple(unchecked)


def _holds_now(captured: Captured, fn: Callable[..., Any], self_obj: Any, where: str) -> None:
    """Every guard holds on the state the trace saw, as the shim will check it: a guard that
    fails already would make every call run as Python. CaptureError names it."""
    from .bound import READ_FAILED, BoundState

    try:
        state = BoundState(captured.builder.tree(), fn, None)
        code = state.check_python(self_obj, ())
    except Exception as exc:
        raise CaptureError(
            f"{where}: its guards cannot be checked as the shim would ({type(exc).__name__}: {exc}); "
            "please report this to aot-build"
        ) from exc
    if code != -1 and code < READ_FAILED:
        node = state.flat[code][0]
        kind, key = state.tree.path(node).steps[-1] if state.tree.path(node).steps else ("", None)
        if kind == "call" and key is not None:  # an lru_cache helper's answer (_cached_call)
            raise CaptureError(
                f"{where}: {state.explain(code, self_obj)}: the functools.lru_cache helper answers from "
                "its cache what it computed while the state it reads was other, and the compiled code "
                "would compute it afresh, so every call would run as Python.\n  clear its cache "
                "(cache_clear()) where that state changes, or compute the value at import into a "
                "module global"
            )
    if code != -1:
        raise CaptureError(
            f"{where}: a guard fails on the very state the trace read ({state.explain(code, self_obj)}), "
            "so every call would run as Python; the value is one aot_build cannot check the way "
            "Dynamo read it.\n  hold it in a plain dict, a module attribute or a global instead, "
            "or report this to aot-build"
        )


def _trace_failure(where: str, exc: BaseException) -> str:
    text = str(exc).strip()
    marker = (
        "side effects happened in the model.forward. Here are the list of potential sources you "
        "can double check:"
    )
    if marker in text:
        changed = text.split(marker, 1)[1].strip()
        return (
            f"{where}: changes Python state when it runs ({changed}); compiled code would not repeat "
            "that.\n  keep the function free of side effects on Python objects: compute and return "
            "values, fill caches at import time"
        )
    if "`_warnings.warn`" in text or "builtin `warnings.warn`" in text:
        return (
            f"{where}: calls warnings.warn(...) on the path the build traced, so the function run "
            "as Python warns when called, and a compiled call could not.\n  warn outside the "
            "entry (in the code that calls it, or once at import), or on a branch the traced "
            "arguments and state do not take"
        )
    cut = text.find("\n\nDeveloper debug context")
    text = (text[:cut] if cut > 0 else text).strip()
    return (
        f"{where}: torch.compile's tracer (Dynamo), which aot_build uses to find every read of "
        f"Python state the compiled code depends on, stopped with {type(exc).__name__}: {text}\n  "
        "make the function traceable as torch.compile(fullgraph=True) traces it, as the hint above "
        "says: no Python control flow on tensor values; a config read through a dict subclass whose "
        "__getattr__ is dict.__getitem__ becomes config['key'], or a dataclass or "
        "types.SimpleNamespace"
    )


class _Translator:
    """Dynamo's guards (sources and kinds) to paths and checks; see the module docstring."""

    def __init__(
        self,
        fn: Callable[..., Any],
        self_obj: Any,
        module: str,
        installed: dict[str, Any],
        import_sources: dict[str, str],
        where: str,
        adding_to: _Translator | None = None,
    ) -> None:
        self.fn = fn
        self.self_obj = self_obj
        self.module = module
        self.installed = installed
        self.import_sources = import_sources
        self.where = where
        code = fn.__code__
        self.self_name = code.co_varnames[0] if self_obj is not None and code.co_argcount else None
        # a method entry decorated by a (*args, **kwargs) wrapper (@torch.no_grad()): self is args[0]
        starred = self_obj is not None and not code.co_argcount and code.co_flags & inspect.CO_VARARGS
        self.self_in = code.co_varnames[code.co_kwonlyargcount] if starred else None
        self.freevars = set(code.co_freevars)
        self._paths: dict[Any, ObjPath | None] = {}
        self._hooks_read = False
        self._tested_sets: set[Any] = set()  # see translate
        #: None: a read that cannot be carried is refused; a list: it is listed there instead
        #: (a trace of the branches the function takes as Python, which the artifact does not run).
        self.uncarried: list[str] | None = None if adding_to is None else []
        if adding_to is None:
            self.builder = TreeBuilder()
            self._weights: dict[int, tuple[list[ObjPath], torch.Tensor]] = {}
            self._class_attrs: set[tuple[ObjPath, str]] = set()
            self._attr_functions: set[ObjPath] = set()
            self._torch_functions_seen: set[Any] = set()
            self._traced_code: list[types.CodeType] = []
            self._answered: list[Any] = []
        else:  # a second trace of the same function: its guards join the first's
            self.builder = adding_to.builder
            self._weights = adding_to._weights
            self._class_attrs = adding_to._class_attrs
            self._attr_functions = adding_to._attr_functions
            self._torch_functions_seen = adding_to._torch_functions_seen
            self._traced_code = adding_to._traced_code
            self._answered = adding_to._answered

    # ------------------------------------------------------------------ sources

    def path(self, source: Any) -> ObjPath | None:
        """The portable path of a Dynamo source; None for one rooted at an argument (or in the
        globals of exec-made code, see :meth:`_global`)."""
        key = source
        if key not in self._paths:
            self._paths[key] = self._path(source)
        return self._paths[key]

    def _path(self, source: Any) -> ObjPath | None:
        from torch._dynamo import source as S

        kind = type(source)
        if kind is S.LocalSource:
            name = source.local_name
            if name == self.self_name:
                return ObjPath(("self",))
            if name in self.freevars:
                return ObjPath(("closure", name))
            return None  # an argument: checked by the shim's argument checks
        if kind is S.GlobalSource:
            return self._global(source.global_name)
        if kind is S.GlobalWeakRefSource:
            ref = self._global(source.global_name)
            return ref.child("call") if ref is not None else None
        if (
            kind is S.GetItemSource
            and type(source.base) is S.LocalSource
            and source.base.local_name == self.self_in
            and source.index == 0
        ):
            return ObjPath(("self",))
        base_source = getattr(source, "base", None)
        if base_source is None:
            raise self._unsupported(source, "a root")
        if (
            kind is S.DictGetItemSource
            and type(base_source) is S.GlobalSource
            and base_source.global_name.startswith("___unnamed_scope_")
            and base_source.global_name in self.installed
        ):
            return self._exec_global(self.installed[base_source.global_name], source.index)
        base = self.path(base_source)
        if base is None:
            return None
        if kind in (
            S.NNModuleSource,
            S.UnspecializedNNModuleSource,
            S.UnspecializedBuiltinNNModuleSource,
            S.SkipGuardSource,
        ):
            return base
        if kind in (
            S.AttrSource,
            S.UnspecializedParamBufferSource,
            S.CellContentsSource,
            S.GenericAttrSource,
        ):
            if source.member == "__dict__":  # vars(obj): the dict step, stamped by the dict's tags
                return base.child("dict")
            return base.child("getattr", source.member)
        if kind in (S.DictGetItemSource, S.DictSubclassGetItemSource):
            return base.child("item", self._key(source.index))
        if kind is S.ConstDictKeySource:
            return base.child("key", int(source.index))
        if kind in (S.GetItemSource, S.ListGetItemSource):
            index = source.unpack_slice() if getattr(source, "index_is_slice", False) else source.index
            return base.child("index", self._key(index))
        if kind is S.TypeSource:
            return base.child("type")
        if kind is S.TypeDictSource:
            return base.child("dict")
        if kind is S.TypeMROSource:
            return base.child("mro")
        if kind is S.ClosureSource:
            return base.child("closure")
        if kind is S.CodeSource:
            return base.child("code")
        if kind is S.DefaultsSource:
            if source.is_kw:
                return base.child("kwdefaults").child("item", source.idx_key)
            return base.child("defaults").child("index", source.idx_key)
        if kind in (S.WeakRefCallSource, S.CallFunctionNoArgsSource):
            return base.child("call")
        raise self._unsupported(source, "a source")

    def _global(self, name: str) -> ObjPath | None:
        if name in self.import_sources:  # a module an inlined function uses, as Dynamo imports it
            return ObjPath(("ref", f"{self.import_sources[name]}:"))
        if name not in self.installed:
            return ObjPath(("global", self.module, name))
        if name.startswith("___unnamed_scope_"):
            return self._exec_globals(self.installed[name])
        value = self.installed[name]
        if isinstance(value, dict) and value is vars(sys.modules["builtins"]):
            return ObjPath(("ref", "builtins:")).child("dict")
        if name.startswith("__builtins_dict__"):  # Dynamo's copy of the builtins it uses
            return ObjPath(("ref", "builtins:")).child("dict")
        ident = identity(value)
        if ident is None or "ref" not in ident:
            raise CaptureError(
                f"{self.where}: the trace depends on {values.describe(value)}, an object held by no "
                "module global or import path aot_build can find again on the user's machine.\n  "
                "hold it in a module global of your package and read it from there"
            )
        return ObjPath(("ref", ident["ref"]))

    def _exec_globals(self, scope: Any) -> ObjPath | None:
        """The globals of code made by ``exec`` (a NamedTuple's generated ``__new__``, an FX
        GraphModule's ``forward``, a function a library generates), which no import path
        finds: through the ``__globals__`` of a function that has them, held by a global of the
        entry's module, a class there or the class of an object there; else None."""
        for name, value in vars(sys.modules[self.module]).items():
            at = ObjPath(("global", self.module, name))
            if isinstance(value, types.FunctionType):
                if value.__globals__ is scope:
                    return at.child("getattr", "__globals__")
                continue
            owner, at = (value, at) if isinstance(value, type) else (type(value), at.child("type"))
            for attr, member in vars(owner).items():
                fn = getattr(member, "__func__", member)
                if isinstance(fn, types.FunctionType) and fn.__globals__ is scope:
                    return at.child("getattr", attr).child("getattr", "__globals__")
        return None

    def _exec_global(self, scope: Any, key: Any) -> ObjPath | None:
        """The path of ``scope[key]``, a read in the globals of code made by ``exec``: None
        (unchecked, as what generated code calls: ``tuple.__new__`` in a NamedTuple's
        ``__new__``) for a builtin, a class, a module or a function found by import path;
        through :meth:`_exec_globals` otherwise, refused where that finds no path."""
        value = scope.get(key) if isinstance(scope, dict) else None
        called = (types.ModuleType, type, types.BuiltinFunctionType, types.WrapperDescriptorType)
        if isinstance(value, called):
            return None
        if (identity(value) or {}).get("ref") is not None:
            return None
        at = self._exec_globals(scope)
        if at is None:
            raise CaptureError(
                f"{self.where}: the trace reads {key!r} from the globals of code made by exec(), which "
                "no import path finds again on the user's machine.\n  define that function in a module "
                "of your package, or hold it in a global of the entry's module"
            )
        return at.child("item", key)

    def _key(self, index: Any) -> Any:
        from torch._dynamo.source import Source

        if isinstance(index, Source):  # a key given by position: the key it is now
            path = self.path(index)
            if path is None:
                raise self._unsupported(index, "a key read from an argument")
            index = self.value(path)
        try:
            values.encode(index)
        except values.Unencodable:
            raise CaptureError(
                f"{self.where}: the trace reads an item keyed by {values.describe(index)}, a key the "
                "manifest cannot carry (a weak reference, an object: a WeakKeyDictionary's).\n  key "
                "the mapping by a plain value (a name, a number), or pass the value as an argument"
            ) from None
        return index

    def _unsupported(self, source: Any, what: str) -> CaptureError:
        return CaptureError(
            f"{self.where}: the trace reads {source.name} ({type(source).__name__}), {what} aot_build "
            "cannot check on the user's machine.\n  read that value outside the entry and pass it as "
            "an argument, or report this to aot_build"
        )

    def value(self, path: ObjPath) -> Any:
        try:
            return resolve(path, self.self_obj, self.fn)
        except PathError as exc:
            raise CaptureError(
                f"{self.where}: cannot follow {path.label()} again after tracing ({exc}); report this "
                "to aot_build"
            ) from exc

    # ------------------------------------------------------------------ guards

    def translate(self, guards: list[Any], traced_code: list[types.CodeType], recorded: _Recorded) -> None:
        """Add a trace's guards, and the reads its recorders saw, to the tree and the weights."""
        from torch._guards import Guard

        self._hooks_read = False
        # sets of classes the trace only asked ``cls in S``: their membership is checked, per class
        self._tested_sets = {source for source, _ in recorded.set_members} - recorded.sets_used
        for guard in sorted(guards, key=Guard.sort_key):
            self._each(self._dynamo_guard, guard)
        for (source, cls), present in recorded.set_members.items():
            if source in self._tested_sets:
                self._each(self._set_member, source, cls, present)
        if self._hooks_read:
            self._global_hooks()
        for source, name in recorded.fallbacks:
            self._each(self._getattr_fallback, source, name)
        for read in recorded.state_reads:
            self._each(self._state_read, read)
        for dispatch in recorded.dispatches:
            self._each(self._single_dispatch, dispatch)
        for device, dtype in recorded.autocast_dtypes.items():
            self._equals(ObjPath(("ref", "torch:get_autocast_dtype")).child("call", (device,)), dtype)
        for call in recorded.logger_calls:
            self._each(self._root_logger_call if call.function else self._logger_call, call)
        for (source, name), value in recorded.logger_attributes.items():
            self._each(self._logger_attribute, source, name, value)
        for cls, source in recorded.module_classes.items():
            self._each(self._module_call, cls, source)
        for source, name, defined in recorded.class_lookups:
            self._each(self._class_lookup, source, name, defined)
        for module, name in recorded.builtins:
            self.builder.add(ObjPath(("ref", f"{module}:")).child("dict"), Check("lacks", name))
        for name, value in recorded.builtin_constants.items():
            self._equals(ObjPath(("ref", "builtins:")).child("dict").child("item", name), value)
        for test, source, cls in recorded.class_tests:
            self._each(self._class_test, test, source, cls)
        for source in recorded.requires_grad:
            self._each(self._requires_grad, source)
        for source in recorded.key_order:
            self._each(self._set_order, source)
        for source in recorded.dir_calls:
            self._each(self._dir_call, source)
        for source in recorded.class_subscripts:
            self._each(self._class_subscript, source)
        for source, name in recorded.new_objects:
            self._each(self._new_object_read, source, name)
        for source in recorded.class_methods:
            self._each(self._class_method, source)
        for source in recorded.class_calls:
            self._each(self._class_call, source)
        for source, name in recorded.metaclass_reads:
            self._each(self._metaclass_read, source, name)
        for cls in recorded.metaclass_calls:
            self._each(self._metaclass_call, cls)
        for source, name in recorded.metaclass_protocols:
            self._each(self._metaclass_protocol, source, name)
        if recorded.numpy_arithmetic:
            self._each(self._numpy_error_state)
        for source, value, member in recorded.enum_calls:
            self._each(self._enum_call, source, value, member)
        for fn in recorded.torch_functions:
            self._each(self._torch_function, fn, 2)
        for source, loaded in recorded.imports:
            self._each(self._import, source, loaded)
        for cached_call in recorded.cached_calls:  # last: a change to what it reads is named first
            self._each(self._cached_call, cached_call)
        self._traced_code.extend(traced_code)
        self._answered.extend(r.fn for r in recorded.state_reads)

    def _each(self, translate: Callable[..., None], *read: Any) -> None:
        """Translate one read; in a trace of Python branches, one that cannot be carried is
        listed in ``uncarried`` (not checked: the artifact does not run that branch)."""
        if self.uncarried is None:
            translate(*read)
            return
        try:
            translate(*read)
        except CaptureError as exc:
            self.uncarried.append(str(exc).split(": ", 1)[-1].split("\n", 1)[0])

    def _dynamo_guard(self, guard: Any) -> None:
        from torch._dynamo.source import is_from_skip_guard_source

        kind = guard.create_fn_name()
        source = guard.originating_source
        if kind in _AMBIENT:
            return  # the shim checks global state itself
        if kind == "DUPLICATE_INPUT" and is_from_skip_guard_source(guard.create_fn.keywords["source_b"]):
            return
        if kind == "TENSOR_MATCH" and type(source).__name__ == "NumpyTensorSource":
            self._numpy(source.base)
            return
        if type(source).__name__ == "NonSerializableSetGetItemSource":
            self._set_element(source)
            return
        path = self.path(source)
        if path is None:
            return
        self._hooks_read |= (
            path.root == _MODULE_REF and len(path.steps) == 1 and path.steps[0][1] in _GLOBAL_HOOKS
        )
        keywords = getattr(guard.create_fn, "keywords", None) or {}
        self._guard(kind, path, keywords, guard)
        self._attribute_functions(path, kind == "HASATTR")

    def _class_lookup(self, source: Any, name: str, defined: bool) -> None:
        path = self.path(source)
        if path is not None:
            self.builder.add(path.child("type"), Check("defines", [name, defined]))
            if defined and isinstance(getattr(type(self.value(path)), name, None), types.FunctionType):
                self._class_attribute(path, name)  # the very method, which Dynamo ran

    def _set_element(self, source: Any) -> None:
        """An element of a set, which Dynamo guards by its position in this process's
        iteration order (``list(S)[i]``, no path the shim can follow): a set of classes (``type(m)
        in SKIP``) is checked whole instead, by its members; any other is refused."""
        path = self.path(source.base)
        if path is None:
            return  # a set passed as an argument
        value = self.value(path)
        if not _class_set(value):
            raise self._unsupported(source, "a source")
        if source.base not in self._tested_sets:
            self._class_members(path, value)

    def _class_subscript(self, source: Any) -> None:
        path = self.path(source) if source is not None else None
        label = path.label() if path is not None else "a class"
        raise CaptureError(
            f"{self.where}: subscripts {label}, whose __class_getitem__ (written in Python) "
            "torch.compile's tracer runs while building: what it reads is not checked on each "
            "call.\n  hold the table in a module-level dict and index that (REGISTRY[key]), or "
            "call a classmethod"
        )

    def _dir_call(self, source: Any) -> None:
        """``dir()`` of the class or module at ``source``, answered while tracing: the names in
        the class's and each base's ``__dict__`` (what ``type.__dir__`` lists), or in the
        module's, are still those; anything else ``dir`` was asked of is refused."""
        path = self.path(source)
        if path is None:
            return
        obj = self.value(path)
        if isinstance(obj, type) and type(obj).__dir__ is type.__dir__:
            for i, k in enumerate(obj.__mro__):
                if k.__module__ != "builtins":
                    keys = self._encode(dict_keys(vars(k)), path)
                    self.builder.add(_base_path(path, i).child("dict"), Check("keys", keys))
        elif isinstance(obj, types.ModuleType) and "__dir__" not in vars(obj):
            self.builder.add(path.child("dict"), Check("keys", self._encode(dict_keys(vars(obj)), path)))
        else:
            raise CaptureError(
                f"{self.where}: calls dir({path.label()}), which torch.compile's tracer answers while "
                "building; aot_build checks the names of a class or a plain module only.\n  list "
                "the names the function needs in a module-level tuple"
            )

    def _set_member(self, source: Any, cls: type, present: bool) -> None:
        """``cls in S`` answered ``present`` for a set of classes the trace only tested: S
        still (or still not) holds that class (another class added to S changes nothing)."""
        path = self.path(source)
        if path is None:
            return  # a set passed as an argument
        self.builder.add(path, Check("type", self._class_ref(type(self.value(path)), path)))
        self.builder.add(path, Check("has" if present else "lacks", self._encode(cls, path)))

    def _class_members(self, path: ObjPath, value: Any) -> None:
        """The set of classes at ``path`` holds exactly these classes (in any order): adding or
        removing one after import fails the check."""
        self.builder.add(path, Check("type", self._class_ref(type(value), path)))
        self._equals(path, value)

    def _set_order(self, source: Any) -> None:
        path = self.path(source)
        if path is not None:
            value = self.value(path)
            if _class_set(value):
                raise CaptureError(
                    f"{self.where}: the compiled code relies on the order in which the set "
                    f"{path.label()} iterates; it holds classes, which hash by their address, so "
                    "each process iterates it in another order.\n  hold the classes in a tuple or "
                    "a list (a set of classes is fine for membership tests: cls in S)"
                )
            if isinstance(value, (set, frozenset)):  # a dict's keys are guarded in order already
                self.builder.add(path, Check("keys", self._encode(dict_keys(value), path)))

    def _requires_grad(self, source: Any) -> None:
        path = self.path(source)
        if path is not None:
            self._equals(path.child("getattr", "requires_grad"), self.value(path).requires_grad)

    def _class_test(self, test: str, source: Any, cls: type) -> None:
        path = self.path(source)
        if path is not None:
            obj = self.value(path)
            answer = isinstance(obj, cls) if test == "isinstance" else issubclass(obj, cls)
            self.builder.add(path, Check(test, [self._class_ref(cls, path), answer]))

    def captured(self) -> Captured:
        """What the traces read: the tree so far, and the weights with their paths."""
        weights = []
        for paths, tensor in self._weights.values():
            # the first path is the one the export lifts the weight at and the shim reads it by
            # on each call: one that ends in a plain attribute or item, not in a call (an
            # LSTM reads its weights through weak references, _flat_weight_refs[i]())
            paths.sort(key=lambda p: (bool(p.steps) and p.steps[-1][0] == "call", len(p.steps)))
            if paths[0].steps and paths[0].steps[-1][0] == "call":
                raise CaptureError(
                    f"{self.where}: reads the tensor {paths[0].label()} only through a call; aot_build "
                    "passes every tensor the function reads as an argument, found again by its path.\n"
                    "  hold the tensor in a module attribute, a global or a closure variable"
                )
            weights.append((paths, tensor))
        return Captured(self.builder, weights, self._traced_code, tuple(self._answered))

    def _guard(self, kind: str, path: ObjPath, keywords: dict[str, Any], guard: Any) -> None:
        add = self.builder.add
        if kind == "TENSOR_MATCH":
            self._weight(path)
        elif kind == "TYPE_MATCH":
            if not _class_namespace(path, self.value(path)):
                add(path, Check("type", self._type_of(self.value(path), path)))
        elif kind in _IDENTITY or kind == "CLOSURE_MATCH":
            self._identity(path, self.value(path))
        elif kind in _VALUE:
            value = self.value(path)
            if isinstance(value, types.CodeType):  # code objects count as constants to Dynamo
                self._identity(path, value)
            else:
                self._equals(path, value)
        elif kind in ("DICT_KEYS_MATCH", "MAPPING_KEYS_CHECK", "SEQUENCE_LENGTH"):
            value = self.value(path)
            if isinstance(value, (set, frozenset)) and not _constant_set(value):
                # a set of other objects: Dynamo guards each element too, by a source
                # (list(S)[i], in this process's order): a set of classes is checked whole
                # (see _set_element), any other is refused or left unchecked there
                if _class_set(value) and guard.originating_source not in self._tested_sets:
                    self._class_members(path, value)
                return
            if not _class_namespace(path, value):
                add(path, Check("type", self._type_of(value, path)))
            # a non-empty dict's (or constant set's) length is guarded where Dynamo unpacked its
            # keys (list(d), [*d], tuple(S)): its keys, in order, are what the trace relied on
            if kind == "SEQUENCE_LENGTH" and not (isinstance(value, (dict, set, frozenset)) and value):
                add(path, Check("len", len(value)))
                return
            add(path, Check("keys", self._encode(dict_keys(value), path)))
        elif kind in ("DICT_CONTAINS", "SET_CONTAINS", "DICT_NOT_CONTAINS", "SET_NOT_CONTAINS"):
            key = keywords.get("key")
            present = key in self.value(path)
            add(path, Check("has" if present else "lacks", self._encode(key, path)))
        elif kind == "NOT_PRESENT_IN_GENERIC_DICT":
            attr = keywords["attr"]
            add(path.child("dict"), Check("lacks", attr))
            self._class_attribute(path, attr)
        elif kind == "EMPTY_NN_MODULE_HOOKS_DICT":
            add(path, Check("len", 0))
        elif kind == "HASATTR":
            attr = keywords["attr"]
            add(path, Check("hasattr", [attr, hasattr(self.value(path), attr)]))
        elif kind in ("NOT_NONE_MATCH", "WEAKREF_ALIVE"):
            add(path, Check("notnone"))
        elif kind == "DUPLICATE_INPUT":
            other = self.path(keywords["source_b"])
            if other is None:
                return
            if isinstance(self.value(path), torch.Tensor):  # a weight read through two paths
                self._weight(path)
                self._weight(other)
            else:
                add(other, Check("same", self.builder.node(path)))
        else:
            raise CaptureError(
                f"{self.where}: the trace relies on {guard.name or 'state'} through a {kind} guard, "
                "which aot_build cannot check on the user's machine yet.\n  read that value outside "
                "the entry and pass it as an argument, or report this to aot_build"
            )

    def _type_of(self, value: Any, path: ObjPath) -> str | dict[str, Any]:
        """What a ``type`` check of the object at ``path`` expects: its class's import path, or
        how to recognise a class torch made for that very object (:func:`checks.made_class`)."""
        made = made_class(type(value)) if identity(type(value)) is None and path.root != ("self",) else None
        return {"made": made} if made is not None else self._class_ref(type(value), path)

    def _class_ref(self, cls: type, path: ObjPath) -> str:
        ident = identity(cls)
        if ident is None or "ref" not in ident:
            raise CaptureError(
                f"{self.where}: {path.label()} is an instance of {cls.__qualname__}, a class defined "
                "inside a function (or not found again under its name); the shim must check that class "
                "on every call.\n  define the class at module level"
            )
        return str(ident["ref"])

    def _encode(self, value: Any, path: ObjPath) -> Any:
        try:
            return values.encode(value, sets=True)
        except values.Unencodable as exc:
            raise CaptureError(
                f"{self.where}: the compiled code relies on {path.label()} being {values.describe(value)}, "
                f"a {type(value).__name__} the manifest cannot hold ({exc}).\n  pass that value as "
                "an argument, or make it a plain value (int, float, bool, str, None, tuples of them)"
            ) from exc

    def _equals(self, path: ObjPath, value: Any) -> None:
        self.builder.add(path, Check("eq", self._encode(value, path)))

    def _identity(self, path: ObjPath, value: Any) -> None:
        """``value`` must be this very object on each call."""
        if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
            self._equals(path, value)
            return
        ident = identity(value) or self._ref_by_path(path, value)
        if ident is not None:
            if "code" in ident:  # bound before any call: from the class where a method entry reads it
                path = self._class_rooted(path) or path
            self.builder.add(path, Check("id", ident))
            return
        if isinstance(value, types.FunctionType):  # a lambda or a closure: known by its code
            code = path.child("code")
            at = self._class_rooted(code) or code
            if at.root == ("self",):
                raise CaptureError(
                    f"{self.where}: the trace calls {path.label()}, a lambda or local function the "
                    "instance holds; the shim knows such a function by its code, found at its path "
                    "before any call, where a method entry has no instance yet.\n  make it a function "
                    "of the module (or a method of the class), or make the entry a module-level "
                    "function that calls a global instance"
                )
            self.builder.add(at, Check("id", identity(value.__code__)))
            return
        if isinstance(value, types.MethodType):
            self._identity(path.child("getattr", "__func__"), value.__func__)
            self._identity(path.child("getattr", "__self__"), value.__self__)
            return
        if type(value) in _autocast_classes():
            self._autocast(path, value)
            return
        if isinstance(value, re.Pattern):  # a compiled pattern: what it matches is its text and flags
            self.builder.add(path, Check("type", self._class_ref(re.Pattern, path)))
            self._equals(path.child("getattr", "pattern"), value.pattern)
            self._equals(path.child("getattr", "flags"), value.flags)
            return
        try:
            self._equals(path, value)
        except CaptureError:
            fix = (
                "make it a plain value (a number, a string, a tuple of them) or an object of a "
                "class defined at module level"
                if path.root[0] == "global"
                else "hold it in a module global of your package"
            )
            raise CaptureError(
                f"{self.where}: the compiled code relies on {path.label()} being one particular "
                f"{type(value).__qualname__} object ({values.describe(value)}), which aot_build cannot "
                f"find again on the user's machine.\n  {fix}, or pass what the function needs from "
                "it as an argument"
            ) from None

    def _autocast(self, path: ObjPath, value: Any) -> None:
        """An autocast object (``@torch.autocast(...)`` over the function: the wrapper's closure
        holds it), which Dynamo guards by identity and enters with the device, dtype and flags
        it has (not by running its ``__enter__``): the shim checks its class and those four
        values, and that the class (and its base) still enter and exit as traced."""
        cls = type(value)
        self.builder.add(path, Check("type", self._class_ref(cls, path)))
        for attr in _AUTOCAST_STATE:
            self._equals(path.child("getattr", attr), getattr(value, attr))
        for k in cls.__mro__[:-1]:  # the class and torch.amp's autocast (object's own are fixed)
            for name in ("__enter__", "__exit__"):
                if name in vars(k):
                    self._identity(
                        ObjPath(("ref", self._class_ref(k, path))).child("getattr", name), vars(k)[name]
                    )

    def _class_rooted(self, path: ObjPath) -> ObjPath | None:
        """``path`` from ``self`` through its last ``type`` step (``type(self.block).forward
        .__closure__[0].cell_contents.__code__``: a decorated method's code) as the same path from
        that class, found by its import path. A function known by its code is bound, in the
        shim, to the code found at its path before any call, so without a ``self``; the class is
        checked by its own type guard. None when the path has no such step or the class no
        import path."""
        if path.root != ("self",):
            return None
        types_at = [i for i, (kind, _) in enumerate(path.steps) if kind == "type"]
        if not types_at:
            return None
        cls = self.value(ObjPath(path.root, path.steps[: types_at[-1] + 1]))
        ident = identity(cls)
        if ident is None or "ref" not in ident:
            return None
        return ObjPath(("ref", ident["ref"]), path.steps[types_at[-1] + 1 :])

    def _ref_by_path(self, path: ObjPath, value: Any) -> dict[str, Any] | None:
        """``{"ref": ...}`` for an object read as attributes of a module (``torch.clamp``, a
        builtin whose own name does not lead back to it), when that import path finds it."""
        names: list[str] = []
        for i in range(len(path.steps), -1, -1):
            head = ObjPath(path.root, path.steps[:i])
            found = self.value(head)
            if isinstance(found, types.ModuleType):
                ref = f"{found.__name__}:{'.'.join(reversed(names))}"
                try:
                    return {"ref": ref} if names and import_ref(ref) is value else None
                except LookupError:
                    return None
            if i == 0 or path.steps[i - 1][0] != "getattr":
                return None
            names.append(str(path.steps[i - 1][1]))
        return None

    def _class_attribute(self, path: ObjPath, attr: str) -> None:
        """Dynamo found ``attr`` on the class of the object at ``path`` and guards only that the
        instance does not shadow it: check that the class still gives the same thing."""
        if (path, attr) in self._class_attrs:
            return
        self._class_attrs.add((path, attr))
        cls = type(self.value(path))
        if any(attr in vars(k) for k in cls.__mro__):
            self._on_class(path.child("type"), cls, attr)

    def _new_object_read(self, source: Any, attr: str) -> None:
        """``attr`` looked up on an object the function created (or one without an instance
        dict), of the class at ``source``: what the class gives for it (its own or a base's,
        not the interpreter's) is checked, and a function's defaults."""
        path = self.path(source)
        if path is None or (path, attr) in self._class_attrs:
            return
        self._class_attrs.add((path, attr))
        cls = self.value(path)
        if not isinstance(cls, type):
            return
        owner = next((k for k in cls.__mro__ if attr in vars(k)), None)
        if owner is None:  # the instance's own (set by __init__), or a __getattr__'s answer
            self.builder.add(path, Check("defines", [attr, False]))
            if isinstance(getattr(cls, "__getattr__", None), types.FunctionType):
                self._on_class(path, cls, "__getattr__")
            return
        if owner.__module__ == "builtins":
            return
        if isinstance(vars(owner)[attr], (types.GetSetDescriptorType, types.MemberDescriptorType)):
            return  # the instance's own storage (__dict__, a slot), not something the class gives
        self._on_class(path, cls, attr)
        value = vars(owner)[attr]
        if isinstance(value, types.FunctionType):  # its defaults, which the trace took as they were
            found = path.child("getattr", attr)
            self._closure_functions(found, value)
            for step, defaults in (("defaults", value.__defaults__), ("kwdefaults", value.__kwdefaults__)):
                if defaults is None:
                    continue
                if values.is_plain(defaults):
                    self._equals(found.child(step), defaults)
                    continue
                # some are objects (a dataclass field's default_factory marker): the plain ones
                # are checked one by one, the others by identity where a path finds them again
                kind, pairs = (
                    ("index", enumerate(defaults))
                    if isinstance(defaults, tuple)
                    else ("item", defaults.items())
                )
                for key, default in pairs:
                    at = found.child(step).child(kind, key)
                    if values.is_plain(default):
                        self._equals(at, default)
                        continue
                    with contextlib.suppress(CaptureError):
                        self._identity(at, default)

    def _closure_functions(self, path: ObjPath, fn: types.FunctionType) -> None:
        """The functions ``fn`` (at ``path``, found on the class of an object the function
        created) holds in its closure, which the trace ran unguarded (the method has no source):
        a dataclass's ``__init__`` calls each field's ``default_factory`` from there, a decorated
        method the function it wraps. Each is still that function, with the code traced."""
        for i, cell in enumerate(fn.__closure__ or ()):
            try:
                held = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if not isinstance(held, types.FunctionType):
                continue
            at = path.child("closure").child("index", i).child("getattr", "cell_contents")
            with contextlib.suppress(CaptureError):  # one no path finds again: left as it was
                self._identity(at, held)
                self.builder.add(at.child("code"), Check("id", identity(held.__code__)))

    def _class_call(self, source: Any) -> None:
        """The class at ``source``, called by the trace to create an object, still lacks the
        ``__new__`` and ``__init__`` it found on a builtin base (``object``'s): each class before
        that base in its MRO still lacks them. One the class or a base defines in Python is
        checked where the trace ran it (Dynamo guards ``__new__``, see :meth:`_new_object_read`
        for ``__init__``)."""
        path = self.path(source)
        if path is None:
            return
        cls = self.value(path)
        if not isinstance(cls, type):
            return
        mro = cls.__mro__
        for name in ("__new__", "__init__"):
            owner = next((i for i, k in enumerate(mro) if name in vars(k)), None)
            if owner is None or mro[owner].__module__ != "builtins":
                continue
            for i in range(owner):
                self.builder.add(_base_path(path, i).child("dict"), Check("lacks", name))
        # The object's operators (==, +, in, ...) Dynamo dispatches by its own protocol code,
        # which finds the class's method without a guard: each special method the class has in
        # Python is checked to be the very one (stamped by the class's version tag: no cost; not
        # for a class whose metaclass answers attributes itself, an enum's, whose reads no tag
        # fixes: creating one returns an existing member)
        if hasattr(type(cls), "__getattr__"):
            return
        specials = {n for k in mro if k.__module__ != "builtins" for n in vars(k) if n[:2] == n[-2:] == "__"}
        for name in sorted(specials - {"__new__", "__init__"}):
            found = getattr(cls, name, None)
            if isinstance(found, types.FunctionType):
                with contextlib.suppress(CaptureError):  # one no import path finds: left unchecked
                    self._identity(path.child("getattr", name), found)

    def _class_method(self, source: Any) -> None:
        """A classmethod the trace bound and ran, found in a class's ``__dict__`` at ``source``
        (Dynamo guards the classes before it in the MRO to lack the name): it is still a
        classmethod, of the very function traced."""
        path = self.path(source)
        if path is None:
            return
        descriptor = self.value(path)
        if not isinstance(descriptor, classmethod):
            return
        self.builder.add(path, Check("type", self._class_ref(classmethod, path)))
        self._identity(path.child("getattr", "__func__"), descriptor.__func__)

    def _torch_function(self, fn: types.FunctionType, depth: int) -> None:
        """The functions ``fn`` (one of torch's, run whole in the graph) reads from its module
        are still those it read; and theirs, ``depth`` levels down."""
        if fn in self._torch_functions_seen or not str(fn.__module__).startswith("torch"):
            return
        self._torch_functions_seen.add(fn)
        for path, value in _functions_read(fn):
            ident = identity(value)
            if ident is None or "ref" not in ident:
                continue
            self.builder.add(path, Check("id", ident))
            if depth > 1 and isinstance(value, types.FunctionType):
                self._torch_function(value, depth - 1)

    def _metaclass_read(self, source: Any, attr: str) -> None:
        """``attr`` read on the class at ``source``, which gets it from its metaclass: the class
        (and its bases) still lack it, and the metaclass still gives the same thing."""
        path = self.path(source)
        if path is None:
            return
        cls = self.value(path)
        self.builder.add(path, Check("defines", [attr, False]))
        self._on_class(path.child("type"), type(cls), attr)

    def _metaclass_call(self, cls: type) -> None:
        meta = type(cls)
        raise CaptureError(
            f"{self.where}: calls {cls.__qualname__}(), whose metaclass {meta.__module__}."
            f"{meta.__qualname__} defines its own __call__ (a singleton, defaults filled in); "
            "torch.compile's tracer follows type.__call__ instead, so what it read is not what "
            "the call does.\n  make the object at import and read it from a module global, or "
            "create it with a function (a factory) instead of a metaclass"
        )

    def _metaclass_protocol(self, source: Any, name: str) -> None:
        """The special method ``name`` that the trace looked up on the metaclass of the class at
        ``source`` (``len(Cls)``: ``type(Cls).__len__``): the metaclass still lacks it, or still
        gives the very function the trace ran."""
        path = self.path(source)
        if path is None:
            return
        meta = type(self.value(path))
        self.builder.add(path.child("type"), Check("defines", [name, defines(meta, name)]))
        owner = next((k for k in meta.__mro__ if name in vars(k)), None)
        if owner is not None and owner.__module__ != "builtins":
            self._on_class(path.child("type"), meta, name)

    def _numpy_error_state(self) -> None:
        """The trace ran numpy arithmetic: numpy's error state (``np.geterr()``) is still what it
        was, checked on each call (one call of ``np.geterr()``, about a microsecond, for such an
        entry only). Under another state the arithmetic might raise or warn in Python where the
        compiled code, torch's arithmetic, cannot."""
        import numpy

        geterr = self._found_by_import(
            numpy.geterr,
            "runs numpy arithmetic, whose floating-point errors numpy's error state (np.seterr) "
            "turns into exceptions or warnings; aot_build cannot find numpy.geterr to check that "
            "state on each call.\n  compute the value with torch or Python floats, or at import "
            "(a module constant)",
        )
        self._equals(geterr.child("call"), numpy.geterr())

    def _found_by_import(self, obj: Any, refusal: str) -> ObjPath:
        """The path that finds ``obj`` again by importing it (``module:qualname``); where none
        does, the build refuses with ``refusal`` (what the function does, and the fix)."""
        ident = identity(obj)
        if ident is None or "ref" not in ident:
            raise CaptureError(f"{self.where}: {refusal}")
        return ObjPath(("ref", ident["ref"]))

    def _enum_call(self, source: Any, value: Any, member: Any) -> None:
        """``Cls(value)`` answered ``member`` while tracing, from the enum class's table of
        members by value: the table (the class's own ``_value2member_map_``) still maps
        ``value`` to that member. One found otherwise (an unhashable value, ``_missing_``
        answering without filling the table) is refused."""
        path = self.path(source)
        if path is None:
            return
        cls = self.value(path)
        table = vars(cls).get("_value2member_map_")
        try:
            found = table.get(value, MISSING) if isinstance(table, dict) else MISSING
            values.encode(value)
        except (TypeError, values.Unencodable):
            found = MISSING
        if found is not member:
            raise CaptureError(
                f"{self.where}: calls {path.label()}({values.describe(value)}), which the enum "
                "answers other than from its table of members by value (an unhashable value, or "
                "its _missing_ hook); torch.compile's tracer calls it while building, and what it "
                "reads is not checked on each call.\n  use the member itself "
                f"({cls.__qualname__}.NAME), or look it up in a module-level dict"
            )
        at = path.child("dict").child("item", "_value2member_map_")
        self.builder.add(at, Check("type", self._class_ref(dict, at)))
        self._identity(at.child("item", value), member)

    def _on_class(self, found_cls: ObjPath, cls: type, attr: str) -> None:
        """Check that the class at ``found_cls`` (``cls`` now) still gives ``attr`` as it does."""
        found = found_cls.child("getattr", attr)
        value = getattr(cls, attr)
        if isinstance(value, property):
            if value.fget is not None:
                self._identity(found.child("getattr", "fget"), value.fget)
            return
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
            self._identity(found, value)
            return
        if values.is_plain(value):
            self._equals(found, value)
            return
        self.builder.add(found, Check("type", self._class_ref(type(value), found)))

    def _attribute_functions(self, path: ObjPath, looked_up: bool) -> None:
        """Each attribute read on ``path`` (and, when ``looked_up``, one on the object at
        ``path`` itself) that runs a Python ``__getattribute__``: check that its class still runs
        the very function Dynamo traced, whose own reads Dynamo guards. With it fixed, the
        shim's evaluator knows the read's result from the object's dict and class alone (a
        transformers config's attributes), instead of calling it on every call."""
        heads = [ObjPath(path.root, path.steps[:i]) for i, (s, _) in enumerate(path.steps) if s == "getattr"]
        for head in [*heads, path] if looked_up else heads:
            if head in self._attr_functions:
                continue
            self._attr_functions.add(head)
            fn = getattr(type(self.value(head)), "__getattribute__", None)
            if isinstance(fn, types.FunctionType):
                self._identity(head.child("type").child("getattr", "__getattribute__"), fn)

    def _getattr_fallback(self, source: Any, name: str) -> None:
        """``name`` read on the object at ``source`` fell back to its class's ``__getattr__``,
        whose own reads Dynamo guards: check that it still does. The name is still missing
        from the instance dict and from the class (its whole MRO), and the class still runs
        the very ``__getattr__`` traced."""
        path = self.path(source)
        if path is None:
            return
        obj = self.value(path)
        if isinstance(obj, type):  # a class whose metaclass answers: missing from its namespaces
            for i in range(len(obj.__mro__) - 1):  # object's own namespace cannot change
                self.builder.add(_base_path(path, i).child("dict"), Check("lacks", name))
            own = None
        else:
            try:
                own = object.__getattribute__(obj, "__dict__")
            except AttributeError:
                own = None
        if isinstance(own, dict):
            self.builder.add(path.child("dict"), Check("lacks", name))
        found = path.child("type")
        self.builder.add(found, Check("hasattr", [name, False]))
        if type(obj).__getattr__ is not torch.nn.Module.__getattr__:  # torch's own: not pinned per module
            self._identity(found.child("getattr", "__getattr__"), type(obj).__getattr__)

    def _state_read(self, read: _StateRead) -> None:
        """A call into torch answered at trace time (see :func:`_state_reads_recorded`):
        check on each call that calling it again gives the same answer."""
        module = getattr(read.fn, "__module__", None) or "torch"
        name = f"{module}.{getattr(read.fn, '__qualname__', read.fn)}"
        if read.with_args:
            raise CaptureError(
                f"{self.where}: calls {name}(...), which torch.compile's tracer answers while "
                "building and builds into the compiled code; its answer depends on the state of the "
                "machine it runs on.\n  call it outside the entry and pass the result as an argument"
            )
        path = self.path(read.source) if read.source is not None else None
        if path is None:
            path = self._found_by_import(
                read.fn,
                f"calls {name}(), which torch.compile's tracer answers while building; aot_build "
                "cannot find that function again to check the answer on each call.\n  call it "
                "outside the entry and pass the result as an argument",
            )
        self._equals(path.child("call"), read.value)

    def _cached_call(self, call: _CachedCall) -> None:
        """An ``lru_cache`` helper traced through (see :func:`_cached_calls_recorded`): check on
        each call that the helper, called with the arguments traced, answers what the trace
        computed (a cache hit, once filled: O(1)); one that answers a tensor, that the tensor
        it holds is equal to what the function it wraps computes now (:mod:`.cached`)."""
        fix = (
            f"compute it at import into a module global (VALUE = {call.name.rpartition('.')[2]}(...)), "
            "or call the helper outside the entry and pass the result as an argument"
        )
        called = f"{call.name}({', '.join(map(repr, call.args or ()))})"
        path = self.path(call.source) if call.source is not None else None
        if call.answer is _NO_ANSWER:
            self._cached_tensor(call, path, called, fix)
            return
        if path is None or call.args is None or not values.is_plain(call.args):
            raise CaptureError(
                f"{self.where}: calls {call.name}, a functools.lru_cache helper, "
                + (
                    "through no global or attribute aot_build can find again"
                    if path is None
                    else "with arguments that are not plain values (or keywords)"
                )
                + ": the function run as Python uses the answer its cache holds, which the shim must "
                f"check on each call.\n  {fix}"
            )
        self._equals(path.child("call", call.args), call.answer)

    def _cached_tensor(self, call: _CachedCall, path: ObjPath | None, called: str, fix: str) -> None:
        """An ``lru_cache`` helper whose answer the trace computed in the graph: a tensor, found
        again by reference (``module:qualname``) and called with plain arguments, is checked by
        :func:`.cached.cache_is_current` on each call (its cached tensor equal to what the wrapped function
        computes now: changed in place, or computed while the state it reads was other, the
        entry runs as Python); anything else is refused."""
        helper = self.value(path) if path is not None else None
        plain = call.args is not None and values.is_plain(call.args)
        answer = helper(*call.args) if helper is not None and plain and call.args is not None else None
        ref = identity(helper) if isinstance(answer, torch.Tensor) else None
        if ref is None or "ref" not in ref or call.args is None:
            raise CaptureError(
                f"{self.where}: calls {called}, a functools.lru_cache helper whose answer is "
                + (
                    "a tensor, through no module-level name aot_build can find again, or with "
                    "arguments that are not plain values"
                    if isinstance(answer, torch.Tensor)
                    else "no plain value or tensor (an object)"
                )
                + ": the function run as Python uses the object the cache holds (changed in place, or "
                "computed while the state it reads was other), the compiled code computes it "
                f"afresh.\n  {fix}"
            )
        if not cached.cache_is_current(ref["ref"], *call.args):
            raise CaptureError(
                f"{self.where}: calls {called}, a functools.lru_cache helper whose cache already holds "
                "a tensor other than what the function it wraps computes now (changed in place, or "
                "computed while the state it reads was other).\n  clear its cache where that state "
                "changes (helper.cache_clear()), or "
                f"{fix}"
            )
        holds = ObjPath(("ref", "aot_build.guards.cached:cache_is_current")).child(
            "call", (ref["ref"], *call.args)
        )
        self._equals(holds, True)

    def _import(self, source: Any, name: str | None) -> None:
        """An ``import`` statement the trace ran (see :func:`_imports_recorded`): the module it
        returns, ``sys.modules[top]`` (``import a.b``) or ``sys.modules[full]`` (``from a.b
        import k``), is checked to be the module traced, found by import when the entry is bound;
        a dotted module ``import a.b`` loads, to be present (deleted, Python imports it again)."""
        path = self.path(source)
        if path is None or path.root[0] != "ref" or path.steps or not path.root[1].endswith(":"):
            return  # not a module alias of Dynamo's (a replayed import): its reads are checked as read
        returned = path.root[1][:-1]
        modules = ObjPath(("ref", "sys:")).child("getattr", "modules")
        self._identity(modules.child("item", returned), self.value(path))
        if name is not None and name != returned:  # import a.b: returns a, loads a.b
            self.builder.add(modules, Check("has", values.encode(name)))

    def _logger_call(self, call: _LoggerCall) -> None:
        """A logger's method answered at trace time (see :func:`_logger_calls_answered`): check
        on each call what ``isEnabledFor`` answers from (the logger's ``disabled``, the
        manager's ``disable``, its effective level, the methods) and, last, its answer for the
        level (what its ``_cache`` holds); a logging call at a level that is on is refused."""
        logger = call.logger
        level = logging.getLevelName(call.level)
        if call.method not in _LOG_QUERIES and call.enabled:
            raise self._logging_on(f"logs through logger {logger.name!r} at level {level}")
        path = self.path(call.source) if call.source is not None else None
        if path is None:
            raise CaptureError(
                f"{self.where}: asks logger {logger.name!r} whether level {level} is on, through "
                "no global or attribute aot_build can find again to check the answer on each "
                "call.\n  hold the logger in a module global (logging.getLogger(__name__))"
            )
        self._logger_state(path, call)

    def _single_dispatch(self, dispatch: _Dispatch) -> None:
        """A ``functools.singledispatch`` function's call answered while tracing (see
        :func:`_single_dispatches_answered`): the registry holds the same classes, in order
        (a class registered after import may answer instead), and the function that answered
        is still registered for its class, with the same defaults. Refused where the answer
        depends on more: abstract base classes registered (their own registrations), a tensor
        argument where a tensor subclass is registered (a Parameter passes as a tensor), a
        function with a closure (its cells' contents)."""
        impl = dispatch.impl
        path = self.path(dispatch.source)
        label = path.label() if path is not None else dispatch.source.name()
        what = f"{self.where}: calls the functools.singledispatch function {label}"
        abstract = ", ".join(k.__qualname__ for k in dispatch.classes if isinstance(k, abc.ABCMeta))
        subclasses = [k for k in dispatch.classes if issubclass(k, torch.Tensor) and k is not torch.Tensor]
        if abstract:
            raise CaptureError(
                f"{what}, whose registry holds abstract base classes ({abstract}): which function "
                "answers also depends on what they register "
                "(Base.register(cls)), which aot_build does not check.\n  register the concrete "
                "classes the function is called with"
            )
        if dispatch.tensor and subclasses:
            raise CaptureError(
                f"{what} on a tensor argument, and its registry holds a subclass of torch.Tensor "
                f"({', '.join(k.__qualname__ for k in subclasses)}): an argument of that class, which "
                "a compiled call takes as a tensor, would dispatch otherwise.\n  dispatch outside "
                "the entry, or register torch.Tensor only"
            )
        if impl.__closure__:
            raise CaptureError(
                f"{what}, whose function for {dispatch.cls.__qualname__} ({impl.__qualname__}) is a "
                "closure: what it reads from its cells would go unchecked.\n  register a "
                "module-level function"
            )
        if path is None:
            raise CaptureError(
                f"{what}, through no global or attribute aot_build can find again to check its "
                "registry on each call.\n  call it through a module global"
            )
        registry = path.child("getattr", "registry")
        self.builder.add(registry, Check("keys", self._encode(list(dispatch.classes), registry)))
        found = registry.child("index", dispatch.key)
        self._identity(found, impl)
        self._equals(found.child("defaults"), impl.__defaults__)
        self._equals(found.child("kwdefaults"), impl.__kwdefaults__)

    def _logger_attribute(self, source: Any, name: str, value: Any) -> None:
        """A logger's own attribute read while tracing (``LOG.level``, see
        :func:`_logger_attributes_answered`): checked by value."""
        path = self.path(source) if source is not None else None
        if path is None:
            raise CaptureError(
                f"{self.where}: reads a logger's {name}, through no global or attribute aot_build can "
                "find again to check it on each call.\n  hold the logger in a module global "
                "(logging.getLogger(__name__))"
            )
        self._equals(path.child("getattr", name), value)

    def _logger_state(self, path: ObjPath, call: _LoggerCall) -> None:
        """What the logger at ``path`` answers whether ``call``'s level is on from: its
        ``disabled``, the manager's ``disable``, its effective level, the methods, and, last,
        its answer for the level (what its ``_cache`` holds)."""
        logger = call.logger
        for name in ("isEnabledFor", call.method, "getEffectiveLevel"):  # each checked once
            self._class_attribute(path, name)
        self._equals(path.child("getattr", "disabled"), logger.disabled)
        self._equals(path.child("getattr", "manager").child("getattr", "disable"), logger.manager.disable)
        # the first level set up the hierarchy, which a logger made later may join
        self._equals(path.child("getattr", "getEffectiveLevel").child("call"), logger.getEffectiveLevel())
        if call.method != "getEffectiveLevel":
            # and the answer itself: isEnabledFor answers from the logger's private ``_cache`` first,
            # which code may write (``LOG._cache[logging.DEBUG] = True``): a dict read, once cached
            self._equals(path.child("getattr", "isEnabledFor").child("call", (call.level,)), call.enabled)

    def _logging_on(self, what: str) -> CaptureError:
        """The refusal of a logging call (``what`` it does) at a level that is on."""
        return CaptureError(
            f"{self.where}: {what}, which is on: the function run as Python logs on every call, a "
            "compiled call cannot.\n  log outside the entry, or at a level that is off while the "
            "package is built (such a call is compiled out, and the entry runs as Python while its "
            "level is on)"
        )

    def _root_logger_call(self, call: _LoggerCall) -> None:
        """``logging.debug(...)`` compiled out (see :func:`_root_logger_calls_answered`): the
        function is still the logging module's, the root logger (``logging.root``) is checked
        as :meth:`_logger_call` checks a logger, and it still has a handler (the function
        configures logging, ``logging.basicConfig()``, when the root logger has none); a call
        at a level that is on is refused."""
        level = logging.getLevelName(call.level)
        if call.enabled:
            raise self._logging_on(
                f"calls logging.{call.method}(...), which logs through the root logger at level {level}"
            )
        if not call.logger.handlers:
            raise CaptureError(
                f"{self.where}: calls logging.{call.method}(...) while the root logger has no handler: "
                "run as Python, the call configures logging (logging.basicConfig()), a compiled call "
                "cannot.\n  configure logging before the build traces the entry, or log through a "
                "logger of the module's own (LOG = logging.getLogger(__name__); LOG.debug(...))"
            )
        function = self.path(call.source) if call.source is not None else None
        if function is None:
            function = ObjPath(("global", "logging", call.method))
        self._identity(function, getattr(logging, call.method))
        root = ObjPath(("global", "logging", "root"))
        self.builder.add(root.child("getattr", "handlers").child("index", 0), Check("notnone"))
        self._logger_state(root, call)

    def _module_call(self, cls: type, source: Any) -> None:
        """Modules of class ``cls`` are called by the trace: their class still runs the very
        ``__call__`` and ``_call_impl`` traced (torch's own, which call ``forward``), and the
        ``__getattr__`` that finds their parameters and submodules (Dynamo reads those tables
        itself)."""
        path = self.path(source) if source is not None else None
        ident = identity(cls)
        if ident is not None and "ref" in ident:
            found = ObjPath(("ref", ident["ref"]))
        elif path is not None and path.root != ("self",) and made_class(cls) is not None:
            found = path.child("type")  # a class torch made for this module (parametrize)
        elif path is not None:
            found = ObjPath(("ref", self._class_ref(cls, path)))  # refused: no import path finds it
        else:
            return  # a module passed as an argument, of a class no import path finds
        names = ["__call__", "_call_impl", "__getattr__"]
        if source is None:  # created by the function: Dynamo inlines its forward unchecked
            names.append("forward")
        for name in names:
            self._identity(found.child("getattr", name), getattr(cls, name))

    def _global_hooks(self) -> None:
        module = sys.modules["torch.nn.modules.module"]
        for name in _GLOBAL_HOOKS:
            table = getattr(module, name)
            if len(table):
                raise CaptureError(
                    f"{self.where}: a global nn.Module hook is registered while building "
                    f"(torch.nn.modules.module.{name} has {len(table)}); compiled code would run it "
                    "on every call, or never.\n  remove global module hooks before building"
                )
            self.builder.add(ObjPath(_MODULE_REF).child("getattr", name), Check("len", 0))

    def _weight(self, path: ObjPath) -> None:
        tensor = self.value(path)
        if not isinstance(tensor, torch.Tensor):
            raise self._unsupported_tensor(path, tensor)
        if type(tensor) is not torch.Tensor and not isinstance(tensor, torch.nn.Parameter):
            raise self._unsupported_tensor(path, tensor)
        found = self._weights.get(id(tensor))
        if found is None:
            self._weights[id(tensor)] = ([path], tensor)
        elif path not in found[0]:
            found[0].append(path)

    def _unsupported_tensor(self, path: ObjPath, value: Any) -> CaptureError:
        return CaptureError(
            f"{self.where}: reads {path.label()}, a {type(value).__qualname__}; weights must be plain "
            "torch.Tensor or nn.Parameter objects.\n  hold a plain tensor there (tensor.as_subclass("
            "torch.Tensor)), or pass it as an argument"
        )

    def _numpy(self, base_source: Any) -> None:
        path = self.path(base_source)
        if path is None:
            return
        value = self.value(path)
        import numpy

        if isinstance(value, numpy.ndarray):
            raise CaptureError(
                f"{self.where}: reads the numpy array {path.label()} {tuple(value.shape)} {value.dtype} "
                "and turns it into a tensor inside the function; the compiled code would keep its "
                "build-time contents, and later changes to the array would be ignored.\n  hold it as a "
                f"torch tensor in a module global (e.g. X = torch.from_numpy(array) at import: it shares "
                "the array's memory and is passed to the compiled code on every call), or pass it as "
                "an argument"
            )
        self._equals(path, value)  # a numpy scalar: immutable, compared by value
