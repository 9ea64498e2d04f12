"""The ``[tool.aot-build]`` table: a dataclass with one documented field per key, its JSON
schema, and a reader that answers unknown keys with "Did you mean …".
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .constants import BACKEND_AOTI, ENV_CACHE_DIR, ENV_JOBS, ENV_MANYLINUX, ENV_TARGETS, TOOL_TABLE
from .errors import ConfigError
from .targets import RESERVED_OPTIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass
class Settings:
    """Build settings of one project, read from ``[tool.aot-build]``."""

    targets: list[str] = field(
        default_factory=lambda: ["cpu"],
        metadata=_doc(
            "Device targets to compile every entry for: cpu-avx512, cpu-avx2, cpu-baseline, "
            "cpu-neon (aarch64), cuda-smXY; 'cpu' (the default) stands for a set every machine of "
            "the build's architecture runs (x86_64: cpu-avx2 and cpu-baseline; aarch64: cpu-neon "
            "and cpu-baseline; elsewhere cpu-baseline), "
            "'cpu-host' for the build host's own CPU level only. Overridden by the "
            f"{ENV_TARGETS} environment variable (comma-separated)."
        ),
    )
    optional_targets: list[str] = field(
        default_factory=list,
        metadata=_doc(
            "Targets the build may skip when this build machine cannot produce them (e.g. "
            "cuda-sm90 without a GPU); the manifest records why they were skipped."
        ),
    )
    modules: list[str] = field(
        default_factory=list,
        metadata=_doc(
            "Modules to import to find @aot_entry functions. Empty: every module of the "
            "distribution's packages, less 'exclude'."
        ),
    )
    exclude: list[str] = field(
        default_factory=lambda: ["*.tests", "*.tests.*", "*.test_*", "*.conftest"],
        metadata=_doc("fnmatch patterns of module names never imported during discovery."),
    )
    strip: bool = field(
        default=True,
        metadata=_doc(
            "Strip symbol tables from shipped libraries (strip --strip-unneeded); about 5x "
            "smaller. Needs binutils' strip on the build machine; skipped with a note if absent."
        ),
    )
    cache: bool = field(
        default=True,
        metadata=_doc(
            "Reuse compiled libraries from the build cache when nothing that shapes them changed "
            "(the exported program, target, options, torch, aot-build, C++ compiler)."
        ),
    )
    cache_dir: str = field(
        default="",
        metadata=_doc(
            f"Build cache folder. Empty: ${ENV_CACHE_DIR}, else $XDG_CACHE_HOME/aot-build, else "
            "~/.cache/aot-build. Relative paths are relative to pyproject.toml's folder."
        ),
    )
    cache_max_size: str = field(
        default="5GB",
        metadata=_doc("Size beyond which least-recently-used cache entries are removed: '500MB', '5GB'."),
    )
    jobs: int = field(
        default=0,
        metadata=_doc(
            "Compile worker processes; 0 (the default): one per core. Overridden by "
            f"{ENV_JOBS} and by python -m build -C--build-option=--aot-build-jobs=N."
        ),
    )
    progress: bool = field(
        default=True,
        metadata=_doc(
            "One line per compiled program and target ([3/12] ...); false: errors and the summary only."
        ),
    )
    backend: str = field(
        default=BACKEND_AOTI,
        metadata=_doc(
            "Compile backend for entries that do not name one (@aot_entry(backend=...)): 'aoti' "
            "(torch.export + AOTInductor, loaded without a compiler), 'dynamo' (upstream "
            "torch.compile precompile; loading needs a C++ compiler), or a backend another "
            "distribution registers in the 'aot_build.backends' entry point group. "
            "Formerly 'rule' (still read, with a warning)."
        ),
    )
    manylinux: str = field(
        default="2_28",
        metadata=_doc(
            "The oldest Linux the shipped libraries load on, as a manylinux policy: '2_28' (the "
            "default; torch's own wheels are manylinux_2_28) or another '2_N'. The build links "
            "them against the old symbol versions the host's glibc and libstdc++ still export "
            "(whatever the build host's glibc), tags the wheel manylinux_2_N, and fails naming "
            "every symbol that needs more. 'host': link as the build host does and tag the "
            f"wheel with what its libraries need. Overridden by {ENV_MANYLINUX}."
        ),
    )
    inductor_options: dict[str, Any] = field(
        default_factory=dict,
        metadata=_doc(
            "Extra torch._inductor config applied to every compile, e.g. "
            '{"max_autotune" = true}. May not set what aot_build sets per target: cpp.march, '
            "cpp.simdlen, cpp.dynamic_threads, cpp.threads."
        ),
    )

    @property
    def rule(self) -> str:
        """Deprecated alias of :attr:`backend` (aot-build 0.4.0)."""
        return self.backend


#: Keys of ``[tool.aot-build]`` renamed, old -> new: still read, with a FutureWarning (shown to
#: the project's author by default, unlike a DeprecationWarning), for one release.
RENAMED = {"rule": "backend"}


def _toml_key(name: str) -> str:
    return name.replace("_", "-")


_FIELDS = {_toml_key(f.name): f for f in dataclasses.fields(Settings)}
_JSON_TYPES = {
    "bool": "boolean",
    "int": "integer",
    "str": "string",
    "list[str]": "array",
    "dict[str, Any]": "object",
}
_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def parse_size(text: str) -> int | None:
    """Bytes in ``"500MB"``, ``"5 GB"``, ``"2GiB"`` or ``"1000"``; None when not a size."""
    t = text.strip().upper().replace(" ", "")
    unit = next((u for u in sorted(_SIZE_UNITS, key=len, reverse=True) if t.endswith(u)), "B")
    number = t[: len(t) - len(unit)] if t.endswith(unit) else t
    try:
        value = float(number)
    except ValueError:
        return None
    return int(value * _SIZE_UNITS[unit]) if value >= 0 else None


def cache_dir(settings: Settings, project_dir: Path, environ: dict[str, str] | None = None) -> Path | None:
    """The build cache folder for ``settings`` (None: the cache is off)."""
    if not settings.cache:
        return None
    env = os.environ if environ is None else environ
    if env.get(ENV_CACHE_DIR):
        return Path(env[ENV_CACHE_DIR]).expanduser()
    if settings.cache_dir:
        return (project_dir / Path(settings.cache_dir).expanduser()).resolve()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "aot-build"


def json_schema() -> dict[str, Any]:
    """JSON schema of ``[tool.aot-build]``, generated from :class:`Settings`."""
    props: dict[str, Any] = {}
    for key, f in _FIELDS.items():
        prop: dict[str, Any] = {"type": _JSON_TYPES[str(f.type)], "description": f.metadata["doc"]}
        if prop["type"] == "array":
            prop["items"] = {"type": "string"}
        if prop["type"] == "integer":
            prop["minimum"] = 0
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        prop["default"] = default
        props[key] = prop
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"[tool.{TOOL_TABLE}]",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
    }


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def markdown_table() -> str:
    """README's table of ``[tool.aot-build]`` (key, type, default, meaning), generated from
    :class:`Settings` like the schema; tests/unit/test_settings.py checks docs/configuration.md holds it."""
    names = {"array": "list of str", "boolean": "bool", "integer": "int", "string": "str", "object": "table"}
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, prop in json_schema()["properties"].items():
        doc = prop["description"].replace("|", "\\|")
        rows.append(f"| `{key}` | {names[prop['type']]} | `{_toml(prop['default'])}` | {doc} |")
    return "\n".join(rows)


def _check_type(where: str, key: str, value: Any, f: dataclasses.Field[Any]) -> None:
    kind = str(f.type)
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "str": isinstance(value, str),
        "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "dict[str, Any]": isinstance(value, dict),
    }[kind]
    if not ok:
        raise ConfigError(
            f"{where}: [tool.{TOOL_TABLE}] {key} must be {_JSON_TYPES[kind]} ({kind}"
            f"{', at least 0' if kind == 'int' else ''}), "
            f"got {type(value).__name__} {value!r}"
        )


def settings_from_table(table: dict[str, Any], where: str = "pyproject.toml") -> Settings:
    """Validate a parsed ``[tool.aot-build]`` table and build :class:`Settings` from it."""
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        new = RENAMED.get(key)
        if new is not None:
            if new in table:
                raise ConfigError(
                    f"{where}: [tool.{TOOL_TABLE}] sets both {new} and {key}, the old name of "
                    f"{new}; remove {key}"
                )
            warnings.warn(
                f"aot-build: {where}: [tool.{TOOL_TABLE}] {key} is deprecated; it is now called "
                f"{new}: write {new} = {_toml(value)}",
                FutureWarning,
                stacklevel=2,
            )
        f = _FIELDS.get(new or key)
        if f is None:
            close = difflib.get_close_matches(key, list(_FIELDS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{where}: unknown key {key!r} in [tool.{TOOL_TABLE}].{hint} "
                f"Valid keys: {', '.join(sorted(_FIELDS))}."
            )
        _check_type(where, key, value, f)
        if f.name == "cache_max_size" and parse_size(value) is None:
            raise ConfigError(
                f'{where}: [tool.{TOOL_TABLE}] cache-max-size {value!r} is not a size; write e.g. "5GB"'
            )
        if f.name == "inductor_options":
            taken = sorted(set(value) & set(RESERVED_OPTIONS))
            if taken:
                raise ConfigError(
                    f"{where}: [tool.{TOOL_TABLE}] inductor-options sets {', '.join(taken)}, which "
                    "aot_build sets per target (the instruction set of each CPU target, and thread "
                    "handling that keeps artifacts correct on machines with more cores than the "
                    "build machine). Remove them; choose the instruction sets with `targets`"
                )
        if f.name == "manylinux":
            check_manylinux(value, f"{where}: [tool.{TOOL_TABLE}] manylinux")
        if f.name == "backend" and not value:
            raise ConfigError(f'{where}: [tool.{TOOL_TABLE}] {key} is empty; write e.g. backend = "aoti"')
        kwargs[f.name] = value
    return Settings(**kwargs)


def read_pyproject(project_dir: Path) -> dict[str, Any] | None:
    """The parsed pyproject.toml of ``project_dir``, or None when there is none."""
    path = project_dir / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror}") from exc


def load_settings(project_dir: Path, environ: dict[str, str] | None = None) -> Settings | None:
    """Settings of the project in ``project_dir``; None when it has no ``[tool.aot-build]``.

    Precedence, highest first: ``AOT_BUILD_TARGETS`` in the environment, then the table.
    """
    data = read_pyproject(project_dir)
    table = (data or {}).get("tool", {}).get(TOOL_TABLE)
    if table is None:
        return None
    where = str(project_dir / "pyproject.toml")
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [tool.{TOOL_TABLE}] must be a table")
    settings = settings_from_table(table, where)
    env = os.environ if environ is None else environ
    override = env.get(ENV_TARGETS, "").strip()
    if override:
        settings.targets = [t.strip() for t in override.split(",") if t.strip()]
    floor = env.get(ENV_MANYLINUX, "").strip()
    if floor:
        settings.manylinux = check_manylinux(floor, f"{ENV_MANYLINUX} in the environment")
    jobs = env.get(ENV_JOBS, "").strip()
    if jobs:
        settings.jobs = parse_jobs(jobs, f"{ENV_JOBS} in the environment")
    return settings


def parse_jobs(text: str, where: str) -> int:
    """A job count given as text (environment, command line); ConfigError names ``where``."""
    if not text.isdigit():
        raise ConfigError(f"{where}: jobs must be a whole number >= 0 (0: one per core), got {text!r}")
    return int(text)


def check_manylinux(value: str, where: str) -> str:
    """``value`` when it is a manylinux floor ("2_28", "host"...); ConfigError naming ``where``."""
    from .toolchain import FloorError, parse_floor

    try:
        parse_floor(value, where)
    except FloorError as exc:
        raise ConfigError(str(exc)) from None
    return value
