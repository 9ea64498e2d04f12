"""A content-addressed cache of compiled libraries, so a build does not compile again what
did not change.

Key: everything that can change a library — the exported program's serialized bytes (graph,
signature, embedded constants; its example inputs left out, they are often random), the target
and its Inductor options, the user's ``inductor-options``, ``strip``, the backend, torch's version,
aot_build's version and the hash of its compile-side sources, the C++ compiler's identity
(path and ``--version``) and the manylinux floor. Value: the stripped library and its ISA label.

Entries are folders ``<root>/<key[:2]>/<key>/`` holding ``lib.so`` and ``meta.json``; they are
written to a temporary folder and renamed into place (two builds at once never see half an
entry), checked against their sha256 on every read (a damaged entry is removed and rebuilt,
never shipped), and evicted least-recently-used beyond ``max_bytes``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..backends import Built
from ..targets import Target, compile_options
from ..toolchain import build_floor
from .sources import build_side_hash

#: Bumped when the layout of an entry or the meaning of the key changes.
CACHE_FORMAT = 1


@functools.cache
def compiler_identity() -> str:
    """The C++ compiler Inductor uses and its ``--version`` banner."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    cxx = get_cpp_compiler()
    try:
        banner = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        banner = f"unknown ({exc})"
    return f"{shutil.which(cxx) or cxx}\n{banner.strip()}"


@dataclass
class BuildCache:
    """The cache of one build. ``root`` None: disabled."""

    root: Path | None
    max_bytes: int = 5 * 10**9

    def key(
        self,
        program: bytes,
        target: Target,
        options: Mapping[str, Any],
        strip: bool,
        backend: tuple[str, str],
        compiler: bool = True,
    ) -> str:
        """The cache key of compiling ``program`` (:func:`.units.program_bytes`) for
        ``target`` with ``backend`` (name, version) (see the module docstring); ``compiler``: the
        backend calls the C++ compiler (else its identity is no part of the key)."""
        h = hashlib.sha256()
        parts = {
            "format": CACHE_FORMAT,
            "rule": list(backend),  # the key's old name: entries cached before stay valid
            "target": target.name,
            "target_options": compile_options(target),
            "inductor_options": options,
            "strip": strip,
            "torch": torch.__version__,
            "aot_build": __version__,
            "aot_build_sources": build_side_hash(),
            "compiler": compiler_identity() if compiler else "",
            "manylinux": build_floor(),  # the floor the compile wrapper links for
        }
        h.update(json.dumps(parts, sort_keys=True, default=repr).encode())
        h.update(program)
        return h.hexdigest()

    def _entry(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / key

    def get(self, key: str, workdir: Path) -> Built | None:
        """The cached library for ``key``, copied into ``workdir``; None on a miss. A damaged
        entry is removed (and so rebuilt by the caller)."""
        if self.root is None:
            return None
        entry = self._entry(key)
        try:
            meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
            data = (entry / "lib.so").read_bytes()
        except (OSError, ValueError):
            return None
        digest = hashlib.sha256(data).hexdigest()
        if not isinstance(meta, dict) or digest != meta.get("sha256"):
            shutil.rmtree(entry, ignore_errors=True)
            return None
        os.utime(entry)  # last use, for eviction
        suffix = str(meta.get("suffix", ".so"))
        if not suffix.startswith(".") or "/" in suffix or len(suffix) > 16:
            return None
        final = workdir / f"{digest[:24]}{suffix}"
        final.write_bytes(data)
        return Built(path=final, sha256=digest, size=len(data), isa=str(meta.get("isa", "")))

    def put(self, key: str, built: Built) -> None:
        """Store ``built`` under ``key`` (atomically), then evict beyond ``max_bytes``."""
        if self.root is None:
            return
        entry = self._entry(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        try:
            shutil.copyfile(built.path, tmp / "lib.so")
            meta = {"sha256": built.sha256, "size": built.size, "isa": built.isa, "suffix": built.path.suffix}
            (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            try:
                os.rename(tmp, entry)
            except OSError:  # another build stored it first: theirs is as good
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.evict()

    def evict(self) -> None:
        """Remove least-recently-used entries until the cache holds at most ``max_bytes``."""
        if self.root is None or not self.root.is_dir():
            return
        entries = []
        for meta in self.root.glob("??/*/meta.json"):
            entry = meta.parent
            try:
                size = sum(f.stat().st_size for f in entry.iterdir())
                entries.append((entry.stat().st_mtime, size, entry))
            except OSError:
                continue
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries, key=lambda e: e[0]):
            if total <= self.max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
