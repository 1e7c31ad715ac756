"""The distribution as a user gets it: the wheel and the sdist hold every package and data file of the tree, the
embedded default model's needs are base dependencies, and the wheel, installed alone, imports and runs from outside
the checkout (``.ci/run`` also installs it with its dependencies into a fresh venv and runs the README's main job).
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from queerbench import __version__
from tests.built_dist import REPO, built_dist, installed_wheel

pytestmark = pytest.mark.slow

# top-level folder in the checkout -> where it lies in the installed package
FOLDERS = {"queerbench": "queerbench", "lexicons": "queerbench/lexicons", "hub_configs": "queerbench/hub_configs"}


def _tracked(folder: str) -> list[str]:
    """The files of ``folder`` that git tracks (every file but caches when the tree is not a git checkout)."""
    if (REPO / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", folder], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        return sorted(p for p in out.split("\0") if p and (REPO / p).is_file())
    return sorted(
        p.relative_to(REPO).as_posix()
        for p in (REPO / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def _installed_paths() -> dict[str, str]:
    """``{checkout path: path inside the wheel}`` for every tracked file of the package folders."""
    paths = {}
    for folder, inside in FOLDERS.items():
        if not (REPO / folder).is_dir():  # lexicons/ or hub_configs/ moved into queerbench/
            continue
        for path in _tracked(folder):
            paths[path] = inside + path[len(folder) :]
    return paths


def _python_folders() -> set[str]:
    """Every folder of ``queerbench/`` (itself included) that holds a ``.py`` file, as a wheel path."""
    return {
        p.parent.relative_to(REPO).as_posix()
        for p in (REPO / "queerbench").rglob("*.py")
        if "__pycache__" not in p.parts
    }


def test_the_wheel_holds_every_package_and_data_file() -> None:
    wheel, _ = built_dist()
    names = set(zipfile.ZipFile(wheel).namelist())
    want = _installed_paths()
    assert any(not p.endswith(".py") for p in want)  # data files are among them
    missing = sorted(src for src, inside in want.items() if inside not in names)
    assert not missing, f"tracked files missing from {wheel.name}: {missing}"
    folders = {n.rsplit("/", 1)[0] for n in names if n.endswith(".py")}
    assert _python_folders() <= folders, sorted(_python_folders() - folders)
    # nothing from outside the package: no tests, no top-level lexicons/ beside queerbench/
    assert {n.split("/", 1)[0] for n in names} == {"queerbench", f"queerbench-{__version__}.dist-info"}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_sdist_holds_every_package_and_data_file() -> None:
    _, sdist = built_dist()
    root = f"queerbench-{__version__}/"
    with tarfile.open(sdist) as tar:
        names = {m.name.removeprefix(root) for m in tar.getmembers() if m.isfile()}
    missing = sorted(p for p in _installed_paths() if p not in names)
    assert not missing, f"tracked files missing from {sdist.name}: {missing}"
    assert {"pyproject.toml", "setup.py", "README.md"} <= names


def test_the_embedded_default_model_needs_no_extra() -> None:
    """`pip install queerbench` alone must run `--model embedded:smollm2-135m-instruct`: transformers reads the GGUF
    file with gguf and loads it with accelerate, so both are base dependencies (no extra marker)."""
    wheel, _ = built_dist()
    with zipfile.ZipFile(wheel) as zf:
        meta = email.message_from_bytes(zf.read(f"queerbench-{__version__}.dist-info/METADATA"))
        entry_points = zf.read(f"queerbench-{__version__}.dist-info/entry_points.txt").decode()
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    unconditional = {r.name for r in requires if r.marker is None}
    assert {"gguf", "accelerate", "torch", "transformers"} <= unconditional
    assert "queerbench = queerbench.cli:main" in entry_points


def test_the_installed_wheel_runs_outside_the_checkout(tmp_path: Path) -> None:
    """The wheel installed on its own, imported from a folder outside the checkout: every package imports from it,
    every data file is readable through importlib.resources, and `python -m queerbench --help` works."""
    target = installed_wheel()
    packages = sorted(
        {inside.rsplit("/", 1)[0].replace("/", ".") for inside in _installed_paths().values() if inside.endswith(".py")}
    )
    data = sorted(inside for inside in _installed_paths().values() if not inside.endswith(".py"))
    code = (
        "import importlib, importlib.resources as r, sys\n"
        f"target = {str(target)!r}\n"
        f"for name in {packages!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    where = module.__file__ or list(module.__path__)[0]  # a folder without __init__.py has no file\n"
        "    assert where.startswith(target), (name, where)\n"
        f"for path in {data!r}:\n"
        "    package, _, rest = path.partition('/')\n"
        "    assert r.files(package).joinpath(rest).is_file(), path\n"
        "print('ok', len(sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")
    proc = subprocess.run(
        [sys.executable, "-m", "queerbench", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage: queerbench" in proc.stdout and "run" in proc.stdout


def test_the_distribution_carries_its_licence_and_where_it_lives() -> None:
    """PyPI shows what the wheel's metadata says: the SPDX licence with the licence file itself (in the wheel and the
    sdist), the project URLs and the classifiers of pyproject.toml."""
    wheel, sdist = built_dist()
    licence = (REPO / "LICENSE").read_bytes()
    with zipfile.ZipFile(wheel) as zf:
        meta = email.message_from_bytes(zf.read(f"queerbench-{__version__}.dist-info/METADATA"))
        assert zf.read(f"queerbench-{__version__}.dist-info/licenses/LICENSE") == licence
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls["Repository"] == "https://github.com/queerbench/queerbench"
    assert {"Homepage", "Documentation", "Issues", "Changelog"} <= set(urls)
    assert "Programming Language :: Python :: 3 :: Only" in meta.get_all("Classifier")
    with tarfile.open(sdist) as tar:
        assert tar.extractfile(f"queerbench-{__version__}/LICENSE").read() == licence
