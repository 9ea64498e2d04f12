"""The setuptools plugin (entry point ``setuptools.finalize_distribution_options``).

For a project whose pyproject.toml has ``[tool.aot-build]`` it:

* adds the ``build_aot`` command to ``build`` (after ``build_py``, so it sees the modules as
  they will be installed);
* marks the distribution as non-pure, so the wheel is platform-tagged;
* pins ``torch==<the build's torch release>`` in Requires-Dist.

Projects without the table are left untouched.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from packaging.requirements import Requirement

from .. import __version__
from ..errors import ConfigError
from ..settings import load_settings
from .command import build_aot


def torch_release() -> str:
    """The torch release installed in the build environment, without local label."""
    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(
            "aot-build: torch is not installed in the build environment; add an exact "
            '"torch==X.Y.Z" to [build-system].requires in pyproject.toml'
        ) from exc


def pin_torch(requires: list[str], release: str, where: str) -> list[str]:
    """``requires`` with every unconditional torch requirement replaced by ``torch==release``,
    and ``aot-build`` (the run-time shim) added unless listed.

    A user range that excludes the build's torch is an error: the wheel could never be
    installed next to the torch its artifacts need.
    """
    out: list[str] = []
    shim = f"aot-build>={__version__}"
    for line in requires:
        req = Requirement(str(line))
        if req.name.lower() == "torch" and req.marker is None:
            if req.specifier and not req.specifier.contains(release, prereleases=True):
                raise ConfigError(
                    f"{where}: dependency {line!r} excludes torch {release}, the torch this wheel "
                    f"is built with; pin the same release in [build-system].requires and dependencies"
                )
            continue
        if req.name.lower().replace("_", "-") == "aot-build":
            shim = ""
        out.append(str(line))
    return [*out, *([shim] if shim else []), f"torch=={release}"]


TARGETS_OPTION = "aot-build-targets="


def with_targets_option(cls: type) -> type:
    """``cls`` accepting ``--aot-build-targets=a,b``, which is how a ``-C`` config setting
    reaches a setuptools plugin: ``python -m build -C--build-option=--aot-build-targets=...``
    hands it to every build command (sdist and editable ones too, which ignore it)."""
    if any(opt[0] == TARGETS_OPTION for opt in getattr(cls, "user_options", [])):
        return cls

    class WithTargets(cls):  # type: ignore[valid-type, misc]
        user_options: ClassVar[list[tuple[str, str | None, str]]] = [
            *getattr(cls, "user_options", []),
            (TARGETS_OPTION, None, "aot-build: comma-separated targets, overriding pyproject.toml"),
        ]

        def initialize_options(self) -> None:
            super().initialize_options()
            self.aot_build_targets: str | None = None

    WithTargets.__name__ = cls.__name__
    return WithTargets


def finalize(dist: Any) -> None:
    """setuptools hook: configure ``dist`` for projects that opt in."""
    project_dir = Path(getattr(dist, "src_root", None) or ".").resolve()
    settings = load_settings(project_dir)
    if settings is None:
        return
    where = str(project_dir / "pyproject.toml")
    dist.cmdclass["build_aot"] = build_aot
    build_aot.settings = settings
    build_cls = dist.cmdclass.get("build") or dist.get_command_class("build")
    if not any(name == "build_aot" for name, _ in build_cls.sub_commands):

        class build(build_cls):  # type: ignore[valid-type, misc]
            sub_commands: ClassVar[list[tuple[str, Any]]] = [*build_cls.sub_commands, ("build_aot", None)]

        dist.cmdclass["build"] = build
    for name in ("bdist_wheel", "sdist", "editable_wheel"):
        dist.cmdclass[name] = with_targets_option(dist.cmdclass.get(name) or dist.get_command_class(name))
    dist.has_ext_modules = lambda: True
    release = torch_release()
    # pyproject's [project] table is applied after this hook and overwrites install_requires,
    # so the pin is added when setuptools finalises requirements, after that.
    original = dist._finalize_requires

    def finalize_requires() -> None:
        dist.install_requires = pin_torch(list(dist.install_requires or []), release, where)
        original()

    dist._finalize_requires = finalize_requires


finalize.order = 10  # type: ignore[attr-defined]  # after setuptools' own hooks
