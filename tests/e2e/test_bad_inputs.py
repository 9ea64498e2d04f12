"""Bad inputs at build time, through real ``python -m build`` runs: each is answered by an
error naming the file (and line), the entry and the fix, and no wheel is left behind. One
build reports every broken module, or every broken entry, at once.

docs/errors.md's table lists these cases by their ids.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import build_env, build_sample, run


@pytest.fixture(scope="module")
def bad_imports(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> str:
    proc, src, out = build_sample("bad_imports", tmp_path_factory.mktemp("bi"), inductor_cache)
    assert proc.returncode != 0 and not list(out.glob("*.whl")) and not list(src.rglob("*.whl"))
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def bad_compiles(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> str:
    proc, src, out = build_sample("bad_compiles", tmp_path_factory.mktemp("bc"), inductor_cache)
    assert proc.returncode != 0 and not list(out.glob("*.whl")) and not list(src.rglob("*.whl"))
    return proc.stdout + proc.stderr


IMPORTS = "aot-build: error: cannot import module 'bad_imports_pkg."


@pytest.mark.parametrize(
    "fragments",
    [
        pytest.param(
            [
                f"{IMPORTS}wrong_type'",
                "bad_imports_pkg.wrong_type:scaled (bad_imports_pkg/wrong_type.py:6): example_inputs "
                "must be a tuple of positional arguments",
                "got dict; write example_inputs=(tensor,)",
            ],
            id="example-inputs-wrong-type",
        ),
        pytest.param(
            [
                "lambda_entry:<lambda> (bad_imports_pkg/lambda_entry.py:5): only module-level functions",
                "move it to module level",
            ],
            id="decorated-lambda",
        ),
        pytest.param(
            ["nested:make.<locals>.inner (bad_imports_pkg/nested.py:7): only module-level functions"],
            id="nested-function",
        ),
        pytest.param(
            [
                "(decorated at bad_imports_pkg/partial_entry.py:12): expected a plain Python function, "
                "got partial; decorate the function itself",
            ],
            id="functools-partial",
        ),
        pytest.param(
            ["(decorated at bad_imports_pkg/builtin_entry.py:5): expected a plain Python function, got "],
            id="builtin",
        ),
        pytest.param(
            [
                "duplicate:twin (bad_imports_pkg/duplicate.py:11): another entry has the same name "
                "bad_imports_pkg.duplicate:twin (bad_imports_pkg/duplicate.py:6)",
                "Rename one of them",
            ],
            id="two-entries-same-name",
        ),
        pytest.param(
            [
                f"{IMPORTS}missing_dependency' to look for @aot_entry functions: ModuleNotFoundError: "
                "No module named 'aot_build_missing_dependency_abc'",
                "add the missing packages to [build-system].requires, or leave modules out with "
                "[tool.aot-build] exclude",
            ],
            id="module-fails-to-import",
        ),
        pytest.param(
            ["7 of 8 modules failed to import", "no wheel was written"],
            id="every-broken-module-in-one-build",
        ),
    ],
)
def test_import_time_errors(bad_imports: str, fragments: list[str]) -> None:
    for fragment in fragments:
        assert fragment in bad_imports, (fragment, bad_imports[-6000:])


E = "aot-build: error: bad_compiles_pkg.ops:"


@pytest.mark.parametrize(
    "fragments",
    [
        pytest.param(
            [
                f"{E}arity (bad_compiles_pkg/ops.py:6): example_inputs gives 2 positional value(s), "
                "but the function's parameters are (x); give one value per parameter",
            ],
            id="example-inputs-wrong-arity",
        ),
        pytest.param(
            [
                f"{E}callable_raises (bad_compiles_pkg/ops.py:15): example_inputs() raised "
                "RuntimeError: the sample file is not there; fix the callable",
            ],
            id="example-inputs-callable-raises",
        ),
        pytest.param(
            [
                "bad_compiles_pkg.ops:data_dependent (bad_compiles_pkg/ops.py:20): torch.compile's tracer "
                "(Dynamo)",
                "stopped with Unsupported: Data-dependent branching",
                "make the function traceable as torch.compile(fullgraph=True) traces it",
            ],
            id="data-dependent-control-flow",
        ),
        pytest.param(
            [
                f"{E}calls_backward (bad_compiles_pkg/ops.py:27): calls backward(), which "
                "accumulates into .grad attributes",
                "compute the gradients with torch.autograd.grad(loss, params)",
            ],
            id="backward-inside-an-entry",
        ),
        pytest.param(
            [
                f"{E}odd_output (bad_compiles_pkg/ops.py:39): output leaf 0 is bad_compiles_pkg.ops.Box",
                "return the object's tensors instead, or make its class a dataclass",
            ],
            id="output-not-tensors-or-values",
        ),
        pytest.param(
            [
                f"{E}bad_example_leaf (bad_compiles_pkg/ops.py:44): example argument mode is a set",
                "fix example_inputs",
            ],
            id="example-input-of-unsupported-type",
        ),
        pytest.param(
            [
                f"{E}grad_mode_branch (bad_compiles_pkg/ops.py:49): backward=True, and the function "
                "reads torch.is_grad_enabled(), which the build answers False",
                "decide by an argument instead of by grad mode, or drop backward=True",
            ],
            id="training-entry-reads-grad-mode",
        ),
        pytest.param(
            ["7 of 7 entries failed to compile (each error is above)", "no wheel was written"],
            id="every-broken-entry-in-one-build",
        ),
    ],
)
def test_compile_time_errors(bad_compiles: str, fragments: list[str]) -> None:
    for fragment in fragments:
        assert fragment in bad_compiles, (fragment, bad_compiles[-6000:])


# ---------------------------------------------------------------- configuration and build machine

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=70", "aot-build", "torch==2.13.0"]
build-backend = "setuptools.build_meta"

[project]
name = "cfg-pkg"
version = "0.1.0"
{dependencies}

[tool.setuptools.packages.find]
include = ["cfg_pkg*"]

{tool}
"""
_PINS = 'dependencies = ["torch==2.13.0", "aot-build>=0.4.0"]'
_MODULE = """\
import torch

from aot_build import aot_entry


@aot_entry(example_inputs=(torch.zeros(2, 3),))
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2
"""


def _tool_bin(tmp_path: Path, *, keep: bool, but: frozenset[str] = frozenset()) -> str:
    """A PATH of one folder: links to every program on today's PATH except ``but``
    (``keep``), or an empty one (not ``keep``): a build machine without those tools."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep) if keep else []:
        for prog in sorted(Path(d).glob("*")) if Path(d).is_dir() else []:
            link = folder / prog.name
            if prog.name not in but and not link.exists() and os.access(prog, os.X_OK):
                link.symlink_to(prog)
    return str(folder)


def _build(
    tmp_path: Path, inductor_cache: Path, tool: str, dependencies: str = _PINS, path: str | None = None
) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    """``python -m build --wheel --no-isolation`` of a one-entry project with this
    ``[tool.aot-build]`` text and ``dependencies`` line; the process and any wheel left."""
    project = tmp_path / "cfg"
    (project / "cfg_pkg").mkdir(parents=True)
    (project / "cfg_pkg" / "__init__.py").write_text(_MODULE)
    (project / "pyproject.toml").write_text(_PYPROJECT.format(dependencies=dependencies, tool=tool))
    env = build_env(TORCHINDUCTOR_CACHE_DIR=str(inductor_cache))
    if path is not None:
        env["PATH"] = path
    out = tmp_path / "dist"
    proc = run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, "."],
        cwd=project,
        env=env,
        check=False,
    )
    return proc, list(out.glob("*.whl")) + list(project.rglob("*.whl"))


@pytest.mark.parametrize(
    ("tool", "dependencies", "fragments"),
    [
        pytest.param(
            '[tool.aot-build]\ntarget = ["cpu-baseline"]',
            _PINS,
            ["pyproject.toml: unknown key 'target' in [tool.aot-build]. Did you mean 'targets'?"],
            id="misspelled-key",
        ),
        pytest.param(
            '[tool.aot-build]\nstrip = "yes"',
            _PINS,
            ["pyproject.toml: [tool.aot-build] strip must be boolean (bool), got str 'yes'"],
            id="wrong-value-type",
        ),
        pytest.param(
            "[tool]\naot-build = 3",
            _PINS,
            ["pyproject.toml: [tool.aot-build] must be a table"],
            id="table-not-a-table",
        ),
        pytest.param(
            '[tool.aot-build]\ntargets = ["cpu-avx3"]',
            _PINS,
            ["unknown target 'cpu-avx3' on x86_64; valid targets: cpu-avx512, cpu-avx2, cpu-baseline"],
            id="unknown-target",
        ),
        pytest.param(
            '[tool.aot-build]\ntargets = ["cuda-sm90"]',
            _PINS,
            ["target cuda-sm90: no CUDA device on the build machine", "optional-targets"],
            id="target-this-machine-cannot-build",
        ),
        pytest.param(
            "[tool.aot-build]",
            'dependencies = ["torch<2.13", "aot-build>=0.4.0"]',
            ["pyproject.toml: dependency 'torch<2.13' excludes torch 2.13.0, the torch this wheel is built"],
            id="torch-range-excludes-the-build-torch",
        ),
        pytest.param(
            "[tool.aot-build]",
            'dependencies = ["numpy"]',
            [
                "pyproject.toml: [project].dependencies must pin torch==2.13.0 and aot-build>=0.4.0",
                'dependencies = ["numpy", "torch==2.13.0", "aot-build>=0.4.0"]',
            ],
            id="static-dependencies-without-pins",
        ),
        pytest.param(
            "[tool.aot-build]\nstrip = true\n[tool.aot-build.inductor-options",
            _PINS,
            ["Failed to parse ./pyproject.toml: Expected ']' at the end of a table declaration (at line 15"],
            id="invalid-toml",  # the build frontend reads pyproject.toml first and says so
        ),
    ],
)
def test_configuration_errors(
    tmp_path: Path, inductor_cache: Path, tool: str, dependencies: str, fragments: list[str]
) -> None:
    proc, wheels = _build(tmp_path, inductor_cache, tool, dependencies)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    for fragment in fragments:
        assert fragment in output, (fragment, output[-4000:])
    assert wheels == []


def test_no_cpp_compiler_on_the_build_machine(tmp_path: Path, inductor_cache: Path) -> None:
    tool = '[tool.aot-build]\ntargets = ["cpu-baseline"]'
    proc, wheels = _build(tmp_path, inductor_cache, tool, path=_tool_bin(tmp_path, keep=False))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "no working C++ compiler on the build machine" in output
    assert "install g++ (apt-get install g++, dnf install gcc-c++) or point CXX at a compiler" in output
    assert wheels == []


def test_strip_missing_is_noted_not_silent(tmp_path: Path, inductor_cache: Path) -> None:
    """``strip = true`` (the default) with no ``strip`` on PATH: the build says so and ships
    unstripped libraries, as the docs promise."""
    assert shutil.which("strip"), "this case takes strip away: it must be there first"
    path = _tool_bin(tmp_path, keep=True, but=frozenset({"strip"}))
    proc, wheels = _build(tmp_path, inductor_cache, '[tool.aot-build]\ntargets = ["cpu-baseline"]', path=path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "note: strip = true, but there is no 'strip' on PATH" in output
    assert len(wheels) == 1
