"""The build configuration: what a build is asked to do, from the project's ``Settings`` to the
build's child process (its CONFIG.json), the compile workers and each backend's request.

Standard library only: the child process reads it before it imports torch (:mod:`aot_build.compile.reuse`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .constants import BACKEND_AOTI
from .errors import ConfigError
from .settings import Settings, parse_size

#: Stamped in :meth:`BuildConfig.to_json`; bumped when a field changes meaning or goes away.
CONFIG_VERSION = 1
_VERSION_KEY = "config_version"
_LIST_FIELDS = ("packages", "modules", "targets", "optional_targets")


@dataclass(frozen=True)
class BuildConfig:
    """One build's configuration.

    Args:
        build_lib: folder holding the package's modules as they will be installed.
        packages: dotted names of the distribution's packages.
        modules: modules to import to find entries.
        targets: target names to compile for.
        optional_targets: targets that may be skipped when this machine cannot build them.
        inductor_options: the project's ``inductor-options`` (extra Inductor config).
        strip: strip shipped libraries.
        out_dir: staging folder; receives ``<package root path>/_aot_build/...``.
        cache_dir: build cache folder ("" : no cache), see :mod:`aot_build.compile.cache`.
        cache_max_bytes: the cache's size limit.
        jobs: compile worker processes (0: one per core).
        progress: one line per compiled program and target.
        backend: compile backend of entries that name none.
    """

    build_lib: str
    packages: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    optional_targets: tuple[str, ...] = ()
    inductor_options: Mapping[str, Any] = field(default_factory=dict)
    strip: bool = True
    out_dir: str = ""
    cache_dir: str = ""
    cache_max_bytes: int = 5 * 10**9
    jobs: int = 0
    progress: bool = True
    backend: str = BACKEND_AOTI

    def __post_init__(self) -> None:
        for name in _LIST_FIELDS:  # lists given (JSON, callers) are held as tuples
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "inductor_options", dict(self.inductor_options))

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        build_lib: str | Path,
        packages: Iterable[str] = (),
        modules: Iterable[str] = (),
        targets: Iterable[str] | None = None,
        jobs: int | None = None,
        cache_dir: str | Path | None = None,
        out_dir: str | Path = "",
    ) -> BuildConfig:
        """The configuration of building ``settings``' project from ``build_lib``; ``targets``
        and ``jobs``: overrides of the settings' own (None: the settings'); ``cache_dir``: the
        cache folder (None: no cache)."""
        return cls(
            build_lib=str(build_lib),
            packages=tuple(packages),
            modules=tuple(modules),
            targets=tuple(settings.targets if targets is None else targets),
            optional_targets=tuple(settings.optional_targets),
            inductor_options=dict(settings.inductor_options),
            strip=settings.strip,
            out_dir=str(out_dir),
            cache_dir=str(cache_dir or ""),
            cache_max_bytes=parse_size(settings.cache_max_size) or 0,
            jobs=settings.jobs if jobs is None else jobs,
            progress=settings.progress,
            backend=settings.backend,
        )

    def to_json(self) -> dict[str, Any]:
        """The configuration as JSON values, stamped with :data:`CONFIG_VERSION`."""
        body: dict[str, Any] = {_VERSION_KEY: CONFIG_VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            body[f.name] = list(value) if f.name in _LIST_FIELDS else value
        body["inductor_options"] = dict(self.inductor_options)
        return body

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | str) -> BuildConfig:
        """Read :meth:`to_json`'s output (or its text); ConfigError for another
        version, an unknown key (naming the closest known one) or a missing ``build_lib``."""
        body = dict(json.loads(raw) if isinstance(raw, str) else raw)
        version = body.pop(_VERSION_KEY, None)
        if version != CONFIG_VERSION:
            raise ConfigError(
                f"build configuration version {version!r}; this aot_build reads version "
                f"{CONFIG_VERSION}: write it with BuildConfig.to_json of the same aot_build"
            )
        known = [f.name for f in dataclasses.fields(cls)]
        for key in body:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"build configuration: unknown key {key!r}{hint} (known: {', '.join(known)})"
                )
        if "build_lib" not in body:
            raise ConfigError("build configuration: 'build_lib' is missing")
        return cls(**body)

    def write(self, path: Path) -> None:
        """Write the configuration to ``path`` (a CONFIG.json)."""
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> BuildConfig:
        """The configuration in ``path``; ConfigError naming the file."""
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except (ConfigError, OSError, ValueError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
