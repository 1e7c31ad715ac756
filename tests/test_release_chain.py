"""The release chain end to end, as a user meets it: this checkout's real sdist and wheel released to a local package
index (pypiserver, ``tests/package_index.py``) and the dataset and Spaces to the mock Hub (``tests/hub_server.py``);
then a fresh venv installs ``queerbench==<version>`` from that index and runs the main job with ``--limit 1``, and the
released Spaces' ``requirements.txt`` resolve against it (``pip install --dry-run``).

Slow (a venv, torch and the dependencies installed, the main job run); pypiserver and twine are in the ``test``
extra, and without them the test skips on a developer's machine and fails in CI. Dependencies come from the indexes
pip is configured with; queerbench itself from the local index only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from queerbench import __version__
from queerbench.cli import main
from tests.built_dist import built_dist
from tests.hub_server import HubServer
from tests.package_index import LocalIndex, need_index_tools

pytestmark = pytest.mark.slow

NS = "qb-chain"


def _configured_indexes(python: Path) -> list[str]:
    """The index (PyPI when none is set) and extra indexes the given Python's pip is configured with, from its
    configuration files and ``PIP_*`` variables: a command-line ``--index-url`` would replace them, so they are
    passed on explicitly, after the local index."""
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    index, extra = "https://pypi.org/simple/", []
    for key, value in re.findall(r"^\S*?\.((?:extra-)?index-url)='(.*)'$", listing, flags=re.M):
        if key == "index-url":
            index = value
        else:
            extra += value.split()
    return [index, *extra]


def _pip(python: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"pip {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _resolved(report: Path, name: str = "queerbench") -> dict:
    """The item of ``pip install --report``'s file that installs ``name``."""
    items = json.loads(report.read_text())["install"]
    (item,) = [i for i in items if i["metadata"]["name"] == name]
    return item


def test_a_release_reaches_the_index_first_and_installs_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants
    import torch

    need_index_tools()
    wheel, sdist = built_dist()
    release = tmp_path / "release"
    assert main(["release", "build", "--out", str(release), "--namespace", NS, "--dist", str(wheel.parent)]) == 0

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    with LocalIndex(tmp_path / "packages") as index, HubServer() as hub:
        for name, value in {**index.env(), "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf_chain"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("QUEERBENCH_INDEX_URL", raising=False)
        assert main(["release", "push", "--dir", str(release), "--yes"]) == 0
        assert index.names() == {wheel.name, sdist.name}
        assert all(repo.tags == {f"v{__version__}": repo.head} for repo in hub.state.repos.values())
        assert len(hub.state.repos) == 3

        # a fresh venv: torch first (to choose its build, as the README says), then queerbench from the index alone
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        python = venv / "bin" / "python"
        indexes = ["--index-url", index.simple_url]
        for url in _configured_indexes(python):
            indexes += ["--extra-index-url", url]
        _pip(python, "install", "-q", f"torch=={torch.__version__.split('+')[0]}")
        report = tmp_path / "queerbench.json"
        pinned = f"queerbench=={__version__}"
        _pip(python, "install", "-q", "--no-deps", "--index-url", index.simple_url, "--report", str(report), pinned)
        assert _resolved(report)["download_info"]["url"].startswith(index.url)
        _pip(python, "install", "-q", *indexes, pinned)  # its dependencies, from the configured indexes

        work = tmp_path / "work"  # outside the checkout, so `import queerbench` can only find the installed one
        work.mkdir()
        where = subprocess.run(
            [python, "-c", "import queerbench; print(queerbench.__file__, queerbench.__version__)"],
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert Path(where[0]).is_relative_to(venv) and where[1] == __version__
        run = subprocess.run(
            [venv / "bin" / "queerbench", "run", "--model", "embedded:smollm2-135m-instruct", "--limit", "1"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=1800,
            env={**os.environ, "PYTHONPATH": ""},
        )
        assert run.returncode == 0, run.stderr[-3000:]
        (scores,) = work.glob("runs/*/scores.json")
        assert json.loads(scores.read_text())["n"]["queer"] > 0

        # the released Spaces' requirements resolve against the index (queerbench from it, the rest as configured)
        for folder, extras in (("metric", []), ("space", ["space", "scm", "surrogate"])):
            requirements = release / folder / "requirements.txt"
            pin = f"queerbench[{','.join(extras)}]" if extras else "queerbench"
            assert f"{pin}=={__version__}" in requirements.read_text().splitlines()
            report = tmp_path / f"{folder}.json"
            _pip(python, "install", "--dry-run", "--ignore-installed", "-q", "--report", str(report), *indexes,
                 "-r", str(requirements))  # fmt: skip
            item = _resolved(report)
            assert item["metadata"]["version"] == __version__
            assert item["download_info"]["url"].startswith(index.url)
            assert set(item.get("requested_extras") or ()) == set(extras)
