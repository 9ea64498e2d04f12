"""One function per kind of state a library author's code reads; tests/test_guards.py changes
each after "import" and checks that the guard tree notices."""

import abc
import builtins
import collections
import collections.abc
import copy
import dataclasses
import enum
import functools
import importlib.util
import inspect
import logging
import math
import os
import re
import sys
import threading
import types
import typing
import warnings
import weakref

import numpy as np
import torch
from torch import nn

from aot_build import aot_entry

from . import helpers, lazy_module
from .helpers import SCALE


# -- closures: a factory-made helper whose cell changes through nonlocal
def make_scaler(z: float) -> tuple[object, object]:
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * z

    def set_z(v: float) -> None:
        nonlocal z
        z = v

    return scale, set_z


SCALER, SET_Z = make_scaler(2.0)


def closure(x: torch.Tensor) -> torch.Tensor:
    return SCALER(x)


# -- class attributes: through the class, through type(self), a constants class
class Const:
    K = 3.0


class Gate(nn.Module):
    BIAS = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin(x)) + type(self).BIAS


GATE = Gate().eval()


def class_attribute(x: torch.Tensor) -> torch.Tensor:
    return x * Const.K


def module_call(x: torch.Tensor) -> torch.Tensor:
    return GATE(x)


# -- attribute namespaces and dict-likes
class AttrDict(dict):  # EasyDict-style: attribute reads served from the items
    def __getattr__(self, key: str) -> object:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


NS = types.SimpleNamespace(scale=1.5)
CFG = AttrDict(shift=0.25)
OD = collections.OrderedDict(gain=1.0)
MIXED = {"net": nn.Linear(4, 4), "alpha": 0.5}
FLAGS = {"clip"}


def namespace(x: torch.Tensor) -> torch.Tensor:
    return x * NS.scale


def attr_dict(x: torch.Tensor) -> torch.Tensor:
    return x + CFG.shift


def ordered_dict(x: torch.Tensor) -> torch.Tensor:
    return x * OD["gain"]


def mixed_dict(x: torch.Tensor) -> torch.Tensor:
    return MIXED["net"](x) * MIXED["alpha"]


def flag_set(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-1, 1) if "clip" in FLAGS else x


# -- a config whose attribute reads run Python (transformers' PretrainedConfig: aliases)
ALIAS_GAIN = 1.0  # read by the config's __getattribute__ itself
ALIAS_EXTRA = False  # read by it for one name only, which the function tests with hasattr


class AliasConfig:
    attribute_map: typing.ClassVar[dict[str, str]] = {"width": "hidden", "gain": "_gain"}

    def __init__(self) -> None:
        self.hidden = 2.0
        self._gain = 0.5

    def __getattribute__(self, key: str) -> object:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        if key == "extra" and ALIAS_EXTRA:
            return 1
        value = super().__getattribute__(key)
        return value * ALIAS_GAIN if key == "_gain" else value

    def __setattr__(self, key: str, value: object) -> None:
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        super().__setattr__(key, value)


ALIASED = AliasConfig()


def aliased_config(x: torch.Tensor) -> torch.Tensor:
    y = x * ALIASED.width + ALIASED.gain
    return y + 1 if hasattr(ALIASED, "extra") else y


# -- numpy
NP_SCALE = np.float32(2.0)
NP_TABLE = np.linspace(0.0, 1.0, 4, dtype=np.float32)
NP_TENSOR = torch.from_numpy(NP_TABLE)  # shares the array's memory: a weight


def numpy_scalar(x: torch.Tensor) -> torch.Tensor:
    return x * NP_SCALE


# numpy arithmetic, which the compiled code computes as torch's: numpy's error state decides
# whether the function run as Python raises where it overflows (np.seterr(all="raise"))
NP_HALF = np.float32(0.5)


def numpy_arithmetic(x: torch.Tensor) -> torch.Tensor:
    return x * float(NP_HALF * np.float32(4.0))


def numpy_array(x: torch.Tensor) -> torch.Tensor:
    return x + torch.from_numpy(NP_TABLE)


def numpy_held_as_tensor(x: torch.Tensor) -> torch.Tensor:
    return x + NP_TENSOR


# -- registries of functions, partials, enums
ACTS = {"gelu": torch.nn.functional.gelu, "relu": torch.relu}
CLAMP = functools.partial(torch.clamp, min=-1.0)


class Mode(enum.Enum):
    FAST = 1
    EXACT = 2


MODE = Mode.FAST


# an enum's member looked up by value (Shade(1)) or by name (Shade["DARK"]): Python answers from
# the enum's tables of members (_value2member_map_, _member_map_)
class Shade(enum.Enum):
    LIGHT = 1
    DARK = 2


def enum_lookup(x: torch.Tensor) -> torch.Tensor:
    return x * Shade(1).value + Shade["DARK"].value


class Loose(enum.Enum):
    ONE = 1

    @classmethod
    def _missing_(cls, value: object) -> "Loose":
        return cls.ONE


def enum_missing(x: torch.Tensor) -> torch.Tensor:
    return x * Loose(7).value


def registry(x: torch.Tensor) -> torch.Tensor:
    return ACTS["gelu"](x)


def partial(x: torch.Tensor) -> torch.Tensor:
    return CLAMP(x)


def enum_flag(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if MODE is Mode.FAST else x


# -- functools.singledispatch on a class of the package: its registry and the function found
class Circle:
    def __init__(self, r: float) -> None:
        self.r = r


class Square:
    side = 2.0


@functools.singledispatch
def area(shape: object) -> float:
    return 0.0


@area.register
def _circle_area(shape: Circle, scale: float = 3.0) -> float:
    return scale * shape.r * shape.r


SHAPE = Circle(0.5)


def dispatched(x: torch.Tensor) -> torch.Tensor:
    return x * area(SHAPE)


@functools.singledispatch
def size_of(obj: object) -> float:
    return 1.0


@size_of.register(collections.abc.Sized)
def _sized(obj: typing.Any) -> float:
    return float(len(obj))


SIZED = (1, 2, 3)


def dispatched_abstract(x: torch.Tensor) -> torch.Tensor:
    return x * size_of(SIZED)  # Sized.register(cls) may change the answer for another class


# -- the environment
def environment(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if os.environ.get("GUARD_PKG_SHIFT") == "1" else x


# -- values computed once and cached
CACHE_K = 4.0


@functools.lru_cache
def cached_helper(n: int) -> float:
    return n * CACHE_K


_LAZY: dict[int, float] = {}


def lazy(k: int) -> float:
    if k not in _LAZY:
        _LAZY[k] = k * Const.K
    return _LAZY[k]


def cached(x: torch.Tensor) -> torch.Tensor:
    return x * cached_helper(2)


@functools.lru_cache
def cached_scales(n: int) -> list[float]:  # a mutable answer: the list the cache holds
    return [CACHE_K] * n


def cached_list(x: torch.Tensor) -> torch.Tensor:
    a, b = cached_scales(2)
    return x * a + b


@functools.cache
def cached_table(n: int) -> torch.Tensor:
    return torch.full((n,), CACHE_K)


def cached_tensor(x: torch.Tensor) -> torch.Tensor:  # the tensor cached: checked equal to a fresh one
    return x * cached_table(4)


class CachedSettings:
    def __init__(self, scale: float) -> None:
        self.scale = scale


@functools.cache
def cached_settings(n: int) -> CachedSettings:
    return CachedSettings(CACHE_K * n)


def cached_object(x: torch.Tensor) -> torch.Tensor:  # refused: Python uses the object cached
    return x * cached_settings(2).scale


STALE = {"k": 2.0}


@functools.lru_cache
def stale_helper() -> float:
    return STALE["k"]


stale_helper()  # filled at import, then the state it reads changes: Python answers 2.0
STALE["k"] = 3.0


def cached_stale(x: torch.Tensor) -> torch.Tensor:  # refused: its every call would run as Python
    return x * stale_helper()


# -- modules imported by the function's body (Python imports through sys.modules on each call)
def imports_from(x: torch.Tensor) -> torch.Tensor:
    from .helpers import FACTOR

    return x * FACTOR


def imports_dotted(x: torch.Tensor) -> torch.Tensor:
    import guard_pkg.helpers

    return x * guard_pkg.helpers.FACTOR


def lazily_filled(x: torch.Tensor) -> torch.Tensor:
    return x * lazy(3)


# -- globals of another module, tensors through two paths, helpers, hooks
def other_module(x: torch.Tensor) -> torch.Tensor:
    return x * helpers.FACTOR + helpers.SCALE * SCALE


def plain_helper(x: torch.Tensor) -> torch.Tensor:
    return _double(x)


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


# -- what cannot be carried to the user's machine (refused at build)
COUNTER = {"calls": 0}


def side_effect(x: torch.Tensor) -> torch.Tensor:
    COUNTER["calls"] += 1
    return x * 2


class Lazy:
    """A proxy whose missing attributes come from a registry (its ``__getattr__``)."""

    def __getattr__(self, name: str) -> float:
        return LAZY_REG[name]


LAZY_REG = {"k": 2.0}
LAZY = Lazy()


def lazy_attribute(x: torch.Tensor) -> torch.Tensor:
    return x * LAZY.k


_TABLE = {"k": 2.0}
TABLE = types.MappingProxyType(_TABLE)  # a read-only view of a dict


def mapping_proxy(x: torch.Tensor) -> torch.Tensor:
    return x * TABLE["k"]


class Scaler:
    def __init__(self) -> None:
        self.k = 2.0

    def scale_by(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


SCALE_BY = Scaler().scale_by  # a bound method held in a global


def bound_method(x: torch.Tensor) -> torch.Tensor:
    return SCALE_BY(x)


LAYERS = collections.ChainMap({"k": 2.0}, {"j": 1.0})


def chain_map(x: torch.Tensor) -> torch.Tensor:
    return x * LAYERS["k"]


def chain_map_len(x: torch.Tensor) -> torch.Tensor:
    return x * len(LAYERS)  # ChainMap.__len__: len(set().union(*self.maps))


# -- a function made by exec() with globals of its own (no module's), read through the function
_GENERATED: dict[str, typing.Any] = {"K": 2.0}
exec("def scale(x):\n    return x * K", _GENERATED)
_generated_scale = _GENERATED["scale"]


def exec_generated(x: torch.Tensor) -> torch.Tensor:
    return _generated_scale(x)


# -- a value a package puts into the builtins module, read as a bare name
builtins.GUARD_PKG_SCALE = 2.0  # type: ignore[attr-defined]


def builtin_value(x: torch.Tensor) -> torch.Tensor:
    return x * GUARD_PKG_SCALE  # type: ignore[name-defined] # noqa: F821


# -- a threading.local subclass with a class default: its attributes live in a dict per thread
class _ThreadState(threading.local):
    k = 2.0


THREAD_STATE = _ThreadState()


def thread_local(x: torch.Tensor) -> torch.Tensor:
    return x * THREAD_STATE.k


class Slotted:
    __slots__ = ("k",)

    def __init__(self) -> None:
        self.k = 2.0


SLOTTED = Slotted()


def slotted(x: torch.Tensor) -> torch.Tensor:
    return x * SLOTTED.k


class BaseConst:
    K = 2.0


class ChildConst(BaseConst):
    pass


CHILD = ChildConst()


def inherited(x: torch.Tensor) -> torch.Tensor:
    return x * CHILD.K


def module_getattr(x: torch.Tensor) -> torch.Tensor:
    return x * lazy_module.EPS


class BadDict(dict):
    __getattr__ = dict.__getitem__


BAD_CFG = BadDict(scale=2.0)


def dict_getattr(x: torch.Tensor) -> torch.Tensor:
    return x * BAD_CFG.scale


def _local_instance() -> object:
    class Local:
        scale = 2.0

    return Local()


LOCAL = _local_instance()


def local_class(x: torch.Tensor) -> torch.Tensor:
    return x * LOCAL.scale


# -- code made by exec (a NamedTuple's __new__), a tensor held in a closure cell
Pair = collections.namedtuple("Pair", "a b")


def named_tuple(x: torch.Tensor) -> torch.Tensor:
    p = Pair(x * 2, x + 1)
    return p.a + p.b


def _make_scale() -> object:
    scale = torch.full((4,), 2.0)

    def get() -> torch.Tensor:
        return scale

    return get


SCALE_OF = _make_scale()


def closure_tensor(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE_OF()  # type: ignore[operator]


# -- an attribute set and put back within the call (transformers' output collector does this)
class _Collector:
    def __init__(self) -> None:
        self.active: object = None
        self.compiling = False


COLLECTOR = _Collector()


def set_and_restored(x: torch.Tensor) -> torch.Tensor:
    COLLECTOR.active, COLLECTOR.compiling = [x], True
    try:
        return x * 2
    finally:
        COLLECTOR.active, COLLECTOR.compiling = None, False


def set_and_left(x: torch.Tensor) -> torch.Tensor:
    COLLECTOR.compiling = True
    return x * 2


# -- an LSTM reads its weights through weak references (_flat_weight_refs[i]()) too
LSTM = torch.nn.LSTM(4, 8, batch_first=True).eval()


def lstm(x: torch.Tensor) -> torch.Tensor:
    return LSTM(x.unsqueeze(0))[0]


# -- torch's state answered by its tracer while building (built into the graph as a constant)
def grad_mode(x: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled():  # e.g. a fast path taken only without autograd
        return x + 1.0
    return x * 2.0


def accelerator(x: torch.Tensor) -> torch.Tensor:
    return x.mean() if torch.cuda.is_available() else x.sum()


def distributed(x: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return x / torch.distributed.get_world_size()
    return x


def rank_of(x: torch.Tensor) -> torch.Tensor:
    return x + torch.distributed.get_rank(group=None)


# -- a descriptor defined in Python, found on the class: its __get__ runs on each read
DESCRIBED_SCALE = 2.0


class Described:
    def __get__(self, obj: object, owner: type | None = None) -> float:
        return DESCRIBED_SCALE


class Holder:
    k = Described()


HOLDER = Holder()


def descriptor(x: torch.Tensor) -> torch.Tensor:
    return x * HOLDER.k


# -- a non-data descriptor on the class that the instance's own value shadows (until the
# descriptor's class gains a __set__: a data descriptor wins over the instance dict)
class NonDataDefault:
    def __get__(self, obj: object, owner: type | None = None) -> float:
        return 2.0


class Shadowing:
    k = NonDataDefault()


SHADOWING = Shadowing()
SHADOWING.__dict__["k"] = 3.0


def shadowed_descriptor(x: torch.Tensor) -> torch.Tensor:
    return x * SHADOWING.k


# -- a constants class whose metaclass answers missing names from a table
META_TABLE = {"K": 3.0}


class TableMeta(type):
    def __getattr__(cls, name: str) -> float:
        try:
            return META_TABLE[name]
        except KeyError:
            raise AttributeError(name) from None


class TableConsts(metaclass=TableMeta):
    pass


def metaclass_getattr(x: torch.Tensor) -> torch.Tensor:
    return x * TableConsts.K


# -- an isinstance test against an abstract base class: answered by its registry
class Scaling(abc.ABC):
    @abc.abstractmethod
    def scale(self, x: torch.Tensor) -> torch.Tensor: ...


class Doubling:
    factor = 2.0

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


STEP = Doubling()


def abc_instance(x: torch.Tensor) -> torch.Tensor:
    return x * STEP.factor if isinstance(STEP, Scaling) else x


def abc_subclass(x: torch.Tensor) -> torch.Tensor:
    return x * STEP.factor if issubclass(type(STEP), Scaling) else x


# -- the environment read by the standard library's own code (os.getenv reads os.environ)
def environment_getenv(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if os.getenv("GUARD_PKG_SHIFT") == "1" else x


# -- a module attribute that may be missing: getattr with a default, hasattr
def optional_attribute(x: torch.Tensor) -> torch.Tensor:
    y = x * getattr(helpers, "OPTIONAL_FACTOR", 2.0)
    return y + 1 if hasattr(helpers, "FEATURE") else y


# -- exact values: the sign of zero, the types of a set's elements, a combination of flags
ZERO = 0.0
LEVELS = frozenset({1, 2})


class Perm(enum.IntFlag):
    READ = 1
    WRITE = 2


PERMS = Perm.READ | Perm.WRITE


def signed_zero(x: torch.Tensor) -> torch.Tensor:
    return x * math.copysign(1.0, ZERO)


def set_elements(x: torch.Tensor) -> torch.Tensor:
    return x * len([v for v in LEVELS if type(v) is int])


def flag_combination(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if Perm.WRITE in PERMS else x


# -- a builtin the function calls, shadowed by a module global set after import
def shadowed_builtin(x: torch.Tensor) -> torch.Tensor:
    return x * abs(-2.0)


# -- what an object's class answers without an attribute read: truth, callable
class Plain:
    pass


PLAIN = Plain()


def class_protocol(x: torch.Tensor) -> torch.Tensor:
    y = x * 2 if PLAIN else x
    return y + 1 if callable(PLAIN) else y


# -- a dict's keys taken in order: list(d), [*d]
ORDER = {"a": 2.0, "b": 3.0}


def dict_first_key(x: torch.Tensor) -> torch.Tensor:
    return x * ORDER[list(ORDER)[0]]  # noqa: RUF015 (list(d) is what is tested)


def dict_unpacked(x: torch.Tensor) -> torch.Tensor:
    for k in [*ORDER]:
        x = x * ORDER[k] + 1.0
    return x


# -- max(...) and min(...) with key= over a dict (Dynamo's builtin takes no key)
PRIORITIES = {"low": 1.0, "high": 3.0, "mid": 2.0}


def top_priority(x: torch.Tensor) -> torch.Tensor:
    name = max(PRIORITIES, key=lambda k: PRIORITIES[k])  # the key whose value is largest
    return x * PRIORITIES[name] + len(name)


def lowest_priority(x: torch.Tensor) -> torch.Tensor:
    return x * min(PRIORITIES.values(), key=abs) + max(1.0, 2.0, key=lambda v: -v)


# -- method entries: a submodule whose forward is decorated (transformers' blocks are), a hook
# lambda the instance holds; an item of a mapping keyed by an object
def _passthrough(f):  # a decorator, as functools.wraps makes them
    @functools.wraps(f)
    def wrapped(*args: object, **kwargs: object) -> object:
        return f(*args, **kwargs)

    return wrapped


class Decorated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @_passthrough
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Wrapper(nn.Module):
    def __init__(self, hook: bool = False) -> None:
        super().__init__()
        self.block = Decorated()
        if hook:
            self.block.register_forward_pre_hook(lambda module, args: (args[0] * 2,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) * 2


WRAPPER = Wrapper().eval()
HOOKED = Wrapper(hook=True).eval()
BY_MODULE = weakref.WeakKeyDictionary({WRAPPER: 2.0})


def keyed_by_object(x: torch.Tensor) -> torch.Tensor:
    return x * BY_MODULE[WRAPPER]


REGISTERED = weakref.WeakKeyDictionary()  # type: ignore[var-annotated]


def registered_weakly(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if WRAPPER in REGISTERED else x  # WeakKeyDictionary.__contains__: ref(key) in data


def optional_kernels(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if importlib.util.find_spec("guard_pkg_no_such_kernels") is not None else x


def autocast_block(x: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu"):  # at the default autocast dtype of the moment: checked
        return (x @ x.T).float() + 1


# -- diffusers' Attention.forward: which keywords its processor takes, read from its code
class Processor:
    def __call__(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return x * scale


class Attending(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.processor = Processor()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        accepted = set(inspect.signature(self.processor.__call__).parameters)
        kwargs = {k: v for k, v in {"scale": 2.0, "temb": None}.items() if k in accepted}
        return self.processor(x, **kwargs)


ATTENDING = Attending()


# -- a helper's code replaced in place (a reload: IPython's autoreload sets f.__code__)
def _tripled(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def code_replaced(x: torch.Tensor) -> torch.Tensor:
    return _tripled(x)


# -- a method entry reading a property and a classmethod through self
class Scaled(nn.Module):
    base = 2.0

    @property
    def factor(self) -> float:
        return self.base * 2

    @classmethod
    def offset(cls) -> float:
        return cls.base + 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + self.offset()


SCALED = Scaled()


# -- state read only where the function runs as Python (torch.compiler.is_compiling() False):
# the artifact is the other branch, so the trace never reads it (transformers' attention)
class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.is_causal = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return x * 2  # an explicit mask, the same result while is_causal holds
        return x * 2 if self.is_causal else x * 3


ATTENTION = Attention()


def python_branch(x: torch.Tensor) -> torch.Tensor:
    return ATTENTION(x)


def python_branch_after_untraceable(x: torch.Tensor) -> torch.Tensor:
    if not torch.compiler.is_compiling() and bool(x.sum() > 1e6):  # Dynamo cannot trace this branch
        x = x + 1
    return ATTENTION(x)


# -- a branch on a weight's requires_grad (a frozen-weight path)
FROZEN = nn.Parameter(torch.ones(4))


def requires_grad_branch(x: torch.Tensor) -> torch.Tensor:
    return x * FROZEN if FROZEN.requires_grad else x * FROZEN * 2


# -- a branch on whether a weight is a Parameter (it may be replaced by a plain tensor)
PARAM = nn.Parameter(torch.ones(4))


def parameter_branch(x: torch.Tensor) -> torch.Tensor:
    return x * PARAM if isinstance(PARAM, nn.Parameter) else x * PARAM * 2


# -- copy.copy and dataclasses.asdict: the standard library's tables keyed by classes
class Settings:
    def __init__(self) -> None:
        self.k = 2.0


SETTINGS = Settings()


def copied(x: torch.Tensor) -> torch.Tensor:
    return x * copy.copy(SETTINGS).k


def five(settings: Settings) -> tuple[type, tuple[()], dict[str, float]]:
    """A copier registered for Settings (copyreg): its copies have k = 5."""
    return Settings, (), {"k": 5.0}


@dataclasses.dataclass
class Options:
    k: float = 2.0


OPTIONS = Options()


def as_dict(x: torch.Tensor) -> torch.Tensor:
    return x * dataclasses.asdict(OPTIONS)["k"]


# -- an object's __dict__ read as a mapping: a descriptor's default, the number of attributes
class Defaulted:
    def __init__(self, default: float) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = "_" + name

    def __get__(self, obj: object, cls: type | None = None) -> float:
        return obj.__dict__.get(self.name, self.default)

    def __set__(self, obj: object, value: float) -> None:
        obj.__dict__[self.name] = value


class WithDefaults:
    k = Defaulted(2.0)

    def __init__(self) -> None:
        self.a = 1.0


WITH_DEFAULTS = WithDefaults()


def instance_dict(x: torch.Tensor) -> torch.Tensor:
    return x * WITH_DEFAULTS.k + len(vars(WITH_DEFAULTS))


# -- a set iterated: its order (an equal set may iterate in another order; a set of strings
# does in every process, as strings hash differently)
MODES = {1, 9}


def set_unpacked(x: torch.Tensor) -> torch.Tensor:
    first, _ = MODES
    return x * first


def set_loop(x: torch.Tensor) -> torch.Tensor:
    for mode in MODES:
        x = x * mode + 1
    return x


# a set computed from others and iterated: it runs in the order of the sets it came from
ALL_MODES = {1, 9, 3}
SKIPPED_MODES = {3}


def derived_set_loop(x: torch.Tensor) -> torch.Tensor:
    for mode in ALL_MODES - SKIPPED_MODES:
        x = x * mode + 1
    return x


# sorted() with no key of a set of ints or strings: the same list from any iteration order
def sorted_modes(x: torch.Tensor) -> torch.Tensor:
    for mode in sorted(MODES):
        x = x * mode + 1
    return x


def sorted_derived_modes(x: torch.Tensor) -> torch.Tensor:
    for mode in sorted(ALL_MODES - SKIPPED_MODES, reverse=True):
        x = x * mode + 1
    return x


def sorted_modes_by_key(x: torch.Tensor) -> torch.Tensor:
    for mode in sorted(MODES, key=lambda m: m % 2):  # ties keep the set's order
        x = x * mode + 1
    return x


# -- objects the function creates: what it finds on their class (a method, __init__ and its
# defaults, __call__); a NamedTuple's method (no instance dict)
class Helper:
    def __init__(self, k: float = 2.0) -> None:
        self.k = k

    def scale(self) -> float:
        return self.k

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


def created(x: torch.Tensor) -> torch.Tensor:
    helper = Helper()
    return helper(x) + helper.scale()


class Limits(typing.NamedTuple):
    low: float = 2.0

    def doubled(self) -> float:
        return self.low * 2


LIMITS = Limits()


def named_tuple_method(x: torch.Tensor) -> torch.Tensor:
    return x * LIMITS.doubled()


# -- a class attribute the class gets from its metaclass; a metaclass's own __call__ (refused)
class Registry(type):
    SCALE = 2.0


class Registered(metaclass=Registry):
    pass


def metaclass_attribute(x: torch.Tensor) -> torch.Tensor:
    return x * Registered.SCALE


# what a metaclass's special methods answer: len(Cls), if Cls: (a __bool__ reading the class)
class Catalog(type):
    def __len__(cls) -> int:
        return 2

    def __bool__(cls) -> bool:
        return bool(vars(cls).get("ENABLED"))


class Cataloged(metaclass=Catalog):
    ENABLED = True


class BareMeta(type):
    pass


class Unsized(metaclass=BareMeta):
    pass


def metaclass_protocol(x: torch.Tensor) -> torch.Tensor:
    x = x * len(Cataloged)
    return x + 1 if Cataloged and Unsized else x


class Singleton(type):
    instances: typing.ClassVar[dict[type, object]] = {}

    def __call__(cls, *args: object) -> object:
        if cls not in Singleton.instances:
            Singleton.instances[cls] = super().__call__(*args)
        return Singleton.instances[cls]


class Only(metaclass=Singleton):
    def __init__(self) -> None:
        self.k = 2.0


def singleton(x: torch.Tensor) -> torch.Tensor:
    return x * Only().k


# -- an object the function creates, whose class answers a missing attribute (__getattr__)
class Fallback:
    def __getattr__(self, name: str) -> float:
        return 2.0


def created_fallback(x: torch.Tensor) -> torch.Tensor:
    return x * Fallback().anything


# -- torch's own functions that run whole in the graph (F.multi_head_attention_forward), and
# what they call: an attention kernel patched in after import
ATTN = nn.MultiheadAttention(4, 2).train()  # dropout 0; train(): not the fused fast path


def torch_internals(x: torch.Tensor) -> torch.Tensor:
    return ATTN(x, x, x, need_weights=False)[0]


# -- a module parametrized at import (weight_norm): torch makes its class for that module
NORMED = nn.utils.parametrizations.weight_norm(nn.Linear(4, 4))


def weight_normed(x: torch.Tensor) -> torch.Tensor:
    return NORMED(x)


# -- a method entry whose forward a (*args, **kwargs) wrapper decorates: self is args[0]
class NoGradBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0
        self.lin = nn.Linear(4, 4)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


NO_GRAD_BLOCK = NoGradBlock()


# -- attributes found up the class hierarchy: a base's property, and super()'s method
class Root(nn.Module):
    @property
    def gain(self) -> float:
        return 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


class Middle(Root):
    pass


class Leaf(Middle):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 1


LEAF = Leaf()


def up_the_hierarchy(x: torch.Tensor) -> torch.Tensor:
    return LEAF(x)


# -- entries calling entries: a function entry, and a module whose forward is an entry; inside a
# trace each is its plain function, whatever it is bound to in the process
K_INNER = {"s": 2.0}


@aot_entry(example_inputs=lambda: (torch.randn(3, 4),))
def inner_entry(x: torch.Tensor) -> torch.Tensor:
    return x * K_INNER["s"]


def calls_entry(x: torch.Tensor) -> torch.Tensor:
    return inner_entry(x) + 1


class EntryBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0

    @aot_entry(example_inputs=lambda: (ENTRY_BLOCK, torch.randn(3, 4)))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


ENTRY_BLOCK = EntryBlock()


def calls_entry_module(x: torch.Tensor) -> torch.Tensor:
    return ENTRY_BLOCK(x) + 1


# -- a method entry calling a cached method of its class
class Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.k = 2.0

    @functools.cache  # noqa: B019 (the instance lives as long as the module)
    def factor(self) -> float:
        return self.k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor()


CACHED = Cached()


# -- a truth test answered by the class's own __bool__ (replaced after import)
class Switch:
    def __bool__(self) -> bool:
        return True


SWITCH = Switch()


def switched(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if SWITCH else x


# -- @torch.autocast(...) as a decorator: the wrapper's closure holds the autocast object,
# whose device, dtype and flags were fixed when it decorated the function
@torch.autocast("cpu", dtype=torch.bfloat16)
def autocast_decorated(x: torch.Tensor) -> torch.Tensor:
    return (x @ x.T).float() + 1


@torch.autocast(device_type="cpu")
def autocast_default_dtype(x: torch.Tensor) -> torch.Tensor:
    return (x @ x.T).float() + 1


def autocast_dtype_read(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.get_autocast_dtype("cpu")).float() * 2  # torch.set_autocast_dtype changes it


def autocast_cpu_dtype_read(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.get_autocast_cpu_dtype()).float() * 2  # deprecated: get_autocast_dtype("cpu")


def autocast_cell(fn: typing.Any) -> typing.Any:
    """The closure cell in which ``@torch.autocast(...)``'s wrapper ``fn`` holds the autocast object."""
    return fn.__closure__[fn.__code__.co_freevars.index("autocast_instance")]


# -- membership in a module-level set (and frozenset) of classes: `type(m) in SKIP`
SKIP_TYPES = {nn.Dropout, nn.Identity}
FROZEN_SKIP = frozenset({nn.Dropout, nn.Identity})
SKIP_LAYERS = [nn.Linear(4, 4), nn.Dropout().eval(), nn.ReLU()]


def skip_by_type(x: torch.Tensor) -> torch.Tensor:
    for m in SKIP_LAYERS:
        if type(m) in SKIP_TYPES:
            continue
        x = m(x)
    return x


def skip_class(x: torch.Tensor) -> torch.Tensor:
    return x if nn.ReLU in FROZEN_SKIP else x * 2


def skip_set_loop(x: torch.Tensor) -> torch.Tensor:
    for cls in SKIP_TYPES:  # iterated: its order differs in each process (refused)
        x = x * (2.0 if cls is nn.Dropout else 3.0) + 1
    return x


# -- a logger: a call at a level that is off is compiled out; a branch on the level
LOG = logging.getLogger("guard_pkg.state")


def logs_debug(x: torch.Tensor) -> torch.Tensor:
    LOG.debug("scaling a tensor of shape %s", x.shape)
    return x * 2


def log_branch(x: torch.Tensor) -> torch.Tensor:
    if LOG.isEnabledFor(logging.DEBUG):  # extra statistics while debugging
        return x * 2 + x.mean()
    return x * 2


def log_warning_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 3 if LOG.isEnabledFor(logging.WARNING) else x * 2


def logs_warning(x: torch.Tensor) -> torch.Tensor:
    LOG.warning("this runs on every call")
    return x * 2


def root_logs_debug(x: torch.Tensor) -> torch.Tensor:
    logging.debug("scaling a tensor of shape %s", x.shape)  # the root logger's, through logging's function
    return x * 2


def root_logs_warning(x: torch.Tensor) -> torch.Tensor:
    logging.warning("this runs on every call")
    return x * 2


# -- a name missing from a module, which its __getattr__ answers once registered
class Offsettable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if hasattr(self, "offset"):  # a buffer a user may register after import
            y = y + self.offset
        return y


OFFSETTABLE = Offsettable().eval()


def offset_if_registered(x: torch.Tensor) -> torch.Tensor:
    return OFFSETTABLE(x)


def scale_if_set(x: torch.Tensor) -> torch.Tensor:
    gain = getattr(OFFSETTABLE, "gain", None)
    return x if gain is None else x * gain


def lazy_flag(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if hasattr(lazy_module, "FLAG") else x  # FLAG: missing, until TABLE has it


# -- a class's namespace read as a mapping (a mappingproxy to Python, the class's dict to C)
class Tunables:
    base = 1.0


def class_namespace_get(x: torch.Tensor) -> torch.Tensor:
    return x * Tunables.__dict__.get("boost", 2.0)


# -- the interpreter's struct sequences (no import path finds their classes)
def version_branch(x: torch.Tensor) -> torch.Tensor:
    if sys.version_info >= (3, 9) and not sys.flags.optimize:
        return x * 2
    return x


# -- str(obj): its class's __str__, or its __repr__ (object's __str__ returns repr(obj))
class Activation:
    def __str__(self) -> str:
        return "relu"


class Named:
    def __init__(self) -> None:
        self.name = "relu"

    def __repr__(self) -> str:
        return self.name


ACTIVATION = Activation()
NAMED = Named()


def str_dispatch(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) if str(ACTIVATION) == "relu" else x


def str_by_repr(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) if str(NAMED) == "relu" else x * 2


# -- a classmethod looked up on the class: Dynamo inlines the function it wraps, unguarded
class Ops:
    K = 2.0

    @classmethod
    def scale(cls, x: torch.Tensor) -> torch.Tensor:
        return x * cls.K


def class_method(x: torch.Tensor) -> torch.Tensor:
    return Ops.scale(x)


# -- an object of a class that defines no __new__ or __init__ (nor does its base): object's run
class BareBase:
    pass


class Bare(BareBase):
    k = 2.0


def created_plain(x: torch.Tensor) -> torch.Tensor:
    return x * Bare().k


# -- an attribute read that raises AttributeError inside a try: the except branch is traced
class Fallbacks:
    DEFAULT = 2.0


FALLBACKS = Fallbacks()


def missing_attribute(x: torch.Tensor) -> torch.Tensor:
    try:
        k = FALLBACKS.k
    except AttributeError:
        k = FALLBACKS.DEFAULT
    return x * k


class UnsetSlot:
    __slots__ = ("k",)


UNSET_SLOT = UnsetSlot()  # its slot is never set


def unset_slot(x: torch.Tensor) -> torch.Tensor:
    try:
        k = UNSET_SLOT.k
    except AttributeError:
        k = 2.0
    return x * k


def skip_superset(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if FROZEN_SKIP.issuperset({nn.Dropout}) else x  # a set used otherwise than by `in`


def log_level_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1 if LOG.getEffectiveLevel() <= logging.INFO else x * 2


def log_level_read(x: torch.Tensor) -> torch.Tensor:
    if LOG.level == logging.DEBUG or LOG.level >= logging.ERROR:  # the logger's own level, read
        return x * 2 + 1
    return x * 2


# -- objects the function creates: the operators their class answers, a module's forward
class Window:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> float:
        return float(i + 1)


def created_protocol(x: torch.Tensor) -> torch.Tensor:
    w = Window(3)
    return x * len(w) + w[0]


class Tripler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


MAKERS = {"triple": Tripler}  # transformers' ACT2FN makes a module per use


def created_module(x: torch.Tensor) -> torch.Tensor:
    return MAKERS["triple"]()(x)


@dataclasses.dataclass
class Knobs:
    names: list[str] = dataclasses.field(default_factory=list)
    scale: float = 2.0


def dataclass_default(x: torch.Tensor) -> torch.Tensor:
    return x * Knobs().scale


def _default_gains() -> list[float]:
    return [1.0, 2.0]


@dataclasses.dataclass
class Gains:
    values: list[float] = dataclasses.field(default_factory=_default_gains)


def dataclass_factory(x: torch.Tensor) -> torch.Tensor:
    return x * sum(Gains().values)


# -- a global set and put back within the call (timm's `with set_layer_config(...)`)
_EXPORTABLE = False


class layer_config:  # named as timm names it
    def __init__(self, exportable: bool) -> None:
        global _EXPORTABLE
        self.prev = _EXPORTABLE
        _EXPORTABLE = exportable

    def __enter__(self) -> "layer_config":
        return self

    def __exit__(self, *exc: object) -> None:
        global _EXPORTABLE
        _EXPORTABLE = self.prev


def with_layer_config(x: torch.Tensor) -> torch.Tensor:
    with layer_config(exportable=True):
        scale = 3.0 if _EXPORTABLE else 2.0
    return x * scale + (1.0 if _EXPORTABLE else 0.0)


def dir_branch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if "boost" in dir(Tunables) else x  # dir(): answered while tracing


# -- a class subscripted through a __class_getitem__ of its own (refused: it runs while tracing)
class Lookup:
    _TABLE: typing.ClassVar[dict[str, typing.Any]] = {"relu": torch.relu}

    def __class_getitem__(cls, key: str) -> typing.Any:
        return cls._TABLE[key]


def class_subscript(x: torch.Tensor) -> torch.Tensor:
    return Lookup["relu"](x)


def warns(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("scaling by two is deprecated", DeprecationWarning, stacklevel=2)
    return x * 2


class Level:
    def __init__(self, v: int) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Level) and self.v == other.v

    __hash__ = None  # type: ignore[assignment]


def created_compare(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if Level(1) == Level(1) else x


# -- a compiled regular expression held in a global
ACT_PATTERN = re.compile("re(lu|lu6)")
ACT_NAME = "relu"


def pattern_branch(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) if ACT_PATTERN.match(ACT_NAME) else x * 2
