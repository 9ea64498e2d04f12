"""A build that changed nothing ships the artifacts of the build before it: no import of torch
or of the package, no export, no compile.

A *build record* (``<cache>/builds/<key[:2]>/<key>/``) holds a build's output (each package's
``_aot_build/`` files) and what it depended on. Its key is made of what is known before the
build imports anything: the build's settings (targets, inductor-options, strip, backend, the
modules to import...), the Python version, aot_build's version and build-side sources, the
environment (less the variables of a terminal session that cannot shape artifacts, see
:data:`VOLATILE_ENV`) and the content of every file of the package as it will be installed
(``build_lib``). Beside the output it stamps (path, size, modification time) every file the
build imported from outside the package (torch, numpy, ... : the import closure) and the
tools it ran (the C++ and C compilers, ``strip``); the record is used only while every stamp
still holds. Any change — a source, a setting, an installed package, the compiler — runs the
build in full, where the per-library build cache still spares every compile whose program did
not change.

Not recorded (those builds always run in full): builds that compiled something in the build
process (the ``dynamo`` backend, programs ``torch.export.save`` cannot write), skipped optional
targets (their reason depends on the machine), ``cpu-host`` targets (the machine's CPU) and
cross builds. A package whose export reads files other than its own and its imports (data
downloaded at build time, files outside the package) should turn the cache off
(``cache = false``).

Standard library only: it runs before the build imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..build_config import BuildConfig
from ..constants import ARTIFACT_DIR, ENV_CROSS_TORCH
from .sources import build_side_hash

#: Bumped when a record's layout or the meaning of its key changes.
RECORD_FORMAT = 1
#: Records kept (the most recently used); each holds one build's artifacts.
KEEP = 4
#: Configuration fields that do not shape the artifacts (where things go, how many workers, output).
_CONFIG_IGNORED = ("build_lib", "out_dir", "cache_dir", "cache_max_bytes", "jobs", "progress")
#: Variables of a terminal session, a pytest run or a pip build that differ between identical
#: builds and cannot shape artifacts; every other variable is part of the key.
VOLATILE_ENV = frozenset(
    {
        "PWD", "OLDPWD", "SHLVL", "_", "TERM", "COLORTERM", "COLUMNS", "LINES", "DISPLAY",
        "WINDOWID", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "TMUX",
        "TMUX_PANE", "STY", "PS1", "PROMPT_COMMAND", "HISTFILE", "MAIL", "LS_COLORS",
        "XDG_SESSION_ID", "XDG_RUNTIME_DIR", "PYTEST_CURRENT_TEST", "PIP_BUILD_TRACKER",
        "PIP_REQ_TRACKER",
    }
)  # fmt: skip

Stamp = list[Any]  # [path, size, mtime_ns]


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns]


def tool_stamps(names: Iterable[str]) -> list[Stamp]:
    """Stamps of the tools ``names`` as PATH finds them: the file found and the file it links to."""
    out = []
    for name in sorted(set(names)):
        found = shutil.which(name)
        if found is None:
            out.append([name, -1, -1])
            continue
        for path in dict.fromkeys([found, os.path.realpath(found)]):
            out.append(_stamp(path) or [path, -1, -1])
    return out


def tool_names(environ: Mapping[str, str]) -> list[str]:
    """The tools a build runs: Inductor's C++ compiler (``CXX``, else g++), the guard
    evaluator's C compiler (``CC``, else Python's, cc, gcc) and ``strip``."""
    import shlex
    import sysconfig

    names = [(shlex.split(environ.get("CXX", "")) or ["g++"])[0], "strip", "cc", "gcc"]
    cc = shlex.split(environ.get("CC", "") or sysconfig.get_config_var("CC") or "")
    return names + cc[:1]


def _tree_digest(build_lib: Path) -> str:
    """The package as it will be installed: every file's path and bytes (artifacts of an
    earlier build and byte-code left out)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(build_lib):
        dirs[:] = sorted(d for d in dirs if d not in (ARTIFACT_DIR, "__pycache__"))
        for name in sorted(files):
            path = Path(root) / name
            h.update(str(path.relative_to(build_lib)).encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def record_key(config: BuildConfig, environ: Mapping[str, str]) -> str:
    """The key of a build's record (see the module docstring)."""
    parts = {
        "format": RECORD_FORMAT,
        "config": {k: v for k, v in sorted(config.to_json().items()) if k not in _CONFIG_IGNORED},
        "python": sys.version,
        "aot_build": __version__,
        "aot_build_sources": build_side_hash(),
        "environ": {k: v for k, v in sorted(environ.items()) if k not in VOLATILE_ENV},
        "package": _tree_digest(Path(config.build_lib)),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def recordable(config: BuildConfig, environ: Mapping[str, str]) -> bool:
    """Whether a build of ``config`` may be recorded and reused at all."""
    return (
        bool(config.cache_dir)
        and "cpu-host" not in config.targets
        and not environ.get(ENV_CROSS_TORCH, "").strip()
    )


@dataclass
class Reused:
    """What a reused record shipped, for the build's summary: its libraries, the bytes its
    artifacts add to the wheel, the build's lines about each package, when it was made."""

    libraries: int
    size: int
    lines: list[str]
    made: str


def _folder(cache_dir: str, key: str) -> Path:
    return Path(cache_dir) / "builds" / key[:2] / key


def _stamps_hold(stamps: list[Stamp]) -> bool:
    for path, size, mtime in stamps:
        now = _stamp(path)
        if now is None:
            if size != -1:
                return False
        elif now != [path, size, mtime]:
            return False
    return True


def reuse(config: BuildConfig, environ: Mapping[str, str], key: str) -> Reused | None:
    """Copy the output recorded under ``key`` (:func:`record_key`) into ``config.out_dir`` when
    every stamp still holds and every file is intact; None (nothing copied) otherwise."""
    folder = _folder(config.cache_dir, key)
    try:
        record = json.loads((folder / "record.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        return None
    if record["tools"] != tool_stamps(tool_names(environ)) or not _stamps_hold(record["modules"]):
        return None
    files: dict[str, str] = record["files"]
    data = {}
    for rel, digest in files.items():
        try:
            blob = (folder / "out" / rel).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(blob).hexdigest() != digest:  # damaged: the full build replaces it
            shutil.rmtree(folder, ignore_errors=True)
            return None
        data[rel] = blob
    out = Path(config.out_dir)
    for rel, blob in data.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(blob)
    os.utime(folder)  # last use, for eviction
    return Reused(record["libraries"], record["size"], record["lines"], record["made"])


def save(
    config: BuildConfig,
    environ: Mapping[str, str],
    key: str,
    module_files: Iterable[str],
    libraries: int,
    size: int,
    lines: list[str],
) -> None:
    """Record the finished build's output (``config.out_dir``), stamped with the files it
    imported (``module_files``; those inside the package are in the key already) and its tools.
    Nothing is recorded when an imported file is gone (a module written to a temporary folder:
    the record could never be used)."""
    build_lib = str(Path(config.build_lib)) + os.sep
    stamps = []
    for path in sorted(set(module_files)):
        if path.startswith(build_lib):
            continue
        stamp = _stamp(path)
        if stamp is None:
            return
        stamps.append(stamp)
    out = Path(config.out_dir)
    files = {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }
    record = {
        "format": RECORD_FORMAT,
        "made": time.strftime("%Y-%m-%d %H:%M:%S"),
        "modules": stamps,
        "tools": tool_stamps(tool_names(environ)),
        "files": files,
        "libraries": libraries,
        "size": size,
        "lines": lines,
    }
    folder = _folder(config.cache_dir, key)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        shutil.copytree(out, tmp / "out")
        (tmp / "record.json").write_text(json.dumps(record), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.rename(tmp, folder)
        except OSError:  # another build recorded it first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _evict(Path(config.cache_dir) / "builds")


def _evict(root: Path) -> None:
    """Keep the :data:`KEEP` most recently used records."""
    found = []
    for record in root.glob("??/*/record.json"):
        try:
            found.append((record.parent.stat().st_mtime, record.parent))
        except OSError:
            continue
    for _, folder in sorted(found, reverse=True)[KEEP:]:
        shutil.rmtree(folder, ignore_errors=True)


def imported_files() -> list[str]:
    """The files of every module imported so far (sources and extension modules). Relative
    names are no files (torch's ``_classes`` and ``ops`` namespaces say ``_classes.py``)."""
    out = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path):
            out.append(path)
    return out
