"""The setuptools plugin (entry point ``setuptools.finalize_distribution_options``).

For a project whose pyproject.toml has ``[tool.aot-build]`` it:

* adds the ``build_aot`` command to ``build`` (after ``build_py``, so it sees the modules as
  they will be installed);
* marks the distribution as non-pure and tags the wheel with the manylinux platform its
  libraries need (see :mod:`.platform_tag`);
* checks that static ``[project].dependencies`` pin the build's torch and a reader of its
  manifest, or supplies both when ``dependencies`` is dynamic (see :mod:`.requirements`).

Projects without the table are left untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from ..settings import load_settings, read_pyproject
from .command import for_project
from .requirements import check_static, supply, torch_release

#: ``--build-option``s the build commands accept: (option, attribute, help).
BUILD_OPTIONS = (
    ("aot-build-targets=", "aot_build_targets", "aot-build: comma-separated targets (over pyproject.toml)"),
    ("aot-build-jobs=", "aot_build_jobs", "aot-build: compile worker processes (0: one per core)"),
)


def with_build_options(cls: type) -> type:
    """``cls`` accepting ``--aot-build-targets=a,b`` and ``--aot-build-jobs=N``, which is how a
    ``-C`` config setting reaches a setuptools plugin: ``python -m build
    -C--build-option=--aot-build-targets=...`` hands it to every build command (sdist and
    editable ones too, which ignore it)."""
    if any(opt[0] == BUILD_OPTIONS[0][0] for opt in getattr(cls, "user_options", [])):
        return cls

    class WithOptions(cls):  # type: ignore[valid-type, misc]
        user_options: ClassVar[list[tuple[str, str | None, str]]] = [
            *getattr(cls, "user_options", []),
            *((opt, None, text) for opt, _, text in BUILD_OPTIONS),
        ]

        def initialize_options(self) -> None:
            super().initialize_options()
            for _, attr, _ in BUILD_OPTIONS:
                setattr(self, attr, None)

    WithOptions.__name__ = cls.__name__
    return WithOptions


def with_platform_tag(cls: type) -> type:
    """``bdist_wheel`` tagging the wheel with the platform ``build_aot`` computed from the
    libraries it shipped (``linux_x86_64`` stays only for a wheel that ships none)."""
    if getattr(cls, "aot_build_tagged", False):
        return cls

    class Tagged(cls):  # type: ignore[valid-type, misc]
        aot_build_tagged = True

        def get_tag(self) -> tuple[str, str, str]:
            impl, abi, plat = super().get_tag()
            built = self.distribution.command_obj.get("build_aot")  # this distribution's run
            return impl, abi, getattr(built, "platform_tag", None) or plat

    Tagged.__name__ = cls.__name__
    return Tagged


def finalize(dist: Any) -> None:
    """setuptools hook: configure ``dist`` for projects that opt in."""
    project_dir = Path(getattr(dist, "src_root", None) or ".").resolve()
    settings = load_settings(project_dir)
    if settings is None:
        return
    where = str(project_dir / "pyproject.toml")
    dist.cmdclass["build_aot"] = for_project(settings, project_dir)
    build_cls = dist.cmdclass.get("build") or dist.get_command_class("build")
    if not any(name == "build_aot" for name, _ in build_cls.sub_commands):

        class build(build_cls):  # type: ignore[valid-type, misc]
            sub_commands: ClassVar[list[tuple[str, Any]]] = [*build_cls.sub_commands, ("build_aot", None)]

        dist.cmdclass["build"] = build
    for name in ("bdist_wheel", "sdist", "editable_wheel"):
        dist.cmdclass[name] = with_build_options(dist.cmdclass.get(name) or dist.get_command_class(name))
    dist.has_ext_modules = lambda: True
    dist.cmdclass["bdist_wheel"] = with_platform_tag(dist.cmdclass["bdist_wheel"])
    release = torch_release()
    project = (read_pyproject(project_dir) or {}).get("project")
    if isinstance(project, dict) and "dependencies" not in project.get("dynamic", []):
        check_static(list(project.get("dependencies", [])), release, where)
        return
    # Dynamic dependencies (or a setup.py-only project): setuptools fills install_requires
    # after this hook, so the pins are added when it finalises requirements. A private
    # method: no public hook runs between install_requires being filled (from setup.py or
    # setup.cfg) and the metadata being written. tests/unit/test_hook.py
    # (test_setuptools_still_finalizes_requires_after_the_hooks) fails if setuptools changes it.
    original = dist._finalize_requires

    def finalize_requires() -> None:
        dist.install_requires = supply(list(dist.install_requires or []), release, where)
        original()

    dist._finalize_requires = finalize_requires


finalize.order = 10  # type: ignore[attr-defined]  # after setuptools' own hooks
