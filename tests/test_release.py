"""``queerbench release build|push``: one version across dataset, metric and Space; pushed to a mock Hub.

The mock Hub (``tests/hub_server.py``) runs on 127.0.0.1; ``HF_ENDPOINT`` points the release at it (read at call
time, not at import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gradio
import pytest
import yaml
from built_dist import installed_wheel
from hub_server import HubServer

from queerbench import __version__
from queerbench.cli import main
from queerbench.hub.release import ReleaseError, build_release, find_checkout, push_release

NS = "qb-test"
TAG = f"v{__version__}"
REPOS = {
    ("dataset", f"{NS}/queerbench"): "dataset",
    ("space", f"{NS}/queerbench"): "metric",
    ("space", f"{NS}/queerbench-demo"): "space",
}


def _front_matter(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "v"
    assert main(["release", "build", "--out", str(out), "--namespace", NS]) == 0
    return out


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


# ---------------------------------------------------------------------------------------------------- build
def test_build_writes_three_folders_with_one_version(release: Path) -> None:
    manifest = json.loads((release / "release.json").read_text())
    assert manifest["version"] == __version__ and manifest["tag"] == TAG
    assert {a: e["repo_id"] for a, e in manifest["repos"].items()} == {
        "dataset": f"{NS}/queerbench",
        "metric": f"{NS}/queerbench",
        "space": f"{NS}/queerbench-demo",
    }

    dataset_card = (release / "dataset" / "README.md").read_text(encoding="utf-8")
    assert f"queerbench {__version__}" in dataset_card
    assert sorted(p.relative_to(release / "dataset").as_posix() for p in (release / "dataset").rglob("*.parquet")) == [
        "default/nouns-00000-of-00001.parquet",
        "default/pronouns-00000-of-00001.parquet",
        "paper/nouns-00000-of-00001.parquet",
        "paper/pronouns-00000-of-00001.parquet",
        "scm/generation-00000-of-00001.parquet",
        "scm/survey-00000-of-00001.parquet",
    ]

    metric = release / "metric"
    assert sorted(p.name for p in metric.iterdir()) == ["README.md", "app.py", "queerbench.py", "requirements.txt"]
    checkout = find_checkout()
    source = (checkout / "metric_queerbench" / "metric_queerbench.py").read_bytes()
    assert (metric / "queerbench.py").read_bytes() == source
    meta = _front_matter(metric / "README.md")
    assert meta["tags"] == ["evaluate", "measurement"]
    assert (meta["sdk"], meta["sdk_version"], meta["app_file"]) == ("gradio", gradio.__version__, "app.py")

    space = release / "space"
    assert (space / "app.py").read_bytes() == (checkout / "space" / "app.py").read_bytes()
    meta = _front_matter(space / "README.md")
    assert (meta["sdk"], meta["sdk_version"], meta["app_file"]) == ("gradio", gradio.__version__, "app.py")
    assert str(meta["python_version"]).startswith("3.")
    assert meta["datasets"] == [f"{NS}/queerbench"]

    for folder, pin in (("metric", f"queerbench=={__version__}"), ("space", f"queerbench[space]=={__version__}")):
        lines = [
            ln for ln in (release / folder / "requirements.txt").read_text().splitlines() if ln.startswith("queer")
        ]
        assert lines == [pin]
        assert f"Release {TAG}" in (release / folder / "README.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_released_metric_space_loads_the_library_not_itself(release: Path) -> None:
    """On the Space, app.py sits next to queerbench.py; `import queerbench` in the module must find the library —
    the library the Space installs: its requirements pin ``queerbench==<version>``, resolved here to this
    version's built wheel, installed on its own (``tests/built_dist.py``) and first on the path, not the checkout."""
    (pin,) = [ln for ln in (release / "metric" / "requirements.txt").read_text().splitlines() if ln.startswith("queer")]
    assert pin == f"queerbench=={__version__}"  # what installed_wheel() installs
    target = installed_wheel()
    code = (
        "import sys, json; sys.path.insert(0, '.'); import app, queerbench; "
        "r = app.compute(json.dumps(app.EXAMPLE), 'paper'); print(queerbench.__file__); "
        "print(json.dumps(r['queerbench']))"
    )
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(target)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=release / "metric", env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    library, result = proc.stdout.strip().splitlines()[-2:]
    assert Path(library).is_relative_to(target / "queerbench")  # the wheel's library, not the checkout's
    assert json.loads(result) == {"queer": 111.66, "non-queer": 38.33}


def test_build_needs_the_checkout(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match="from the repository checkout"):
        build_release(tmp_path / "out", checkout=tmp_path)
    assert not (tmp_path / "out").exists()


def test_build_refuses_a_foreign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["release", "build", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ----------------------------------------------------------------------------------------------------- push
def test_dry_run_contacts_nothing(release: Path, hub: HubServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["release", "push", "--dir", str(release)]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and f"space (gradio) repo {NS}/queerbench-demo" in out and f"tag {TAG}" in out
    assert hub.state.requests == [] and hub.state.repos == {}


def test_push_without_token_is_an_error(
    release: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 2
    assert "HF_TOKEN is not set" in capsys.readouterr().err
    assert hub.state.requests == []


def test_push_creates_uploads_and_tags_all_three(
    release: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_test_token")
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 0
    out = capsys.readouterr()
    assert "hf_secret_test_token" not in out.out + out.err
    assert f"published release {TAG}" in out.out

    assert set(hub.state.repos) == set(REPOS)
    for key, folder in REPOS.items():
        repo = hub.state.repos[key]
        local = {
            p.relative_to(release / folder).as_posix(): p.read_bytes()
            for p in (release / folder).rglob("*")
            if p.is_file()
        }
        assert repo.files == local
        assert len(repo.commits) == 1 and repo.tags == {TAG: repo.head}
    assert hub.state.repos[("space", f"{NS}/queerbench")].sdk == "gradio"
    assert hub.state.repos[("space", f"{NS}/queerbench-demo")].sdk == "gradio"
    # every tag check happened before the first repo was created
    methods = [p for _, p in hub.state.requests]
    first_create = methods.index("/api/repos/create")
    assert sum(p.endswith("/refs") for p in methods[:first_create]) == 3

    # a second push of the same version stops at the tag check
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 2
    assert f"{TAG} is already tagged" in capsys.readouterr().err


def test_existing_tag_on_any_repo_stops_before_upload(
    release: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    hub.state.add_repo("dataset", f"{NS}/queerbench")
    hub.state.add_repo("space", f"{NS}/queerbench-demo", tags={TAG: "b" * 40})
    with pytest.raises(
        ReleaseError, match=rf"{TAG} is already tagged on space {NS}/queerbench-demo; nothing was uploaded"
    ):
        push_release(release, yes=True, log=lambda _m: None)
    assert all(not r.files and not r.commits for r in hub.state.repos.values())
    assert not any(p in ("/api/repos/create",) or "/commit/" in p or "/tag/" in p for _, p in hub.state.requests)
