"""Guards, in process, with no compiling: what the build's capture records of every kind of
state (tests/packages/guard_pkg), how the shim's evaluators (Python and C) check it, and what
the build refuses. Each kind is changed after "import": the check must fail and name it."""

from __future__ import annotations

import builtins
import contextlib
import copy
import copyreg
import functools
import importlib
import json
import logging
import os
import random
import re
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import SAMPLE_PROJECTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import json_values

from aot_build import values
from aot_build.compile.specs import tensor_spec
from aot_build.guards import native
from aot_build.guards.bound import READ_FAILED, STEP_OPS, BindError, BoundState, Program
from aot_build.guards.capture import CaptureError, capture
from aot_build.guards.checks import KINDS, Check, code_fingerprint
from aot_build.guards.paths import ObjPath, PathError, assign, resolve
from aot_build.guards.tree import StateTree, TensorSpec
from aot_build.guards.weights import Held, WeightCache
from aot_build.values import encode

ROOT = SAMPLE_PROJECTS / "guard_pkg"
X = torch.randn(3, 4)


@pytest.fixture
def pkg() -> Iterator[types.ModuleType]:
    """A fresh import of guard_pkg.state (so changes never leak between tests)."""

    def forget() -> None:
        for name in [m for m in sys.modules if m == "guard_pkg" or m.startswith("guard_pkg.")]:
            del sys.modules[name]

    forget()
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module("guard_pkg.state")
    finally:
        sys.path.remove(str(ROOT))
        os.environ.pop("GUARD_PKG_SHIFT", None)
        forget()


@pytest.fixture(scope="session")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The C evaluator, compiled as the build compiles it."""
    return native.load(native.build(tmp_path_factory.mktemp("evaluator")))


def tree_of(fn: Callable[..., Any], self_obj: Any = None) -> StateTree:
    """The state tree the build would ship for ``fn`` (guards and weights)."""
    captured = capture(fn, self_obj, (X,), fn.__name__)
    builder = captured.builder
    builder.weights = [tensor_spec(t) for _, t in captured.weights]
    for i, (paths, _) in enumerate(captured.weights):
        for path in paths:
            builder.add(path, Check("weight", i))
    return builder.tree()


def same_programs(a: Program, b: Program) -> bool:
    """Whether two bound programs are the same instructions on the same objects (a decoded
    value, made afresh by each binding, by equality of value and type)."""

    def same_obj(x: Any, y: Any) -> bool:
        if isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
            return all(same_obj(p, q) for p, q in zip(x, y, strict=True))
        return x is y or values.same(x, y)

    return len(a) == len(b) and all(
        p == q
        and op == oq
        and same_obj(k, kq)
        and len(c) == len(cq)
        and all(same_obj(x, y) for x, y in zip(c, cq, strict=True))
        for (p, op, k, c), (q, oq, kq, cq) in zip(a, b, strict=True)
    )


class Checker:
    """One function's tree bound twice, checked by both evaluators, which must agree. The C
    one is bound as the shim binds it: by the C ``bind``, from the tree's record JSON."""

    def __init__(self, fn: Callable[..., Any], native_module: Any, self_obj: Any = None) -> None:
        self.tree = tree_of(fn, self_obj)
        self.self_obj = self_obj
        self.python = BoundState(self.tree, fn, None)
        record = StateTree.from_json(json.loads(json.dumps(self.tree.to_json())))
        self.native = BoundState(record, fn, native_module)
        assert same_programs(self.native.program, self.python.program)
        assert self.native.weight_nodes == self.python.weight_nodes
        self.weights = tuple(self.python.gather(self_obj))

    def __call__(self) -> int:
        code = self.python.check(self.self_obj, self.weights)
        assert self.native.check(self.self_obj, self.weights) == code
        assert self.native.check(self.self_obj, self.weights) == code  # again: the fast path agrees
        return code

    def explain(self, code: int) -> str:
        return self.python.explain(code, self.self_obj)

    def stats(self) -> dict[str, Any]:
        return self.native._native.stats()  # type: ignore[union-attr]


def _no_attribute(self: Any, key: str) -> Any:
    raise AttributeError(key)


def _forwarding(f: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a: f(*a)


def _setitem(d: Any, k: Any, v: Any) -> Callable[[Any], None]:
    return lambda m: d(m).__setitem__(k, v)


class _Patched:
    """``owner.name = value`` until :meth:`remove` (for changes to torch's own classes)."""

    def __init__(self, owner: Any, name: str, value: Any) -> None:
        self.owner, self.name, self.old = owner, name, vars(owner)[name]
        setattr(owner, name, value)

    def remove(self) -> None:
        setattr(self.owner, self.name, self.old)


class _AutocastDtype:
    """``torch.set_autocast_dtype(device, dtype)`` until :meth:`remove`."""

    def __init__(self, device: str, dtype: torch.dtype) -> None:
        self.device, self.old = device, torch.get_autocast_dtype(device)
        torch.set_autocast_dtype(device, dtype)

    def remove(self) -> None:
        torch.set_autocast_dtype(self.device, self.old)


class _Item:
    """``mapping[key] = value`` until :meth:`remove` (for the standard library's tables)."""

    def __init__(self, mapping: Any, key: Any, value: Any) -> None:
        self.mapping, self.key = mapping, key
        mapping[key] = value

    def remove(self) -> None:
        del self.mapping[self.key]


class _NumpyErrors:
    """``np.seterr(**modes)`` until :meth:`remove`."""

    def __init__(self, **modes: str) -> None:
        self.old = np.seterr(**modes)

    def remove(self) -> None:
        np.seterr(**self.old)


def _scaled(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a, **k: fn(*a, **k) * 2


def _doubled(call: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, *a, **k: call(self, *a, **k) * 2


# (function, change made after import, what the failure names)
CASES: list[tuple[str, Callable[[Any], Any], str]] = [
    (
        "closure",
        lambda m: m.SET_Z(3.0),
        "SCALER.__closure__[0].cell_contents is float 3.0, compiled for float 2.0",
    ),
    ("class_attribute", lambda m: setattr(m.Const, "K", 4.0), "guard_pkg.state.Const.K is float 4.0"),
    ("module_call", lambda m: setattr(m.Gate, "BIAS", 1.0), "type(guard_pkg.state.GATE).BIAS is float 1.0"),
    (
        "module_call",
        lambda m: setattr(m.Gate, "forward", lambda self, x: x),
        "type(guard_pkg.state.GATE).forward was replaced",
    ),
    (
        "module_call",
        lambda m: setattr(m.GATE, "forward", lambda x: x),
        "guard_pkg.state.GATE.forward is now set on the instance",
    ),
    (
        "module_call",
        lambda m: m.GATE.lin.register_forward_hook(lambda *a: None),
        "GATE.lin._forward_hooks has 1 entries",
    ),
    (
        "module_call",
        lambda m: torch.nn.modules.module.register_module_forward_hook(lambda *a: None),
        "torch.nn.modules.module._global_forward_hooks has 1 entries",
    ),
    # a profiler or a patch replacing how modules are called (Dynamo calls forward directly)
    (
        "module_call",
        lambda m: _Patched(torch.nn.Module, "__call__", _doubled(torch.nn.Module.__call__)),
        "Gate.__call__ was replaced (compiled for torch.nn.modules.module:Module._wrapped_call_impl",
    ),
    (
        "module_call",
        lambda m: setattr(m.Gate, "_call_impl", _doubled(torch.nn.Module._call_impl)),
        "guard_pkg.state.Gate._call_impl was replaced",
    ),
    (
        "module_call",
        lambda m: _Patched(torch.nn.Module, "__getattr__", _forwarding(torch.nn.Module.__getattr__)),
        "Gate.__getattr__ was replaced (compiled for torch.nn.modules.module:Module.__getattr__",
    ),
    (
        "module_call",
        lambda m: setattr(m.GATE, "lin", torch.nn.Identity()),
        "GATE.lin is a torch.nn.modules.linear.Identity",
    ),
    # a class attribute named like a submodule: read instead of it (nn.Module.__getattr__)
    (
        "module_call",
        lambda m: setattr(m.Gate, "lin", torch.nn.Identity()),
        "type(guard_pkg.state.GATE).lin now exists",
    ),
    ("namespace", lambda m: setattr(m.NS, "scale", 3.0), "guard_pkg.state.NS.scale is float 3.0"),
    ("attr_dict", _setitem(lambda m: m.CFG, "shift", 0.5), "guard_pkg.state.CFG['shift'] is float 0.5"),
    ("ordered_dict", _setitem(lambda m: m.OD, "gain", 2.0), "guard_pkg.state.OD['gain'] is float 2.0"),
    ("mixed_dict", _setitem(lambda m: m.MIXED, "alpha", 0.7), "guard_pkg.state.MIXED['alpha'] is float 0.7"),
    ("flag_set", lambda m: m.FLAGS.discard("clip"), "guard_pkg.state.FLAGS no longer contains 'clip'"),
    ("aliased_config", lambda m: setattr(m.ALIASED, "width", 3.0), "state.ALIASED.hidden is float 3.0"),
    ("aliased_config", lambda m: setattr(m.ALIASED, "hidden", 3.0), "state.ALIASED.hidden is float 3.0"),
    ("aliased_config", lambda m: setattr(m, "ALIAS_GAIN", 2.0), "guard_pkg.state.ALIAS_GAIN is float 2.0"),
    # read by the __getattribute__ for a name the function only tests with hasattr
    ("aliased_config", lambda m: setattr(m, "ALIAS_EXTRA", True), "guard_pkg.state.ALIASED.extra now exists"),
    (
        "aliased_config",
        lambda m: m.AliasConfig.attribute_map.__setitem__("width", "_gain"),
        "type(guard_pkg.state.ALIASED).attribute_map is dict {'width': '_gain'",
    ),
    ("aliased_config", lambda m: setattr(m.ALIASED, "extra", 1), "guard_pkg.state.ALIASED.extra now exists"),
    (
        "aliased_config",
        # the same answers today, through another function: the reads it makes are unknown
        lambda m: setattr(m.AliasConfig, "__getattribute__", _forwarding(m.AliasConfig.__getattribute__)),
        "type(guard_pkg.state.ALIASED).__getattribute__ was replaced",
    ),
    (
        "numpy_scalar",
        lambda m: setattr(m, "NP_SCALE", np.float32(3.0)),
        "guard_pkg.state.NP_SCALE is float32",
    ),
    (
        "numpy_arithmetic",
        lambda m: _NumpyErrors(all="raise"),
        "numpy.geterr() is dict {'divide': 'raise', 'over': 'raise', 'under': 'raise', 'invalid': 'raise'}",
    ),
    ("registry", _setitem(lambda m: m.ACTS, "gelu", torch.relu), "guard_pkg.state.ACTS['gelu'] was replaced"),
    ("mapping_proxy", _setitem(lambda m: m._TABLE, "k", 3.0), "guard_pkg.state.TABLE['k'] is float 3.0"),
    ("mapping_proxy", _setitem(lambda m: m._TABLE, "j", 3.0), "guard_pkg.state.TABLE has keys ['k', 'j']"),
    ("bound_method", lambda m: setattr(m.SCALE_BY.__self__, "k", 3.0), "SCALE_BY.__self__.k is float 3.0"),
    ("chain_map", lambda m: m.LAYERS.maps[0].__setitem__("k", 3.0), "LAYERS.maps[0]['k'] is float 3.0"),
    ("chain_map", lambda m: m.LAYERS.maps.insert(0, {"k": 5.0}), "LAYERS.maps has 3 entries"),
    # len(ChainMap): set().union(*maps), which Dynamo computes on the maps as constants
    (
        "chain_map_len",
        lambda m: m.LAYERS.maps[1].__setitem__("m", 3.0),
        "guard_pkg.state.LAYERS.maps[1] has keys ['j', 'm'], compiled for ['j']",
    ),
    # `key in d` for a key the trace makes (WeakKeyDictionary.__contains__: ref(key) in data)
    (
        "registered_weakly",
        lambda m: m.REGISTERED.__setitem__(m.WRAPPER, 1),
        "guard_pkg.state.REGISTERED.data has keys [<weakref",
    ),
    (
        "exec_generated",
        lambda m: m._GENERATED.__setitem__("K", 3.0),
        "guard_pkg.state._generated_scale.__globals__['K'] is float 3.0",
    ),
    (
        "builtin_value",
        lambda m: setattr(builtins, "GUARD_PKG_SCALE", 3.0),
        "builtins.GUARD_PKG_SCALE is float 3.0, compiled for float 2.0",
    ),
    (
        "thread_local",
        lambda m: setattr(m.THREAD_STATE, "k", 3.0),
        "guard_pkg.state.THREAD_STATE.k is now set on the instance",
    ),
    ("slotted", lambda m: setattr(m.SLOTTED, "k", 3.0), "guard_pkg.state.SLOTTED.k is float 3.0"),
    ("inherited", lambda m: setattr(m.BaseConst, "K", 3.0), "type(guard_pkg.state.CHILD).K is float 3.0"),
    ("inherited", lambda m: setattr(m.CHILD, "K", 3.0), "guard_pkg.state.CHILD.K is now set on the instance"),
    # a module's __getattr__ (PEP 562) computes the name from a table
    (
        "module_getattr",
        lambda m: sys.modules["guard_pkg.lazy_module"].TABLE.__setitem__("EPS", 3.0),
        "lazy_module.EPS is float 3.0",
    ),
    # a read that falls back to the class's __getattr__
    (
        "lazy_attribute",
        _setitem(lambda m: m.LAZY_REG, "k", 3.0),
        "guard_pkg.state.LAZY_REG['k'] is float 3.0",
    ),
    (
        "lazy_attribute",
        lambda m: setattr(m.LAZY, "k", 3.0),
        "guard_pkg.state.LAZY.k is now set on the instance",
    ),
    ("lazy_attribute", lambda m: setattr(m.Lazy, "k", 3.0), "type(guard_pkg.state.LAZY).k now exists"),
    (
        "lazy_attribute",
        lambda m: setattr(m.Lazy, "__getattr__", lambda self, name: 3.0),
        "type(guard_pkg.state.LAZY).__getattr__ was replaced",
    ),
    (
        "partial",
        lambda m: setattr(m, "CLAMP", functools.partial(torch.clamp, min=0.0)),
        "CLAMP.keywords['min'] is float 0.0",
    ),
    ("partial", lambda m: m.CLAMP.keywords.__setitem__("min", 0.0), "CLAMP.keywords['min'] is float 0.0"),
    ("enum_flag", lambda m: setattr(m, "MODE", m.Mode.EXACT), "guard_pkg.state.MODE is Mode <Mode.EXACT: 2>"),
    (
        "enum_lookup",
        lambda m: m.Shade._value2member_map_.__setitem__(1, m.Shade.DARK),
        "guard_pkg.state.Shade._value2member_map_[1] is Shade <Shade.DARK: 2>, compiled for Shade "
        "<Shade.LIGHT: 1>",
    ),
    (
        "enum_lookup",
        lambda m: m.Shade._member_map_.__setitem__("DARK", m.Shade.LIGHT),
        "guard_pkg.state.Shade._member_map_['DARK'] is Shade <Shade.LIGHT: 1>, compiled for Shade "
        "<Shade.DARK: 2>",
    ),
    (
        "environment",
        lambda m: os.environ.__setitem__("GUARD_PKG_SHIFT", "1"),
        "os.environ._data now contains b'GUARD_PKG_SHIFT'",
    ),
    ("cached", lambda m: setattr(m, "CACHE_K", 5.0), "guard_pkg.state.CACHE_K is float 5.0"),
    # the cache filled while the global it reads had another value: Python answers from the cache
    (
        "cached",
        lambda m: (
            m.cached_helper.cache_clear(),
            setattr(m, "CACHE_K", 5.0),
            m.cached_helper(2),
            setattr(m, "CACHE_K", 4.0),
        ),
        "guard_pkg.state.cached_helper(2) is float 10.0, compiled for float 8.0",
    ),
    ("cached_list", lambda m: m.cached_scales(2).append(1.0), "guard_pkg.state.cached_scales(2) is list"),
    # a tensor the cache holds: changed in place, or computed while CACHE_K was other
    (
        "cached_tensor",
        lambda m: m.cached_table(4).mul_(2),
        "cached.cache_is_current('guard_pkg.state:cached_table', 4) is bool False",
    ),
    (
        "cached_tensor",
        lambda m: (
            m.cached_table.cache_clear(),
            setattr(m, "CACHE_K", 5.0),
            m.cached_table(4),
            setattr(m, "CACHE_K", 4.0),
        ),
        "cached.cache_is_current('guard_pkg.state:cached_table', 4) is bool False",
    ),
    ("cached_list", _setitem(lambda m: m.cached_scales(2), 1, 0.5), "state.cached_scales(2) is list"),
    # an import statement in the function's body: Python imports through sys.modules on each call
    (
        "imports_from",
        _setitem(lambda m: sys.modules, "guard_pkg.helpers", types.SimpleNamespace(FACTOR=5.0)),
        "sys.modules['guard_pkg.helpers'] was replaced",
    ),
    (
        "imports_dotted",
        _setitem(
            lambda m: sys.modules,
            "guard_pkg",
            types.SimpleNamespace(helpers=types.SimpleNamespace(FACTOR=5.0)),
        ),
        "sys.modules['guard_pkg'] was replaced",
    ),
    (
        "imports_dotted",
        lambda m: sys.modules.pop("guard_pkg.helpers"),
        "sys.modules no longer contains 'guard_pkg.helpers'",
    ),
    ("lazily_filled", lambda m: m._LAZY.__setitem__(3, 0.0), "guard_pkg.state._LAZY[3] is float 0.0"),
    ("lazily_filled", lambda m: m._LAZY.clear(), "guard_pkg.state._LAZY"),
    (
        "other_module",
        lambda m: setattr(m.helpers, "FACTOR", 3.0),
        "guard_pkg.state.helpers.FACTOR is float 3.0",
    ),
    ("plain_helper", lambda m: setattr(m, "_double", lambda x: x), "guard_pkg.state._double"),
    (
        "descriptor",
        lambda m: setattr(m, "DESCRIBED_SCALE", 3.0),
        "type(guard_pkg.state.HOLDER).k is float 3.0",
    ),
    (
        "descriptor",
        lambda m: setattr(m.Described, "__get__", lambda self, obj, owner=None: 3.0),
        "type(guard_pkg.state.HOLDER).k is float 3.0",
    ),
    # the instance shadows a non-data descriptor until its class gains a __set__
    (
        "shadowed_descriptor",
        lambda m: setattr(m.NonDataDefault, "__set__", lambda self, obj, value: None),
        "guard_pkg.state.SHADOWING.k is float 2.0, compiled for float 3.0",
    ),
    (
        "abc_instance",
        lambda m: m.Scaling.register(m.Doubling),
        "isinstance(guard_pkg.state.STEP, guard_pkg.state:Scaling) is True, compiled for False",
    ),
    (
        "abc_subclass",
        lambda m: m.Scaling.register(m.Doubling),
        "issubclass(type(guard_pkg.state.STEP), guard_pkg.state:Scaling) is True, compiled for False",
    ),
    ("metaclass_getattr", _setitem(lambda m: m.META_TABLE, "K", 4.0), "META_TABLE['K'] is float 4.0"),
    (
        "metaclass_getattr",
        lambda m: setattr(m.TableConsts, "K", 4.0),
        "guard_pkg.state.TableConsts.K is now set on the class",
    ),
    (
        "metaclass_getattr",
        lambda m: setattr(m.TableMeta, "__getattr__", lambda cls, name: 4.0),
        "type(guard_pkg.state.TableConsts).__getattr__ was replaced",
    ),
    (
        "environment_getenv",
        lambda m: os.environ.__setitem__("GUARD_PKG_SHIFT", "1"),
        "os.environ._data now contains b'GUARD_PKG_SHIFT'",
    ),
    (
        "optional_attribute",
        lambda m: setattr(m.helpers, "OPTIONAL_FACTOR", 3.0),
        "guard_pkg.state.helpers.OPTIONAL_FACTOR now exists",
    ),
    (
        "optional_attribute",
        lambda m: setattr(m.helpers, "FEATURE", True),
        "guard_pkg.state.helpers.FEATURE now exists",
    ),
    (
        "signed_zero",
        lambda m: setattr(m, "ZERO", -0.0),
        "guard_pkg.state.ZERO is float -0.0, compiled for float 0.0",
    ),
    (
        "set_elements",
        lambda m: setattr(m, "LEVELS", frozenset({1.0, 2})),
        "guard_pkg.state.LEVELS is frozenset",
    ),
    ("flag_combination", lambda m: setattr(m, "PERMS", m.Perm.READ), "guard_pkg.state.PERMS is Perm"),
    (
        "shadowed_builtin",
        lambda m: setattr(m, "abs", lambda v: 7.0),
        "guard_pkg.state.abs is now a global of the module: its code calls it in place of the builtin 'abs'",
    ),
    (
        "class_protocol",
        lambda m: setattr(m.Plain, "__bool__", lambda self: False),
        "type(guard_pkg.state.PLAIN).__bool__ is now defined by the class or a base",
    ),
    (
        "class_protocol",
        lambda m: setattr(m.Plain, "__len__", lambda self: 0),
        "type(guard_pkg.state.PLAIN).__len__ is now defined by the class or a base",
    ),
    (
        "class_protocol",
        lambda m: setattr(m.Plain, "__call__", lambda self: 1),
        "type(guard_pkg.state.PLAIN).__call__ is now defined by the class or a base",
    ),
    (
        "dict_first_key",
        lambda m: m.ORDER.__setitem__("a", m.ORDER.pop("a")),
        "guard_pkg.state.ORDER has keys ['b', 'a'], compiled for ['a', 'b']",
    ),
    (
        "dict_unpacked",
        lambda m: m.ORDER.__setitem__("a", m.ORDER.pop("a")),
        "guard_pkg.state.ORDER has keys ['b', 'a'], compiled for ['a', 'b']",
    ),
    ("dict_unpacked", lambda m: m.ORDER.__setitem__("c", 1.0), "guard_pkg.state.ORDER has keys"),
    # functools.singledispatch: a class registered after import, the function replaced, its
    # defaults, what it reads
    (
        "dispatched",
        lambda m: m.area.register(m.Square, lambda s: 4.0),
        "guard_pkg.state.area.registry has keys",
    ),
    (
        "dispatched",
        lambda m: m.area.register(m.Circle, lambda s: 5.0),
        "guard_pkg.state.area.registry[<class 'guard_pkg.state.Circle'>] was replaced",
    ),
    (
        "dispatched",
        lambda m: setattr(m._circle_area, "__defaults__", (4.0,)),
        "registry[<class 'guard_pkg.state.Circle'>].__defaults__ is tuple (4.0,)",
    ),
    ("dispatched", lambda m: setattr(m.SHAPE, "r", 1.5), "guard_pkg.state.SHAPE.r is float 1.5"),
    # max/min with key=: the items and what the key function reads
    (
        "top_priority",
        lambda m: m.PRIORITIES.__setitem__("low", 5.0),
        "guard_pkg.state.PRIORITIES['low'] is float 5.0, compiled for float 1.0",
    ),
    ("top_priority", lambda m: m.PRIORITIES.__setitem__("top", 9.0), "guard_pkg.state.PRIORITIES has keys"),
    (
        "lowest_priority",
        lambda m: m.PRIORITIES.__setitem__("mid", -0.5),
        "guard_pkg.state.PRIORITIES['mid'] is float -0.5, compiled for float 2.0",
    ),
    (
        "code_replaced",
        lambda m: setattr(m._tripled, "__code__", (lambda x: x * 5).__code__),
        "guard_pkg.state._tripled.__code__ was replaced",
    ),
    (
        "requires_grad_branch",
        lambda m: m.FROZEN.requires_grad_(False),
        "guard_pkg.state.FROZEN.requires_grad is bool False, compiled for bool True",
    ),
    ("copied", lambda m: setattr(m.SETTINGS, "k", 3.0), "guard_pkg.state.SETTINGS.k is float 3.0"),
    (
        "copied",
        lambda m: _Item(copyreg.dispatch_table, m.Settings, m.five),
        "copy.dispatch_table now contains guard_pkg.state.Settings (it did not when compiled)",
    ),
    ("as_dict", lambda m: setattr(m.OPTIONS, "k", 3.0), "guard_pkg.state.OPTIONS.k is float 3.0"),
    (
        "instance_dict",
        lambda m: setattr(m.WITH_DEFAULTS, "k", 3.0),
        "guard_pkg.state.WITH_DEFAULTS.__dict__ has keys ['a', '_k'], compiled for ['a']",
    ),
    (
        "instance_dict",
        lambda m: setattr(m.WITH_DEFAULTS, "b", 3.0),
        "guard_pkg.state.WITH_DEFAULTS.__dict__ has keys ['a', 'b'], compiled for ['a']",
    ),
    (
        "set_unpacked",
        lambda m: setattr(m, "MODES", {9, 1}),
        "guard_pkg.state.MODES iterates as [9, 1], compiled for [1, 9]",
    ),
    ("set_loop", lambda m: setattr(m, "MODES", {9, 1}), "guard_pkg.state.MODES iterates as [9, 1]"),
    # a set computed from others (S - T) runs in their order: they are checked in order too
    (
        "derived_set_loop",
        lambda m: setattr(m, "ALL_MODES", {9, 1, 3}),
        "guard_pkg.state.ALL_MODES iterates as [9, 3, 1], compiled for [1, 3, 9]",
    ),
    (
        "created",
        lambda m: setattr(m.Helper, "scale", lambda self: 5.0),
        "guard_pkg.state.Helper.scale was replaced",
    ),
    (
        "created",
        lambda m: setattr(m.Helper.__init__, "__defaults__", (3.0,)),
        "guard_pkg.state.Helper.__init__.__defaults__ is tuple (3.0,), compiled for tuple (2.0,)",
    ),
    (
        "created",
        lambda m: setattr(m.Helper, "__call__", lambda self, x: x),
        "guard_pkg.state.Helper.__call__ was replaced",
    ),
    (
        "named_tuple_method",
        lambda m: setattr(m.Limits, "doubled", lambda self: 1.0),
        "type(guard_pkg.state.LIMITS).doubled was replaced",
    ),
    ("calls_entry", _setitem(lambda m: m.K_INNER, "s", 3.0), "guard_pkg.state.K_INNER['s'] is float 3.0"),
    (
        "calls_entry_module",
        lambda m: setattr(m.ENTRY_BLOCK, "scale", 3.0),
        "guard_pkg.state.ENTRY_BLOCK.scale is float 3.0",
    ),
    (
        "switched",
        lambda m: setattr(m.Switch, "__bool__", lambda self: False),
        "type(guard_pkg.state.SWITCH).__bool__ was replaced",
    ),
    (
        "up_the_hierarchy",
        lambda m: setattr(m.Leaf, "gain", 5.0),
        "type(guard_pkg.state.LEAF).gain is now set on the class (it was not when compiled)",
    ),
    (
        "up_the_hierarchy",
        lambda m: setattr(m.Middle, "forward", lambda self, x: x),
        "type(guard_pkg.state.LEAF).__mro__[1].forward is now set on the class",
    ),
    (
        "weight_normed",
        lambda m: torch.nn.utils.parametrize.remove_parametrizations(m.NORMED, "weight"),
        "guard_pkg.state.NORMED is a torch.nn.modules.linear.Linear, compiled for a "
        "ParametrizedLinear made at run time from torch.nn.modules.linear:Linear",
    ),
    (
        "weight_normed",
        lambda m: torch.nn.utils.parametrize.register_parametrization(m.NORMED, "bias", torch.nn.Tanh()),
        "type(guard_pkg.state.NORMED).bias now exists (compiled without it)",
    ),
    (
        "torch_internals",
        lambda m: _Patched(F, "scaled_dot_product_attention", _scaled(F.scaled_dot_product_attention)),
        "torch.nn.functional.scaled_dot_product_attention was replaced",
    ),
    (
        "created_fallback",
        lambda m: setattr(m.Fallback, "__getattr__", lambda self, name: 3.0),
        "guard_pkg.state.Fallback.__getattr__ was replaced",
    ),
    (
        "created_fallback",
        lambda m: setattr(m.Fallback, "anything", 3.0),
        "guard_pkg.state.Fallback.anything is now defined by the class or a base",
    ),
    (
        "metaclass_attribute",
        lambda m: setattr(m.Registry, "SCALE", 3.0),
        "type(guard_pkg.state.Registered).SCALE is float 3.0, compiled for float 2.0",
    ),
    (
        "metaclass_attribute",
        lambda m: setattr(m.Registered, "SCALE", 3.0),
        "guard_pkg.state.Registered.SCALE is now defined by the class or a base",
    ),
    # a metaclass's special methods: len(Cls), if Cls: (answered through them, unguarded)
    (
        "metaclass_protocol",
        lambda m: setattr(m.Catalog, "__len__", lambda cls: 5),
        "type(guard_pkg.state.Cataloged).__len__ was replaced",
    ),
    (
        "metaclass_protocol",
        lambda m: setattr(m.Cataloged, "ENABLED", False),  # read by the metaclass's __bool__
        "guard_pkg.state.Cataloged.__dict__['ENABLED'] is bool False",
    ),
    (
        "metaclass_protocol",
        lambda m: setattr(m.BareMeta, "__len__", lambda cls: 0),
        "type(guard_pkg.state.Unsized).__len__ is now defined by the class or a base",
    ),
    (
        "python_branch",
        lambda m: setattr(m.ATTENTION, "is_causal", False),
        "guard_pkg.state.ATTENTION.is_causal is bool False, compiled for bool True",
    ),
    (
        "python_branch_after_untraceable",
        lambda m: setattr(m.ATTENTION, "is_causal", False),
        "guard_pkg.state.ATTENTION.is_causal is bool False, compiled for bool True",
    ),
    (
        "autocast_decorated",
        lambda m: setattr(m.autocast_cell(m.autocast_decorated).cell_contents, "fast_dtype", torch.float16),
        "autocast_instance (a closure variable).fast_dtype is dtype torch.float16, compiled for dtype "
        "torch.bfloat16",
    ),
    (
        "autocast_decorated",
        lambda m: setattr(m.autocast_cell(m.autocast_decorated).cell_contents, "_enabled", False),
        "autocast_instance (a closure variable)._enabled is bool False, compiled for bool True",
    ),
    (
        "autocast_default_dtype",
        lambda m: setattr(
            m.autocast_cell(m.autocast_default_dtype), "cell_contents", torch.autocast("cpu", enabled=False)
        ),
        "autocast_instance (a closure variable)._enabled is bool False, compiled for bool True",
    ),
    (
        "autocast_decorated",
        lambda m: _Patched(torch.amp.autocast_mode.autocast, "__enter__", lambda self: self),
        "torch.amp.autocast_mode.autocast.__enter__ was replaced",
    ),
    # torch's autocast dtype for a device, read (set while autocast is off)
    (
        "autocast_dtype_read",
        lambda m: _AutocastDtype("cpu", torch.float16),
        "torch.get_autocast_dtype('cpu') is dtype torch.float16, compiled for dtype torch.bfloat16",
    ),
    # an autocast block without a dtype runs at the default autocast dtype of the moment
    (
        "autocast_block",
        lambda m: _AutocastDtype("cpu", torch.float16),
        "torch.get_autocast_dtype('cpu') is dtype torch.float16, compiled for dtype torch.bfloat16",
    ),
    (
        "autocast_cpu_dtype_read",
        lambda m: _AutocastDtype("cpu", torch.float16),
        "torch.get_autocast_dtype('cpu') is dtype torch.float16",
    ),
    (
        "skip_by_type",
        lambda m: m.SKIP_TYPES.add(torch.nn.ReLU),
        "guard_pkg.state.SKIP_TYPES now contains torch.nn.modules.activation.ReLU (it did not when compiled)",
    ),
    (
        "skip_by_type",
        lambda m: m.SKIP_TYPES.discard(torch.nn.Dropout),  # a class the function tested
        "guard_pkg.state.SKIP_TYPES no longer contains torch.nn.modules.dropout.Dropout",
    ),
    (
        "skip_class",
        lambda m: setattr(m, "FROZEN_SKIP", m.FROZEN_SKIP | {torch.nn.ReLU}),
        "guard_pkg.state.FROZEN_SKIP now contains torch.nn.modules.activation.ReLU",
    ),
    (
        "skip_superset",
        lambda m: setattr(m, "FROZEN_SKIP", m.FROZEN_SKIP - {torch.nn.Dropout}),
        "guard_pkg.state.FROZEN_SKIP no longer contains torch.nn.modules.dropout.Dropout",
    ),
    # a name an nn.Module's __getattr__ answers once registered (the snapshot stamps its dicts)
    (
        "offset_if_registered",
        lambda m: m.OFFSETTABLE.register_buffer("offset", torch.ones(4)),
        "guard_pkg.state.OFFSETTABLE.offset now exists",
    ),
    (
        "scale_if_set",
        lambda m: setattr(m.OFFSETTABLE, "gain", torch.nn.Parameter(torch.full((4,), 2.0))),
        "guard_pkg.state.OFFSETTABLE.gain now exists",
    ),
    (
        "lazy_flag",
        lambda m: _Item(sys.modules["guard_pkg.lazy_module"].TABLE, "FLAG", 1.0),
        "lazy_module.FLAG now exists",
    ),
    (
        "class_namespace_get",
        lambda m: setattr(m.Tunables, "boost", 3.0),
        "guard_pkg.state.Tunables.__dict__",
    ),
    (
        "version_branch",
        lambda m: setattr(m, "sys", types.SimpleNamespace(version_info=(3, 8, 0), flags=sys.flags)),
        "guard_pkg.state.sys",
    ),
    (
        "str_dispatch",
        lambda m: setattr(m.Activation, "__str__", lambda self: "none"),
        "type(guard_pkg.state.ACTIVATION).__str__ was replaced",
    ),
    ("str_by_repr", lambda m: setattr(m.NAMED, "name", "tanh"), "guard_pkg.state.NAMED.name"),
    # objects the function creates: the operators their class answers, a module's forward
    (
        "created_protocol",
        lambda m: setattr(m.Window, "__len__", lambda self: 1),
        "guard_pkg.state.Window.__len__ was replaced",
    ),
    (
        "created_protocol",
        lambda m: setattr(m.Window, "__getitem__", lambda self, i: 5.0),
        "guard_pkg.state.Window.__getitem__ was replaced",
    ),
    (
        "created_compare",
        lambda m: setattr(m.Level, "__eq__", lambda self, other: False),
        "guard_pkg.state.Level.__eq__ was replaced",
    ),
    (
        "created_module",
        lambda m: setattr(m.Tripler, "forward", lambda self, x: x * 4),  # a kernel library's patch
        "guard_pkg.state.Tripler.forward was replaced",
    ),
    (
        "dataclass_default",
        lambda m: setattr(m.Knobs.__init__, "__defaults__", (m.Knobs.__init__.__defaults__[0], 3.0)),
        "guard_pkg.state.Knobs.__init__.__defaults__[1] is float 3.0, compiled for float 2.0",
    ),
    # the default_factory a dataclass's __init__ calls (held in its closure): its code replaced
    (
        "dataclass_factory",
        lambda m: setattr(m._default_gains, "__code__", (lambda: [5.0]).__code__),
        "guard_pkg.state.Gains.__init__.__closure__[",
    ),
    (
        "with_layer_config",
        lambda m: setattr(m, "_EXPORTABLE", True),  # put back to True after the block: + 1.0
        "guard_pkg.state._EXPORTABLE is bool True, compiled for bool False",
    ),
    ("dir_branch", lambda m: setattr(m.Tunables, "boost", 3.0), "guard_pkg.state.Tunables.__dict__ has keys"),
    (
        "pattern_branch",
        lambda m: setattr(m, "ACT_PATTERN", re.compile("tanh")),
        "guard_pkg.state.ACT_PATTERN.pattern is str 'tanh', compiled for str 're(lu|lu6)'",
    ),
    # a logger: a call at a level that is off is compiled out, a branch on a level answered
    (
        "logs_debug",
        lambda m: _Patched(m.LOG, "level", logging.DEBUG),
        "guard_pkg.state.LOG.getEffectiveLevel() is int 10, compiled for int 30",
    ),
    (
        "log_branch",
        lambda m: _Patched(logging.getLogger(), "level", logging.DEBUG),  # the root's, inherited
        "guard_pkg.state.LOG.getEffectiveLevel() is int 10, compiled for int 30",
    ),
    (
        "log_warning_branch",
        lambda m: _Patched(m.LOG.manager, "_disable", logging.CRITICAL),  # as logging.disable() sets it
        "guard_pkg.state.LOG.manager.disable is int 50, compiled for int 0",
    ),
    (
        "log_warning_branch",
        lambda m: _Patched(m.LOG, "disabled", True),
        "guard_pkg.state.LOG.disabled is bool True",
    ),
    (
        "log_warning_branch",
        lambda m: _Patched(logging.Logger, "isEnabledFor", lambda self, level: False),
        "type(guard_pkg.state.LOG).isEnabledFor was replaced",
    ),
    # isEnabledFor answers from the logger's private cache first (written directly)
    (
        "log_branch",
        lambda m: _Item(m.LOG._cache, logging.DEBUG, True),
        "guard_pkg.state.LOG.isEnabledFor(10) is bool True, compiled for bool False",
    ),
    (
        "logs_debug",
        lambda m: _Item(m.LOG._cache, logging.DEBUG, True),
        "guard_pkg.state.LOG.isEnabledFor(10) is bool True, compiled for bool False",
    ),
    (
        "log_warning_branch",
        lambda m: _Item(m.LOG._cache, logging.WARNING, False),
        "guard_pkg.state.LOG.isEnabledFor(30) is bool False, compiled for bool True",
    ),
    (
        "log_level_branch",
        lambda m: _Patched(m.LOG, "level", logging.INFO),
        "guard_pkg.state.LOG.getEffectiveLevel() is int 20, compiled for int 30",
    ),
    (
        "log_level_read",
        lambda m: _Patched(m.LOG, "level", logging.DEBUG),  # as LOG.setLevel(logging.DEBUG) sets it
        "guard_pkg.state.LOG.level is int 10, compiled for int 0",
    ),
    (
        "log_level_read",
        lambda m: _Patched(m.LOG, "level", logging.ERROR),
        "guard_pkg.state.LOG.level is int 40, compiled for int 0",
    ),
    # logging.debug(...): the root logger's, and the function (it configures logging once)
    (
        "root_logs_debug",
        lambda m: _Patched(logging.getLogger(), "level", logging.DEBUG),
        "logging.root.getEffectiveLevel() is int 10, compiled for int 30",
    ),
    (
        "root_logs_debug",
        lambda m: _Patched(logging.root.manager, "_disable", logging.CRITICAL),
        "logging.root.manager.disable is int 50, compiled for int 0",
    ),
    (
        "root_logs_debug",
        lambda m: _Patched(logging, "debug", logging.info),
        "guard_pkg.state.logging.debug was replaced",
    ),
    (
        "root_logs_debug",
        lambda m: _Patched(logging.root, "handlers", []),  # run as Python, the call configures logging
        "logging.root.handlers[0] no longer exists",
    ),
    # a classmethod looked up on the class (Dynamo guards a staticmethod's function, not this)
    (
        "class_method",
        lambda m: setattr(m.Ops, "scale", classmethod(lambda cls, x: x * 5.0)),
        "guard_pkg.state.Ops.scale.__func__ was replaced",
    ),
    (
        "class_method",
        lambda m: setattr(m.Ops, "scale", staticmethod(m.Ops.scale.__func__)),
        "guard_pkg.state.Ops.scale is a builtins.staticmethod, compiled for builtins:classmethod",
    ),
    # an object of a class with no __init__ or __new__ of its own (Dynamo guards the class only)
    (
        "created_plain",
        lambda m: setattr(m.Bare, "__init__", lambda self: setattr(self, "k", 5.0)),
        "guard_pkg.state.Bare.__init__ is now set on the class",
    ),
    (
        "created_plain",
        lambda m: setattr(m.BareBase, "__init__", lambda self: setattr(self, "k", 5.0)),
        "guard_pkg.state.Bare.__mro__[1].__init__ is now set on the class",
    ),
    (
        "created_plain",
        lambda m: setattr(m.Bare, "__new__", lambda cls: types.SimpleNamespace(k=5.0)),
        "guard_pkg.state.Bare.__new__ is now set on the class",
    ),
    # an attribute read that raised AttributeError inside a try (hasattr's answer is guarded)
    ("missing_attribute", lambda m: setattr(m.FALLBACKS, "k", 5.0), "guard_pkg.state.FALLBACKS.k now exists"),
    ("missing_attribute", lambda m: setattr(m.Fallbacks, "k", 5.0), "guard_pkg.state.FALLBACKS.k now exists"),
    ("unset_slot", lambda m: setattr(m.UNSET_SLOT, "k", 5.0), "guard_pkg.state.UNSET_SLOT.k now exists"),
]


@pytest.mark.parametrize(("fn", "change", "names"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_kind_of_state_is_guarded(
    pkg: types.ModuleType, evaluator: Any, fn: str, change: Callable[[Any], Any], names: str
) -> None:
    f = getattr(pkg, f"{fn}")
    f(X)  # as the build does: the function ran as plain Python first (fills lazy caches)
    check = Checker(f, evaluator)
    assert check() == -1
    assert check.stats()["fast_hits"] >= 1  # unchanged state: the snapshot answers
    handle = change(pkg)
    try:
        code = check()
        assert code != -1, f"{fn}: the change went unnoticed"
        assert names in check.explain(code)
    finally:
        if hasattr(handle, "remove"):
            handle.remove()


@contextlib.contextmanager
def _process_group(tmp_path: Path) -> Iterator[None]:
    """A one-process gloo group, as ``torch.distributed.init_process_group`` makes it."""
    store = f"file://{tmp_path / 'store'}"
    torch.distributed.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def test_torch_state_answered_while_tracing_is_checked(
    pkg: types.ModuleType, evaluator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Dynamo builds the answers of ``torch.cuda.is_available()``, ``torch.distributed.
    is_initialized()``, ``get_world_size()`` and ``torch.is_grad_enabled()`` into the graph,
    guarded by nothing but the functions' identity: each call is checked to answer the same."""
    accelerator = Checker(pkg.accelerator, evaluator)
    assert accelerator() == -1
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", lambda: 1, raising=False)  # CUDA, one GPU
    explained = accelerator.explain(accelerator())
    assert "torch.cuda.is_available() is bool True, compiled for bool False" in explained
    monkeypatch.undo()
    assert accelerator() == -1

    distributed = Checker(pkg.distributed, evaluator)
    assert distributed() == -1
    with _process_group(tmp_path):
        assert "distributed.is_initialized() is bool True" in distributed.explain(distributed())
        in_group = Checker(pkg.distributed, evaluator)  # built inside a group of one
        assert in_group() == -1
        assert {"torch.distributed.get_world_size()", "torch.distributed.is_initialized()"} <= {
            in_group.tree.path(i).label().removeprefix("guard_pkg.state.") for i, _ in in_group.tree.checks()
        }
    assert distributed() == -1
    assert "is_initialized() is bool False, compiled for bool True" in in_group.explain(in_group())

    with torch.no_grad():  # as the build traces
        grad_mode = Checker(pkg.grad_mode, evaluator)
        assert grad_mode() == -1
    explained = grad_mode.explain(grad_mode())
    assert "is_grad_enabled() is bool True, compiled for bool False (call under torch.no_grad()" in explained
    with torch.inference_mode():
        assert grad_mode() == -1


def test_torch_state_read_with_arguments_is_refused(pkg: types.ModuleType, tmp_path: Path) -> None:
    """A call answered while tracing that takes arguments (``get_rank(group)``,
    ``torch.cuda.get_device_properties(0)``) cannot be called again by a check: refused."""
    with _process_group(tmp_path), pytest.raises(CaptureError) as info:
        capture(pkg.rank_of, None, (X,), "guard_pkg.state:rank_of")
    assert "calls torch.distributed.distributed_c10d.get_rank(...)" in str(info.value)
    assert "call it outside the entry and pass the result as an argument" in str(info.value)


def test_python_branches_the_tracer_cannot_follow_are_listed(pkg: types.ModuleType) -> None:
    """Code that asks ``torch.compiler.is_compiling()`` is traced again with the answer False;
    where that branch cannot be traced, the site is named (the build prints it) and the other
    sites' branches are still checked (the case above)."""
    captured = capture(pkg.python_branch_after_untraceable, None, (X,), "python_branch_after_untraceable")
    line = pkg.python_branch_after_untraceable.__code__.co_firstlineno + 1
    assert len(captured.unchecked) == 1
    assert f"the branch at {pkg.__file__}:{line} (Dynamo cannot trace it: " in captured.unchecked[0]
    assert capture(pkg.python_branch, None, (X,), "python_branch").unchecked == ()


def test_a_weight_replaced_by_another_kind_of_tensor_is_not_used(pkg: types.ModuleType) -> None:
    """The trace answered ``isinstance(w, nn.Parameter)``: a weight replaced by a plain tensor
    of the same shape fails its identity check, and the shim's re-read refuses it too."""
    tree = tree_of(pkg.parameter_branch)
    assert [w.parameter for w in tree.weights] == [True]
    assert TensorSpec.from_json(tree.weights[0].to_json()) == tree.weights[0]
    old = TensorSpec.from_json({k: v for k, v in tree.weights[0].to_json().items() if k != "parameter"})
    assert old.parameter is None  # a manifest of aot-build 0.4: not recorded, not checked
    cache = WeightCache(tree.weights, lambda: ["guard_pkg.state.PARAM"], lambda _: [pkg.PARAM])
    assert isinstance(cache.read(None), Held)
    pkg.PARAM = pkg.PARAM.detach().clone()
    assert pkg.parameter_branch(X).equal(X * 2)
    assert cache.read(None) == "weight guard_pkg.state.PARAM is a Tensor, compiled for an nn.Parameter"
    assert isinstance(WeightCache([old], lambda: ["PARAM"], lambda _: [pkg.PARAM]).read(None), Held)


def test_a_set_of_strings_in_another_order_names_the_fix() -> None:
    """A set of strings iterates in another order in each process (string hashes are seeded
    per process): the build's order fails the check there, and the message says why."""
    names = {"alpha", "beta", "gamma"}
    other_order = values.encode(list(reversed(list(names))))
    keys = KINDS["keys"]
    assert not keys.holds(names, keys.bind(other_order, names))
    explained = keys.explain("pkg.NAMES", names, other_order)
    assert "pkg.NAMES iterates as " in explained
    assert "a set of strings iterates in another order in each process" in explained


@pytest.mark.parametrize("fn", ["sorted_modes", "sorted_derived_modes"])
def test_a_set_sorted_without_a_key_is_not_checked_in_order(
    pkg: types.ModuleType, evaluator: Any, fn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sorted(S)`` of a set of ints or strings gives the same list from any order (the fix
    the message above names): an equal set in another order, as a set of strings is in each
    process, passes; another element fails. Given ``key=``, ties keep the set's order: checked."""
    f = getattr(pkg, fn)
    f(X)
    check = Checker(f, evaluator)
    assert check() == -1
    other_order = {9, 1}
    assert list(other_order) != list(pkg.MODES)  # 9 and 1 share a slot: insertion order decides
    with monkeypatch.context() as patch:
        patch.setattr(pkg, "MODES", other_order)
        patch.setattr(pkg, "ALL_MODES", {9, 3, 1})
        assert list(pkg.ALL_MODES - pkg.SKIPPED_MODES) == [9, 1]
        assert check() == -1
    with monkeypatch.context() as patch:
        patch.setattr(pkg, "MODES", {1, 7})
        patch.setattr(pkg, "ALL_MODES", {1, 7, 3})
        assert check() != -1
    pkg.sorted_modes_by_key(X)
    keyed = Checker(pkg.sorted_modes_by_key, evaluator)
    assert keyed() == -1
    with monkeypatch.context() as patch:
        patch.setattr(pkg, "MODES", other_order)
        code = keyed()
        assert code != -1
        assert "guard_pkg.state.MODES iterates as [9, 1]" in keyed.explain(code)


def test_a_set_of_classes_is_checked_by_its_members_in_any_order(
    pkg: types.ModuleType, evaluator: Any
) -> None:
    """``type(m) in SKIP``: Dynamo guards each class by its position in this process's order
    (classes hash by address, so another process iterates the set in another order); the set is
    checked by the membership of each class tested instead. An equal set (another object,
    refilled) passes, and so does a class added that the function never tests (transformers
    adds each output class it defines to such a set)."""
    check = Checker(pkg.skip_by_type, evaluator)
    kinds = [
        c.kind for i, c in check.tree.checks() if check.tree.path(i).label() == "guard_pkg.state.SKIP_TYPES"
    ]
    assert sorted(kinds) == ["has", "lacks", "lacks", "type"]  # Dropout in it; Linear, ReLU not
    assert check() == -1
    pkg.SKIP_TYPES = set(reversed(list(pkg.SKIP_TYPES)))
    assert check() == -1
    pkg.SKIP_TYPES.add(torch.nn.Tanh)
    assert check() == -1
    pkg.SKIP_TYPES.add(torch.nn.ReLU)
    assert pkg.skip_by_type(X).equal(pkg.SKIP_LAYERS[0](X))  # eager skips the ReLU now
    assert "SKIP_TYPES now contains torch.nn.modules.activation.ReLU" in check.explain(check())


def test_a_weight_replaced_by_a_sparse_or_negated_tensor_is_not_used() -> None:
    """A sparse tensor has no strides (reading them raised out of the user's call); a lazily
    negated view of the right shape would be read unnegated by the library."""
    weight = torch.randn(3, 3)
    now: list[torch.Tensor] = [weight]
    cache = WeightCache([tensor_spec(weight)], lambda: ["pkg.W"], lambda _: list(now))
    assert isinstance(cache.read(None), Held)
    now[0] = weight.to_sparse_csr()
    assert cache.read(None) == "weight pkg.W has layout torch.sparse_csr, compiled for torch.strided"
    now[0] = torch.randn(3, 3, dtype=torch.complex64).conj().imag
    assert now[0].is_neg()
    assert "weight pkg.W is a negated view (its neg bit is set)" in str(cache.read(None))


def test_method_entry_decorated_by_a_star_args_wrapper(pkg: types.ModuleType, evaluator: Any) -> None:
    """``@torch.no_grad()`` on ``forward`` makes the entry a ``(*args, **kwargs)`` wrapper:
    ``self`` is ``args[0]``, and what is read through it is checked (it was taken for an
    argument: nothing under ``self`` was checked, and its weights were not found)."""
    block = pkg.NO_GRAD_BLOCK
    check = Checker(pkg.NoGradBlock.forward, evaluator, self_obj=block)
    assert len(check.tree.weights) == 2  # lin.weight, lin.bias: read through self
    assert check() == -1
    block.scale = 3.0
    assert "self.scale is float 3.0, compiled for float 2.0" in check.explain(check())
    block.scale = 2.0
    block.lin = torch.nn.Identity()
    assert "self.lin is a torch.nn.modules.linear.Identity" in check.explain(check())


def test_an_entry_called_inside_another_is_its_plain_function(pkg: types.ModuleType, evaluator: Any) -> None:
    """Inside a trace an entry runs its plain function: the outer entry's checks hold whatever
    the inner entry is bound to in the user's process (not yet, or its artifact)."""
    check = Checker(pkg.calls_entry, evaluator)
    assert check() == -1
    for bound in (None, lambda *args: args[0]):
        pkg.inner_entry._call = bound
        assert check() == -1


def test_method_entry_calls_a_cached_method(pkg: types.ModuleType, evaluator: Any) -> None:
    """An ``lru_cache`` method is found by its class's path (it was refused as a function the
    instance holds); replacing it is noticed."""
    check = Checker(pkg.Cached.forward, evaluator, self_obj=pkg.CACHED)
    assert check() == -1
    pkg.Cached.factor = functools.cache(lambda self: 3.0)
    assert "self.factor.__wrapped__ was replaced" in check.explain(check())


def test_method_entry_reads_the_code_of_a_method_of_its_instance(
    pkg: types.ModuleType, evaluator: Any
) -> None:
    """diffusers' ``Attention.forward`` asks ``inspect.signature(self.processor.__call__)``:
    Dynamo guards that method's code, which the check binds before any call, so from the
    class (it was refused: the check, bound without an instance, failed on the build's own
    state). Replacing the method is noticed."""
    check = Checker(pkg.Attending.forward, evaluator, self_obj=pkg.ATTENDING)
    assert check() == -1
    pkg.Processor.__call__ = lambda self, x, scale=1.0, temb=None: x * 5
    assert "type(self.processor).__call__ was replaced" in check.explain(check())


def test_an_undone_change_passes_again(pkg: types.ModuleType, evaluator: Any) -> None:
    check = Checker(pkg.namespace, evaluator)
    assert check() == -1
    pkg.NS.scale = 3.0
    assert check() != -1
    pkg.NS.scale = 1.5
    assert check() == -1


def test_method_entry_guards_its_instance(pkg: types.ModuleType, evaluator: Any) -> None:
    """``self``'s structure and class attributes read through ``type(self)``: another instance
    of the same structure passes, a changed class attribute or instance does not."""
    check = Checker(pkg.Gate.forward, evaluator, self_obj=pkg.GATE)
    assert check() == -1
    paths = {check.tree.path(i).label() for i, _ in check.tree.checks()}
    assert {"type(self).BIAS", "self.lin.weight", "type(self.lin).forward"} <= paths
    check.self_obj = other = pkg.Gate().eval()
    check.weights = tuple(check.python.gather(other))
    assert check() == -1
    other.lin.bias = None
    assert "self.lin" in check.explain(check())


def test_every_capture_records_afresh(pkg: types.ModuleType) -> None:
    """Dynamo keeps, per process, a handler per builtin call that holds the method it found
    when first made: a build captures many entries in one process, and each must still record
    what it reads through builtins (an ``isinstance`` test against an ABC, ``callable``)."""
    for _ in range(2):
        assert "isinstance" in {c.kind for _, c in tree_of(pkg.abc_instance).checks()}
        tree = tree_of(pkg.class_protocol)
        assert ("type(guard_pkg.state.PLAIN)", "defines") in {
            (tree.path(i).label(), c.kind) for i, c in tree.checks()
        }


def test_method_entry_reads_properties_and_classmethods_through_self(
    pkg: types.ModuleType, evaluator: Any
) -> None:
    """A property's getter and a classmethod's function, found through ``type(self)``, are
    known by where their class holds them (they were refused: found by their code, bound
    without a ``self``); the class attribute they read and the property itself are checked."""
    check = Checker(pkg.Scaled.forward, evaluator, self_obj=pkg.SCALED)
    assert check() == -1
    pkg.Scaled.base = 3.0
    assert "type(self).base is float 3.0, compiled for float 2.0" in check.explain(check())
    pkg.Scaled.base = 2.0
    assert check() == -1
    pkg.Scaled.factor = property(lambda self: 5.0)
    assert "type(self).factor" in check.explain(check())


def test_method_entry_calls_a_decorated_forward(pkg: types.ModuleType, evaluator: Any) -> None:
    """A submodule whose ``forward`` is decorated (its code is found through the wrapper's
    closure) is checked by its import path (``Decorated.forward.__wrapped__``), as a method
    entry's shim binds before any call (it was refused: found through ``self``); a hook lambda
    the instance holds is refused, naming it."""
    check = Checker(pkg.Wrapper.forward, evaluator, self_obj=pkg.WRAPPER)
    assert check() == -1
    original = pkg.Decorated.forward.__wrapped__.__code__
    pkg.Decorated.forward.__wrapped__.__code__ = (lambda self, x: self.lin(x) + 1).__code__
    explained = check.explain(check())
    assert "forward.__closure__[0].cell_contents.__code__ was replaced (a reload?)" in explained
    pkg.Decorated.forward.__wrapped__.__code__ = original
    assert check() == -1
    with pytest.raises(CaptureError) as info:
        capture(pkg.Wrapper.forward, pkg.HOOKED, (X,), "guard_pkg.state:Wrapper.forward")
    assert "self.block._forward_pre_hooks[" in str(info.value) and "a lambda or local function" in str(
        info.value
    )


def test_weights_gathered_by_node_are_those_at_their_paths(pkg: types.ModuleType, evaluator: Any) -> None:
    """gather reads each shared prefix once and finds the tensors that resolving every
    weight's first path finds; when a path breaks, its PathError names the step."""
    check = Checker(pkg.Gate.forward, evaluator, self_obj=pkg.GATE)
    paths = check.python.weight_paths()
    assert len(paths) >= 2  # the weight and the bias share the prefix self.lin
    assert check.python.weight_nodes == check.python.tree.weight_nodes()  # found while binding
    by_path = [resolve(p[0], pkg.GATE, pkg.Gate.forward) for p in paths]
    gathered = check.python.gather(pkg.GATE)
    assert len(gathered) == len(by_path) and all(a is b for a, b in zip(gathered, by_path, strict=True))
    other = pkg.Gate().eval()
    del other.lin
    with pytest.raises(PathError) as err:
        check.python.gather(other)
    with pytest.raises(PathError) as by_resolve:
        resolve(paths[0][0], other, pkg.Gate.forward)
    assert str(err.value) == str(by_resolve.value)
    assert check.python.weight_labels() == [p[0].label() for p in paths]
    native = BoundState(check.tree, pkg.Gate.forward, evaluator)  # reads them in C
    by_c = native.gather(pkg.GATE)
    assert len(by_c) == len(by_path) and all(a is b for a, b in zip(by_c, by_path, strict=True))
    with pytest.raises(PathError) as err_c:
        native.gather(other)
    assert str(err_c.value) == str(by_resolve.value)
    with pytest.raises(TypeError):
        evaluator.Evaluator(native.program).read(pkg.GATE, [0])  # nodes: a tuple
    with pytest.raises(IndexError):
        evaluator.Evaluator(native.program).read(pkg.GATE, (len(native.program),))


REFUSED = [
    (
        "cached_stale",
        "guard_pkg.state.stale_helper() is float 2.0, compiled for float 3.0: the functools.lru_cache helper",
        "clear its cache (cache_clear()) where that state changes",
    ),
    (
        "cached_object",
        "calls guard_pkg.state.cached_settings(2), a functools.lru_cache helper whose answer is no plain "
        "value or tensor",
        "compute it at import into a module global (VALUE = cached_settings(...))",
    ),
    (
        "singleton",
        "calls Only(), whose metaclass guard_pkg.state.Singleton defines its own __call__",
        "make the object at import and read it from a module global",
    ),
    (
        "numpy_array",
        "reads the numpy array guard_pkg.state.NP_TABLE (4,) float32",
        "torch.from_numpy(array) at import",
    ),
    ("side_effect", "changes Python state when it runs", "keep the function free of side effects"),
    ("set_and_left", "G['COLLECTOR']", "keep the function free of side effects"),
    ("dict_getattr", "non-function __getattr__", "becomes config['key']"),
    (
        "local_class",
        "guard_pkg.state.LOCAL is an instance of _local_instance.<locals>.Local",
        "define the class at module level",
    ),
    ("keyed_by_object", "an item keyed by <weakref", "key the mapping by a plain value"),
    (
        "optional_kernels",
        "calls importlib.util.find_spec(...), which torch.compile's tracer answers while building",
        "call it outside the entry and pass the result as an argument",
    ),
    ("warns", "calls warnings.warn(...) on the path the build traced", "warn outside the entry"),
    (
        "class_subscript",
        "subscripts guard_pkg.state.Lookup, whose __class_getitem__ (written in Python)",
        "hold the table in a module-level dict and index that",
    ),
    (
        "logs_warning",
        "logs through logger 'guard_pkg.state' at level WARNING, which is on",
        "log outside the entry, or at a level that is off while the package is built",
    ),
    (
        "root_logs_warning",
        "calls logging.warning(...), which logs through the root logger at level WARNING, which is on",
        "log outside the entry, or at a level that is off while the package is built",
    ),
    (
        "dispatched_abstract",
        "calls the functools.singledispatch function guard_pkg.state.size_of, whose registry holds "
        "abstract base classes (Sized)",
        "register the concrete classes the function is called with",
    ),
    (
        "enum_missing",
        "calls guard_pkg.state.Loose(7), which the enum answers other than from its table",
        "use the member itself (Loose.NAME)",
    ),
    (
        "skip_set_loop",
        "relies on the order in which the set guard_pkg.state.SKIP_TYPES iterates; it holds classes",
        "hold the classes in a tuple or a list",
    ),
]


@pytest.mark.parametrize(("fn", "what", "fix"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_cannot_be_carried_is_refused_with_the_fix(
    pkg: types.ModuleType, fn: str, what: str, fix: str
) -> None:
    with pytest.raises(CaptureError) as info:
        capture(getattr(pkg, fn), None, (X,), f"guard_pkg.state:{fn}")
    assert what in str(info.value) and fix in str(info.value)
    assert str(info.value).startswith(f"guard_pkg.state:{fn}: ")


def test_logging_through_the_root_logger_without_a_handler_is_refused(pkg: types.ModuleType) -> None:
    """``logging.debug(...)`` configures logging (``logging.basicConfig()``) where the root
    logger has no handler, which a compiled call cannot: a build that traces it then refuses."""
    handlers = _Patched(logging.root, "handlers", [])
    try:
        with pytest.raises(CaptureError) as info:
            capture(pkg.root_logs_debug, None, (X,), "guard_pkg.state:root_logs_debug")
    finally:
        handlers.remove()
    assert "calls logging.debug(...) while the root logger has no handler" in str(info.value)
    assert "LOG = logging.getLogger(__name__)" in str(info.value)


def test_a_trace_under_deterministic_algorithms_is_refused(pkg: types.ModuleType) -> None:
    """The shim runs artifacts only while deterministic algorithms are off (a function may read
    the setting, and eager picks other kernels under it): a build tracing with them on (a
    package that turns them on at import) would compile the other branch."""
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(CaptureError) as info:
            capture(pkg.namespace, None, (X,), "guard_pkg.state:namespace")
    finally:
        torch.use_deterministic_algorithms(False)
    assert "deterministic algorithms are on while the build traces it" in str(info.value)
    assert "not at import" in str(info.value)
    capture(pkg.namespace, None, (X,), "guard_pkg.state:namespace")  # off again: traced


def test_numpy_data_held_as_a_tensor_is_a_weight(pkg: types.ModuleType) -> None:
    captured = capture(pkg.numpy_held_as_tensor, None, (X,), "t")
    ((paths, tensor),) = captured.weights
    assert [p.label() for p in paths] == ["guard_pkg.state.NP_TENSOR"] and tensor is pkg.NP_TENSOR


def test_a_tensor_read_through_two_paths_is_one_weight(pkg: types.ModuleType) -> None:
    captured = capture(pkg.other_module, None, (X,), "t")
    ((paths, tensor),) = captured.weights
    assert sorted(p.label() for p in paths) == ["guard_pkg.state.SCALE", "guard_pkg.state.helpers.SCALE"]
    assert tensor is pkg.SCALE


def test_a_weight_read_through_two_paths_that_part_is_named(pkg: types.ModuleType, evaluator: Any) -> None:
    check = Checker(pkg.other_module, evaluator)
    first, second = check.tree.weight_paths()[0]
    assert check() == -1
    undo = assign(second, torch.ones(4), None, pkg.other_module)
    try:
        code = check()
        assert check.python.is_weight(code)
        check.weights = tuple(check.python.gather(None))  # read again: the first path's tensor
        code = check()
        assert check.python.explain(code, None, check.weights) == (
            f"weight {second.label()} is no longer the same tensor as {first.label()} "
            "(one tensor when compiled)"
        )
    finally:
        undo()
    assert check() == -1


def test_capture_leaves_nothing_behind(pkg: types.ModuleType) -> None:
    from torch._dynamo.variables.dicts import ConstDictVariable

    before = dict(vars(pkg))
    method = ConstDictVariable.getitem_const_raise_exception_if_absent
    capture(pkg.module_call, None, (X,), "t")
    assert dict(vars(pkg)) == before  # Dynamo's installed globals are removed
    assert ConstDictVariable.getitem_const_raise_exception_if_absent is method


def test_replaced_weight_fails_its_weight_check(pkg: types.ModuleType, evaluator: Any) -> None:
    check = Checker(pkg.module_call, evaluator)
    assert check() == -1
    pkg.GATE.lin.weight = torch.nn.Parameter(torch.randn(4, 4))
    code = check()
    assert check.python.is_weight(code) and check.native.is_weight(code)
    check.weights = tuple(check.python.gather(None))  # the shim reads the weights again
    assert check() == -1


# ---------------------------------------------------------------- the C evaluator's snapshot


class Holder:
    LIMIT = 2

    def __init__(self) -> None:
        self.items = [1, 2]
        self.value = 1.0
        self._hidden = 3
        # as nn.Module keeps its hooks: an OrderedDict whose length and keys are guarded
        self.hooks: OrderedDict[str, int] = OrderedDict(h=1)
        self.order: OrderedDict[str, int] = OrderedDict(a=1, b=2)
        self.table = {"a": 1, "b": "x"}  # values that cannot change: the dict's tag covers them
        self.nested = {"a": [1]}  # a list inside: its changes touch no dict tag

    @property
    def computed(self) -> int:
        return self._hidden


HOLDER = Holder()
CELL_VALUE = 1.0


def _cell_fn() -> Callable[[], float]:
    v = CELL_VALUE

    def get() -> float:
        return v

    return get


CELLED = _cell_fn()
G = ObjPath(("global", __name__, "HOLDER"))
TREE_CHECKS = [
    (G, Check("type", f"{__name__}:Holder")),
    (G.child("getattr", "value"), Check("eq", 1.0)),
    (G.child("getattr", "items").child("index", 0), Check("eq", 1)),
    (G.child("getattr", "items"), Check("len", 2)),
    (G.child("getattr", "computed"), Check("eq", 3)),
    (G.child("getattr", "LIMIT"), Check("eq", 2)),
    (G.child("dict"), Check("lacks", "LIMIT")),
    (G.child("getattr", "hooks"), Check("len", 1)),
    (G.child("getattr", "hooks"), Check("lacks", "k")),
    (G.child("getattr", "hooks"), Check("has", "h")),
    (G.child("getattr", "order"), Check("keys", encode(["a", "b"]))),
    # keys by position in a dict subclass: its keys() read once per check for both
    (G.child("getattr", "order").child("key", 0), Check("eq", "a")),
    (G.child("getattr", "order").child("key", 1), Check("eq", "b")),
    (G.child("getattr", "table"), Check("eq", encode({"a": 1, "b": "x"}))),
    (G.child("getattr", "nested"), Check("eq", encode({"a": [1]}))),
    (
        ObjPath(("global", __name__, "CELLED"))
        .child("closure")
        .child("index", 0)
        .child("getattr", "cell_contents"),
        Check("eq", 1.0),
    ),
]
#: Changes the dict tags see, and changes they do not (volatile nodes and checks must).
SNAPSHOT_CHANGES: list[tuple[str, Callable[[], Any]]] = [
    ("attribute set", lambda: setattr(HOLDER, "value", 2.0)),
    ("instance dict replaced", lambda: setattr(HOLDER, "__dict__", {**HOLDER.__dict__, "value": 2.0})),
    ("class changed", lambda: setattr(HOLDER, "__class__", type("Other", (Holder,), {}))),
    ("class attribute set", lambda: setattr(Holder, "LIMIT", 3)),
    ("class attribute shadowed", lambda: setattr(HOLDER, "LIMIT", 3)),
    ("list item changed", lambda: HOLDER.items.__setitem__(0, 5)),
    ("list grown", lambda: HOLDER.items.append(3)),
    ("property's source changed", lambda: setattr(HOLDER, "_hidden", 4)),
    ("closure cell changed", lambda: setattr(CELLED.__closure__[0], "cell_contents", 2.0)),  # type: ignore[index]
    ("property replaced", lambda: setattr(Holder, "computed", property(lambda self: 9))),
    ("ordered dict grown", lambda: HOLDER.hooks.__setitem__("k", 2)),
    ("ordered dict emptied", lambda: HOLDER.hooks.clear()),
    ("ordered dict item popped", lambda: HOLDER.hooks.popitem()),
    ("ordered dict item replaced by another key", lambda: (HOLDER.hooks.clear(), HOLDER.hooks.update(z=1))),
    ("ordered dict reordered", lambda: HOLDER.order.move_to_end("a")),
    ("dict item changed", lambda: HOLDER.table.__setitem__("a", 2)),
    ("two dict items changed", lambda: HOLDER.table.update(a=5, b="y")),
    ("list inside a dict changed", lambda: HOLDER.nested["a"].append(2)),
]


def snapshot_tree(checks: list[tuple[ObjPath, Check]]) -> StateTree:
    """A tree of ``checks`` (paths under this module)."""
    from aot_build.guards.tree import TreeBuilder

    b = TreeBuilder()
    for path, c in checks:
        b.add(path, c)
    return b.tree()


@pytest.mark.parametrize("change", [c[1] for c in SNAPSHOT_CHANGES], ids=[c[0] for c in SNAPSHOT_CHANGES])
def test_the_snapshot_notices_every_change(evaluator: Any, change: Callable[[], Any]) -> None:
    global HOLDER, CELLED
    saved = (HOLDER, CELLED, Holder.LIMIT, Holder.__dict__["computed"])
    HOLDER, CELLED = Holder(), _cell_fn()
    try:
        tree = snapshot_tree(TREE_CHECKS)
        state = BoundState(tree, test_the_snapshot_notices_every_change, evaluator)
        assert state.check(None, ()) == -1 and state.check(None, ()) == -1
        assert state._native.stats()["fast_hits"] >= 1  # type: ignore[union-attr]
        change()
        assert state.check(None, ()) != -1
        assert state.check(None, ()) == BoundState(tree, len, None).check(None, ())
    finally:
        HOLDER, CELLED = saved[0], saved[1]
        Holder.LIMIT = saved[2]  # type: ignore[misc]
        Holder.computed = saved[3]  # type: ignore[method-assign]


def test_the_snapshot_stamps_what_dict_tags_cover(evaluator: Any) -> None:
    """An OrderedDict's length and members (nn.Module's hook tables, checked on every module)
    and a plain dict of values that cannot change ride on the dict's version tag: no check
    of theirs runs again while the tags hold. Its key order and a dict holding a list do not
    (move_to_end and a list's append change no tag): those checks run on every call."""
    global HOLDER
    saved = HOLDER
    HOLDER = Holder()
    try:

        def on(*attrs: str) -> list[tuple[ObjPath, Check]]:
            return [(p, c) for p, c in TREE_CHECKS if p.steps[-1:] in [(("getattr", a),) for a in attrs]]

        covered, volatile = on("hooks", "table"), on("order", "nested")
        assert len(covered) == 4 and len(volatile) == 2
        for checks, want in ((covered, 0), (volatile, 2)):
            state = BoundState(
                snapshot_tree(checks), test_the_snapshot_stamps_what_dict_tags_cover, evaluator
            )
            assert state.check(None, ()) == -1 and state.check(None, ()) == -1
            stats = state._native.stats()  # type: ignore[union-attr]
            assert stats["fast_hits"] == 1 and stats["volatile"] == want, stats
    finally:
        HOLDER = saved


@pytest.mark.parametrize(
    ("program", "error"),
    [
        ([[-1, 0, 1, ()]], TypeError),  # a node as a list
        ([(-1, 0, 1)], TypeError),  # three items
        ([("-1", 0, 1, ())], TypeError),  # a parent that is not an int
        ([(-1, 0, 1, [])], TypeError),  # checks as a list
        ([(-1, 0, 1, ((0, 3),))], TypeError),  # a check of two items
        ([(-1, 0, 1, ((0, "3", 1),))], TypeError),  # an opcode that is not an int
        ([(-1, 0, 1, ((0, 99, 1),))], ValueError),  # an unknown check
        ([(0, 10, "x", ())], ValueError),  # its own parent
        ([(-1, 0, 1, ((0, 9, 5),))], ValueError),  # same as a missing node
    ],
)
def test_a_malformed_program_is_refused(evaluator: Any, program: list[Any], error: type[Exception]) -> None:
    """The evaluator checks the program it is given (a damaged record falls back, never crashes)."""
    with pytest.raises(error):
        evaluator.Evaluator(program)


def test_reads_through_a_traced_getattribute_ride_on_tags(pkg: types.ModuleType, evaluator: Any) -> None:
    """A config whose attribute reads run Python (transformers' PretrainedConfig aliases names
    in its ``__getattribute__``): the build checks that its class still runs the function Dynamo
    traced, whose own reads are guarded, so the C evaluator's snapshot fixes those reads by the
    object's dict and class and calls none of them again while the tags hold. A tree without
    that check (a wheel built before it) re-reads them on every call."""
    pkg.aliased_config(X)
    check = Checker(pkg.aliased_config, evaluator)
    assert check() == -1

    def reread(state: BoundState) -> set[str]:
        return {state.tree.path(node).label() for node, _, _ in state._native.volatile()}  # type: ignore[union-attr]

    assert check.stats()["fast_hits"] >= 1
    assert not {label for label in reread(check.native) if "ALIASED" in label}, reread(check.native)
    tree = check.tree
    pinned = [i for i in range(len(tree.nodes)) if tree.path(i).label().endswith(".__getattribute__")]
    assert pinned, "the build checks the __getattribute__ it traced"
    nodes = [n._replace(checks=()) if i in pinned else n for i, n in enumerate(tree.nodes)]
    older = StateTree(nodes, tree.weights)
    state = BoundState(older, pkg.aliased_config, evaluator)
    assert state.check(None, ()) == -1 and state.check(None, ()) == -1
    assert {"guard_pkg.state.ALIASED.hidden", "guard_pkg.state.ALIASED"} <= reread(state)
    # a class that also has a __getattr__ (run on a miss, which Dynamo may not have followed)
    pkg.AliasConfig.__getattr__ = _no_attribute
    assert check() == -1  # the class changed: walked in full again, then snapshot
    assert {"guard_pkg.state.ALIASED.hidden", "guard_pkg.state.ALIASED"} <= reread(check.native)


def test_evaluators_agree_under_random_changes(pkg: types.ModuleType, evaluator: Any) -> None:
    """A random walk of changes and undos over one function reading many kinds of state:
    the C evaluator (snapshot included) answers exactly as the Python one, every step."""
    fns = [pkg.module_call, pkg.mixed_dict, pkg.partial, pkg.namespace, pkg.attr_dict, pkg.closure]
    fns.append(pkg.aliased_config)
    checks = [Checker(f, evaluator) for f in fns]
    moves: list[Callable[[], Any]] = [
        lambda: setattr(pkg.Gate, "BIAS", random.choice([0.5, 1.0])),
        lambda: setattr(pkg.GATE, "training", random.choice([False, True])),
        lambda: pkg.MIXED.__setitem__("alpha", random.choice([0.5, 0.7])),
        lambda: pkg.CLAMP.keywords.__setitem__("min", random.choice([-1.0, 0.0])),
        lambda: setattr(pkg.NS, "scale", random.choice([1.5, 2.5])),
        lambda: pkg.CFG.__setitem__("shift", random.choice([0.25, 0.5])),
        lambda: pkg.SET_Z(random.choice([2.0, 3.0])),
        lambda: setattr(pkg.GATE.lin, "in_features", random.choice([4, 5])),
        lambda: setattr(pkg.ALIASED, "width", random.choice([2.0, 3.0])),
        lambda: setattr(pkg, "ALIAS_GAIN", random.choice([1.0, 2.0])),
        lambda: pkg.AliasConfig.attribute_map.__setitem__("gain", random.choice(["_gain", "hidden"])),
        lambda: vars(pkg.ALIASED).update(extra=1),
        lambda: vars(pkg.ALIASED).pop("extra", None),
        lambda: None,
    ]
    rng = random.Random(7)
    random.seed(7)
    for _ in range(300):
        rng.choice(moves)()
        for c in checks:
            c()  # asserts both evaluators agree (twice: walk, then snapshot)


# ---------------------------------------------------------------- paths


class Obj:
    def __init__(self) -> None:
        self.items = [torch.zeros(1)]
        self.mod = torch.nn.Linear(2, 2)


OBJ = Obj()


def test_paths_resolve_assign_label_and_round_trip() -> None:
    root = ObjPath(("global", __name__, "OBJ"))
    weight = root.child("getattr", "mod").child("getattr", "_parameters").child("item", "weight")
    assert resolve(weight) is OBJ.mod.weight
    assert weight.label() == f"{__name__}.OBJ.mod.weight"
    other = torch.ones(2, 2)
    restore = assign(weight, other)
    assert OBJ.mod.weight is other
    restore()
    assert resolve(weight) is not other
    assert resolve(root.child("getattr", "items").child("index", 0)) is OBJ.items[0]
    with pytest.raises(PathError, match="no 'nope'"):
        resolve(root.child("getattr", "nope"))
    typed = root.child("type").child("getattr", "__init__").child("code")
    assert typed.label() == f"type({__name__}.OBJ).__init__.__code__"
    assert resolve(typed) is Obj.__init__.__code__
    assert ObjPath.from_json(weight.to_json()) == weight
    keyed = root.child("getattr", "d").child("item", (1, b"x"))
    assert ObjPath.from_json(keyed.to_json()) == keyed


def test_code_fingerprint_ignores_the_install_path() -> None:
    code = compile("def f(x):\n    return x + 1\n", "/site-packages/a.py", "exec").co_consts[0]
    moved = compile("def f(x):\n    return x + 1\n", "/tmp/build/a.py", "exec").co_consts[0]
    changed = compile("def f(x):\n    return x + 2\n", "/tmp/build/a.py", "exec").co_consts[0]
    assert code_fingerprint(code) == code_fingerprint(moved) != code_fingerprint(changed)


def test_read_failures_name_the_missing_step(pkg: types.ModuleType, evaluator: Any) -> None:
    check = Checker(pkg.ordered_dict, evaluator)
    del pkg.OD["gain"]
    code = check()
    assert code >= READ_FAILED and "guard_pkg.state.OD['gain'] no longer exists" in check.explain(code)


def test_the_evaluator_source_is_in_the_build_fingerprint() -> None:
    """The build cache and the no-change reuse key on aot_build's build-side sources: a changed
    evaluator must not be shipped from an older development build's output."""
    from aot_build.compile.sources import build_side_files

    files = build_side_files()
    assert native.SOURCE.resolve() in files
    assert not any(f.parent.name == "load" for f in files)  # the run side shapes nothing built


def test_the_evaluator_is_built_reproducibly(tmp_path: Path) -> None:
    a = native.build(tmp_path)
    b = native.build(tmp_path)
    assert a == b and a.name.endswith(".so")


def test_an_attribute_set_and_put_back_is_no_side_effect(pkg: types.ModuleType, evaluator: Any) -> None:
    check = Checker(pkg.set_and_restored, evaluator)
    assert check() == -1 and pkg.COLLECTOR.active is None and pkg.COLLECTOR.compiling is False


def test_weights_read_through_weak_references_are_lifted_at_their_attributes(pkg: types.ModuleType) -> None:
    """An LSTM reads each weight at ``_flat_weight_refs[i]()`` as well: the export lifts it,
    and the shim reads it, at its attribute; the result equals eager's with nothing baked in."""
    from aot_build.compile.inputs import input_sets
    from aot_build.compile.trace import trace
    from aot_build.decorate.entry import aot_entry

    captured = capture(pkg.lstm, None, (X,), "t")
    assert len(captured.weights) == 4
    for paths, _ in captured.weights:
        assert paths[0].steps[-1][0] != "call" and any(p.steps[-1][0] == "call" for p in paths)
    entry = aot_entry(example_inputs=lambda: (X,))(pkg.lstm)
    (iset,) = input_sets(entry, "t")
    traced = trace(pkg.lstm, iset, "cpu", "t")
    assert not traced.ep.constants and len(traced.lifted.tensors) == 4
    got = traced.ep.module()((X,), tuple(traced.lifted.tensors))[0]
    assert torch.allclose(got, pkg.lstm(X), atol=1e-6)


def test_a_named_tuple_made_inside_is_traced(pkg: types.ModuleType, evaluator: Any) -> None:
    check = Checker(pkg.named_tuple, evaluator)
    assert check() == -1  # the exec-made __new__'s globals are not guarded (no path finds them)


def test_a_tensor_held_in_a_closure_cell_is_a_weight(pkg: types.ModuleType, evaluator: Any) -> None:
    """Read through the cell on every call: a new tensor put there is the one passed."""
    check = Checker(pkg.closure_tensor, evaluator)
    ((path,),) = check.tree.weight_paths()
    assert path.label() == "guard_pkg.state.SCALE_OF.__closure__[0].cell_contents"
    assert check() == -1
    pkg.SCALE_OF.__closure__[0].cell_contents = torch.ones(4)
    code = check()
    assert check.python.is_weight(code)
    check.weights = tuple(check.python.gather(None))
    assert check() == -1 and check.weights[0] is pkg.SCALE_OF.__closure__[0].cell_contents


def test_checks_shared_between_nodes_keep_their_types() -> None:
    """The parser makes a check with a plain expectation once per tree: ``1``, ``True`` and
    ``1.0`` are equal in Python and must stay three checks, each of its own type."""
    nodes: list[Any] = [[-1, "global", [__name__, "OBJ"], []]]
    expects = [1, True, 1.0, 0, False, None, "1", 1, True]
    for i, e in enumerate(expects):
        nodes.append([0, "getattr", f"a{i}", [["eq", e]]])
    nodes.append([0, "getattr", "weird", [["eq", {"tuple": [1]}]]])
    tree = StateTree.from_json({"nodes": nodes, "weights": []})
    got = [n.checks[0].expect for n in tree.nodes[1 : len(expects) + 1]]
    assert [(type(g), g) for g in got] == [(type(e), e) for e in expects]
    assert tree.nodes[1].checks[0] is tree.nodes[8].checks[0]  # eq 1, twice: one check
    assert tree.nodes[2].checks[0] is tree.nodes[9].checks[0]
    assert tree.nodes[1].checks[0] is not tree.nodes[2].checks[0]  # 1 and True: two
    bound = BoundState(tree, test_checks_shared_between_nodes_keep_their_types)
    assert [type(c) for c in bound.consts[: len(expects)]] == [type(e) for e in expects]
    assert [i for i, _ in bound.flat] == list(range(1, len(nodes)))  # a code names its own node


def test_the_c_binder_uses_the_opcodes_python_defines(evaluator: Any) -> None:
    """``_evaluator.c`` names steps and check kinds by the numbers bound.py and checks.py give."""
    assert evaluator.STEP_OPS == STEP_OPS
    assert evaluator.CHECK_OPS == {name: kind.opcode for name, kind in KINDS.items()}


def test_a_record_bound_in_c_parses_no_node_objects(pkg: types.ModuleType, evaluator: Any) -> None:
    """The shim's first call: the C binder reads the record's JSON lists; the tree's Python
    nodes are made only when a failure is explained, and then name the same path."""
    tree = tree_of(pkg.module_call)
    record = StateTree.from_json(json.loads(json.dumps(tree.to_json())))
    state = BoundState(record, pkg.module_call, evaluator)
    weights = tuple(state.gather(None))
    assert state.check(None, weights) == -1 and state.check(None, weights) == -1
    assert record._nodes is None  # nothing parsed
    pkg.Gate.BIAS = 1.0
    code = state.check(None, weights)
    assert record._nodes is None and not state.is_weight(code)
    assert "type(guard_pkg.state.GATE).BIAS is float 1.0" in state.explain(code, None, weights)
    assert record == tree  # parsed now, the same nodes the build made


def _malformed(mutate: Callable[[list[Any]], object]) -> list[Any]:
    nodes: list[Any] = [
        [-1, "global", [__name__, "X"], [["type", "torch:Tensor"], ["weight", 0]]],
        [0, "getattr", "shape", [["eq", {"tuple": [3, 4]}], ["len", 2]]],
        [1, "index", 0, [["eq", 3], ["hasattr", ["real", True]], ["same", 1]]],
    ]
    mutate(nodes)
    return nodes


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda n: n[1].__setitem__(0, 5), r"node 1: bad parent 5"),
        (lambda n: n[1].__setitem__(0, 1), r"node 1: bad parent 1"),
        (lambda n: n[1].__setitem__(0, True), r"node 1: bad parent True"),
        (lambda n: n[1].__setitem__(1, "eval"), r"bad path step kind 'eval'"),
        (lambda n: n[1].__setitem__(2, 3), r"bad attribute name 3"),
        (lambda n: n[2][3].append(["exec", 1]), r"node 2: unknown check kind 'exec'"),
        (lambda n: n[0][3].__setitem__(1, ["weight", 1]), r"node 0: missing weight 1"),
        (lambda n: n[0][3].__setitem__(1, ["weight", "0"]), r"node 0: bad weight index '0'"),
        (lambda n: n[0][3].pop(), r"a weight is read through no path"),
        (lambda n: n[2][3].__setitem__(2, ["same", 9]), r"node 2: same as missing node 9"),
        (lambda n: n[1][3].__setitem__(0, ["eq", {"nonsense": 1}]), r"not an encoded value"),
        (lambda n: n[0].__setitem__(2, ["os"]), r"bad path root"),
        (lambda n: n.append([0, "key", "a", []]), r"bad position 'a'"),
        (lambda n: n.append([0, "getattr"]), r"node 3: a node must be a list of 4 items"),
        (lambda n: n[1].__setitem__(3, {}), r"node 1: its checks must be a list"),
        (lambda n: n[1][3].__setitem__(0, "eq"), r"node 1: a check must be a list of 2 items"),
        (lambda n: n[2][3].__setitem__(1, ["hasattr", "ab"]), r"bad attribute expectation .ab."),
    ],
    ids=[
        "parent-ahead",
        "parent-self",
        "parent-bool",
        "step",
        "attribute",
        "kind",
        "weight-missing",
        "weight-not-int",
        "weight-unread",
        "same-missing",
        "value",
        "root",
        "position",
        "short-node",
        "checks-not-a-list",
        "check-not-a-pair",
        "hasattr-not-a-pair",
    ],
)
def test_both_binders_refuse_a_malformed_record(evaluator: Any, mutate: Any, match: str) -> None:
    """A damaged record is refused when bound, by either binder, naming the node and what is
    wrong (the shim then falls back with that reason)."""
    raw = {"nodes": _malformed(mutate), "weights": [tensor_spec(X).to_json()]}
    for native_module in (None, evaluator):
        with pytest.raises((BindError, ValueError, TypeError), match=match):
            BoundState(StateTree.from_json(json.loads(json.dumps(raw))), tree_of, native_module)


def test_an_intact_sample_record_binds_alike() -> None:
    """The record _malformed starts from binds, and both binders give the same program."""
    raw = {"nodes": _malformed(lambda n: None), "weights": [tensor_spec(X).to_json()]}
    python = BoundState(StateTree.from_json(raw), tree_of, None)
    assert python.program[1][3][0][2] == (3, 4) and python.weight_nodes == [[0]]


# ---------------------------------------------------------------- the C binder against the Python one


def _sample_nodes() -> list[Any]:
    """A record's nodes using every root, step and check kind (binding reads no object but a
    local function's code, which it finds by path)."""
    return [
        [-1, "global", [__name__, "X"], [["type", "torch:Tensor"], ["weight", 0]]],
        [0, "getattr", "shape", [["eq", {"tuple": [3, 4]}], ["len", 2]]],
        [1, "index", 0, [["eq", 3], ["hasattr", ["real", True]], ["same", 1]]],
        [-1, "ref", ["torch:nn"], [["id", {"ref": "torch:nn"}]]],
        [3, "dict", None, [["keys", {"list": ["a", 1]}], ["has", "Module"], ["lacks", {"tuple": [1]}]]],
        [4, "item", "Module", [["notnone", None], ["id", {"ref": "torch.nn:Module"}]]],
        [5, "type", None, [["eq", {"dtype": "float32"}]]],
        [6, "mro", None, []],
        [5, "getattr", "forward", []],
        [8, "code", None, [["id", {"code": {"name": "Module._wrapped_call_impl", "line": 1, "hash": "0"}}]]],
        [8, "defaults", None, []],
        [8, "kwdefaults", None, []],
        [8, "closure", None, []],
        [4, "key", 0, [["len", 1.0]]],
        [-1, "self", [], [["type", "builtins:NoneType"]]],
        [0, "call", None, []],
        [
            -1,
            "ref",
            ["torch:nn"],
            [["id", {"ref": "torch:no_such_thing"}], ["type", "no_such_module_here:T"]],
        ],
    ]


def _bound(nodes: Any, native_module: Any) -> BoundState | Exception:
    raw = {"nodes": nodes, "weights": [tensor_spec(X).to_json()]}
    try:
        return BoundState(StateTree.from_json(copy.deepcopy(raw)), _sample_nodes, native_module)
    except Exception as exc:  # the shim falls back on any of these
        return exc


def _paths_in(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths_in(v, (*prefix, i))
    elif isinstance(node, dict):
        for k, v in node.items():
            out += _paths_in(v, (*prefix, k))
    return out


_SAMPLE_PATHS = _paths_in(_sample_nodes())


def test_the_sample_record_binds_alike_in_both(evaluator: Any) -> None:
    python, native_state = _bound(_sample_nodes(), None), _bound(_sample_nodes(), evaluator)
    assert isinstance(python, BoundState) and isinstance(native_state, BoundState)
    assert same_programs(python.program, native_state.program)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(_SAMPLE_PATHS), json_values)
def test_the_c_binder_agrees_with_python_on_damaged_records(
    evaluator: Any, path: tuple[Any, ...], value: Any
) -> None:
    """One part of a valid record replaced by any JSON value: the C binder binds what the
    Python one binds, to the same program, and refuses what it refuses (never a crash)."""
    nodes = _sample_nodes()
    node = nodes
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    python, native_state = _bound(nodes, None), _bound(nodes, evaluator)
    if isinstance(python, BoundState):
        assert isinstance(native_state, BoundState), native_state
        assert same_programs(python.program, native_state.program)
        assert python.weight_nodes == native_state.weight_nodes
    else:
        assert isinstance(native_state, Exception), python


def test_an_evaluator_without_bind_binds_in_python(pkg: types.ModuleType, evaluator: Any) -> None:
    """A wheel built before the C binder ships an evaluator with ``Evaluator`` only: the tree
    read from its record is parsed and bound in Python, then checked in C, as before."""
    older = types.SimpleNamespace(Evaluator=evaluator.Evaluator)
    tree = tree_of(pkg.module_call)
    record = StateTree.from_json(json.loads(json.dumps(tree.to_json())))
    state = BoundState(record, pkg.module_call, older)
    assert state.native and record._nodes is not None  # parsed for the Python binder
    assert same_programs(state.program, BoundState(tree, pkg.module_call, None).program)
    weights = tuple(state.gather(None))
    assert state.check(None, weights) == -1
    pkg.Gate.BIAS = 1.0
    assert "type(guard_pkg.state.GATE).BIAS is float 1.0" in state.explain(
        state.check(None, weights), None, weights
    )


def test_the_fixture_module_defines_each_name_once() -> None:
    """A fixture defined twice in guard_pkg/state.py silently replaces the first (a class named
    like another made rows of other kinds fail): each top-level name is bound once."""
    import ast
    import collections

    tree = ast.parse((ROOT / "guard_pkg" / "state.py").read_text(encoding="utf-8"))
    names: collections.Counter[str] = collections.Counter()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] += 1
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] += 1
    assert [name for name, n in names.items() if n > 1] == []
