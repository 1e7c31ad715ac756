"""``queerbench release build|push``: one version across package, dataset, metric and Space; the sdist and the wheel
pushed to a local package index first, then the rest to a mock Hub.

The mock Hub (``tests/hub_server.py``) runs on 127.0.0.1; ``HF_ENDPOINT`` points the release at it, and twine's
``TWINE_REPOSITORY_URL`` at a local pypiserver (``tests/package_index.py``; both read at call time, not at import).
The sdist and the wheel here are small fakes that twine and the index accept; ``tests/test_release_chain.py``
releases the real ones and installs them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gradio
import pytest
import yaml

from queerbench import __version__
from queerbench.cli import main
from queerbench.hub.release import PackageIndex, ReleaseError, build_release, find_checkout, push_release
from tests.built_dist import installed_wheel
from tests.hub_server import HubServer
from tests.net import free_port
from tests.package_index import LocalIndex, fake_dist, need_index_tools

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
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a (fake) sdist and wheel of this version, as `python -m build` would write them."""
    folder = tmp_path_factory.mktemp("dist")
    fake_dist(folder)
    return folder


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> Path:
    out = tmp_path_factory.mktemp("release") / "v"
    assert main(["release", "build", "--out", str(out), "--namespace", NS, "--dist", str(dist)]) == 0
    return out


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalIndex]:
    """An empty local package index that twine's settings point at."""
    need_index_tools()
    with LocalIndex(tmp_path / "packages") as local:
        for name, value in local.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("QUEERBENCH_INDEX_URL", raising=False)
        yield local


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _dist_names(release: Path) -> set[str]:
    return {p.name for p in (release / "dist").iterdir()}


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


# ---------------------------------------------------------------------------------------------------- build
def test_build_writes_three_folders_with_one_version(release: Path, dist: Path) -> None:
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
        "misgendered/test-00000-of-00001.parquet",
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

    # the sdist and the wheel, byte for byte those given, recorded with their checksums
    assert manifest["dist"] == {"folder": "dist", "files": {p.name: _sha256(p) for p in sorted(dist.iterdir())}}
    assert {p.name: p.read_bytes() for p in (release / "dist").iterdir()} == {
        p.name: p.read_bytes() for p in dist.iterdir()
    }

    for folder, pin in (
        ("metric", f"queerbench=={__version__}"),
        ("space", f"queerbench[space,scm,surrogate]=={__version__}"),
    ):
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
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(target), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=release / "metric", env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    library, result = proc.stdout.strip().splitlines()[-2:]
    assert Path(library).is_relative_to(target / "queerbench")  # the wheel's library, not the checkout's
    assert json.loads(result) == {"queer": 111.66, "non-queer": 38.33}


def test_build_needs_this_versions_sdist_and_wheel(tmp_path: Path) -> None:
    (tmp_path / "dist").mkdir()
    fake_dist(tmp_path / "dist", version="0.0.1")  # another version only
    with pytest.raises(ReleaseError, match=rf"must hold one sdist and one wheel of queerbench {__version__}"):
        build_release(tmp_path / "out", dist=tmp_path / "dist")
    assert not (tmp_path / "out").exists()


def test_build_needs_the_checkout(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match="from the repository checkout"):
        build_release(tmp_path / "out", checkout=tmp_path)
    assert not (tmp_path / "out").exists()


def test_build_refuses_a_foreign_folder(tmp_path: Path, dist: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["release", "build", "--out", str(tmp_path), "--dist", str(dist)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ----------------------------------------------------------------------------------------------------- push
def test_dry_run_contacts_nothing(
    release: Path, hub: HubServer, index: LocalIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["release", "push", "--dir", str(release)]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and f"space (gradio) repo {NS}/queerbench-demo" in out and f"tag {TAG}" in out
    names = ", ".join(json.loads((release / "release.json").read_text())["dist"]["files"])
    assert f"index: upload {names} to {index.url}, then wait until {index.simple_url} serves {names}" in out
    assert hub.state.requests == [] and hub.state.repos == {}
    assert index.names() == set()


def test_push_without_token_is_an_error(
    release: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 2
    assert "HF_TOKEN is not set" in capsys.readouterr().err
    assert hub.state.requests == []


def test_push_creates_uploads_and_tags_all_three(
    release: Path,
    hub: HubServer,
    index: LocalIndex,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_test_token")
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 0
    out = capsys.readouterr()
    assert "hf_secret_test_token" not in out.out + out.err and "test-password" not in out.out + out.err
    assert f"published release {TAG}" in out.out
    assert {p.name: p.read_bytes() for p in index.packages.iterdir()} == {
        p.name: p.read_bytes() for p in (release / "dist").iterdir()
    }

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

    # a second push of the same version stops at the index, which has it
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 2
    assert f"queerbench {__version__} is already on {index.simple_url}" in capsys.readouterr().err
    # and, told that the index step is done, at the tags
    assert main(["release", "push", "--dir", str(release), "--yes", "--index-published"]) == 2
    assert f"{TAG} is already tagged" in capsys.readouterr().err


def test_existing_tag_on_any_repo_stops_before_upload(
    release: Path, hub: HubServer, index: LocalIndex, monkeypatch: pytest.MonkeyPatch
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
    assert index.names() == set()  # not on the index either


# ------------------------------------------------------------------------------------------ the package index first
class _SeenByTheHub(list):
    """A Hub request log that also notes, for each request, which files the index held at that moment."""

    def __init__(self, index: LocalIndex) -> None:
        super().__init__()
        self.index, self.index_held = index, []

    def append(self, request: tuple[str, str]) -> None:
        self.index_held.append(self.index.names())
        super().append(request)


def test_the_index_serves_the_version_before_the_hub_gets_anything(
    release: Path,
    hub: HubServer,
    index: LocalIndex,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    hub.state.requests = seen = _SeenByTheHub(index)
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 0
    dist = _dist_names(release)
    paths = [p for _, p in seen]
    first_create = paths.index("/api/repos/create")
    # the tag checks came before anything was uploaded anywhere; every upload to the Hub after the index had both
    assert all(held == set() for held in seen.index_held[:first_create])
    assert sum(p.endswith("/refs") for p in paths[:first_create]) == 3
    assert all(held == dist for held in seen.index_held[first_create:])
    out = capsys.readouterr().out
    assert out.index(f"{index.simple_url} serves queerbench {__version__}") < out.index("uploaded dataset")


def test_a_version_the_index_has_is_refused_before_anything_is_uploaded(
    release: Path, hub: HubServer, index: LocalIndex, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    other = fake_dist(tmp_path / "other", note=" (another build)")  # same version, other bytes
    PackageIndex.from_env().upload([other["sdist"], other["wheel"]])
    before = {p.name: p.read_bytes() for p in index.packages.iterdir()}
    with pytest.raises(
        ReleaseError, match=rf"queerbench {__version__} is already on {index.simple_url} .*nothing was uploaded"
    ):
        push_release(release, yes=True, log=lambda _m: None)
    assert hub.state.requests == [] and hub.state.repos == {}
    assert {p.name: p.read_bytes() for p in index.packages.iterdir()} == before
    # told the index step is done, it still refuses files that are not this build's
    with pytest.raises(ReleaseError, match=r"--index-published, but .* not this build's"):
        push_release(release, yes=True, index_published=True, log=lambda _m: None)
    assert hub.state.requests == []


def test_index_published_checks_instead_of_uploading(
    release: Path, hub: HubServer, index: LocalIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI publishes with trusted publishing, then runs `release push --index-published`."""
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    with pytest.raises(ReleaseError, match=r"--index-published, but .* serves none of queerbench"):
        push_release(release, yes=True, index_published=True, log=lambda _m: None)  # nothing on the index yet
    assert hub.state.requests == []
    PackageIndex.from_env().upload(sorted((release / "dist").iterdir()))
    stamps = {p.name: p.stat().st_mtime_ns for p in index.packages.iterdir()}
    result = push_release(release, yes=True, index_published=True, log=lambda _m: None)
    assert {e["tag"] for e in result.values()} == {TAG}
    assert {p.name: p.stat().st_mtime_ns for p in index.packages.iterdir()} == stamps  # nothing uploaded again


def test_a_failed_hub_step_says_what_was_published_and_how_to_finish(
    release: Path, hub: HubServer, index: LocalIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import HfApi

    monkeypatch.setenv("HF_TOKEN", "hf_test")
    real = HfApi.upload_folder

    def fail_for_the_metric(self: HfApi, **kwargs: object) -> object:
        if str(kwargs["folder_path"]).endswith("metric"):
            raise RuntimeError("the Hub is down")
        return real(self, **kwargs)

    monkeypatch.setattr(HfApi, "upload_folder", fail_for_the_metric)
    with pytest.raises(ReleaseError) as err:
        push_release(release, yes=True, log=lambda _m: None)
    message = str(err.value)
    assert f"uploading metric to {NS}/queerbench failed: RuntimeError: the Hub is down" in message
    assert f"Published: queerbench {__version__} on {index.simple_url}" in message
    assert f"uploaded without a tag: {NS}/queerbench" in message
    assert f"queerbench release push --dir {release} --yes --index-published" in message
    assert index.names() == _dist_names(release)
    assert all(not r.tags for r in hub.state.repos.values())

    monkeypatch.setattr(HfApi, "upload_folder", real)
    result = push_release(release, yes=True, index_published=True, log=lambda _m: None)  # the command it named
    assert {e["repo_id"] for e in result.values()} == {r for _, r in REPOS}
    assert all(r.tags == {TAG: r.head} for r in hub.state.repos.values())


class _NothingHere(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_index_that_does_not_serve_in_time_stops_before_the_hub(
    release: Path, hub: HubServer, index: LocalIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _NothingHere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        simple = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        monkeypatch.setenv("QUEERBENCH_INDEX_URL", simple)  # the upload lands, but this index never lists it
        with pytest.raises(ReleaseError) as err:
            push_release(release, yes=True, index_timeout=1.0, log=lambda _m: None)
    finally:
        server.shutdown()
        server.server_close()
    message = str(err.value)
    assert f"{simple} did not list" in message and "within 1 s" in message
    assert "Nothing was pushed to the Hub" in message and "--index-published" in message
    assert index.names() == _dist_names(release)
    assert not any(p == "/api/repos/create" or "/commit/" in p for _, p in hub.state.requests)


def test_without_twine_nothing_is_uploaded(
    release: Path, hub: HubServer, index: LocalIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "twine" else real(name, *a))
    with pytest.raises(ReleaseError, match=r"needs twine: pip install 'queerbench\[release\]'"):
        push_release(release, yes=True, log=lambda _m: None)
    assert hub.state.requests == [] and index.names() == set()


def test_a_changed_dist_file_is_refused(release: Path, tmp_path: Path) -> None:
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    wheel = next((copy / "dist").glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(ReleaseError, match=rf"{wheel.name} is missing or changed since the build"):
        push_release(copy, log=lambda _m: None)


@pytest.mark.parametrize(
    ("upload", "index_url", "want"),
    [
        (None, None, ("https://upload.pypi.org/legacy/", "https://pypi.org/simple/")),
        ("https://test.pypi.org/legacy", None, ("https://test.pypi.org/legacy/", "https://test.pypi.org/simple/")),
        ("http://127.0.0.1:8080", None, ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/simple/")),
        ("https://pkgs.example/legacy/", None, ("https://pkgs.example/legacy/", "https://pkgs.example/simple/")),
        (
            "https://dev.example/u/i/",
            "https://dev.example/u/i/+simple",
            ("https://dev.example/u/i/", "https://dev.example/u/i/+simple/"),
        ),
    ],
)
def test_the_index_is_read_from_twines_settings(
    monkeypatch: pytest.MonkeyPatch, upload: str | None, index_url: str | None, want: tuple[str, str]
) -> None:
    for name, value in (("TWINE_REPOSITORY_URL", upload), ("QUEERBENCH_INDEX_URL", index_url)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    index = PackageIndex.from_env()
    assert (index.upload_url, index.simple_url) == want


def test_the_release_settings_name_the_dataset_configs_or_say_they_lack_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from queerbench.base import release_config

    real = release_config.hub_config_text
    settings = json.loads(real("release.json"))
    assert release_config.load_release_config().dataset_configs == tuple(settings["dataset_configs"])
    settings.pop("dataset_configs")
    monkeypatch.setattr(
        release_config,
        "hub_config_text",
        lambda name, checkout=None: json.dumps(settings) if name == "release.json" else real(name, checkout),
    )
    with pytest.raises(release_config.ReleaseError, match=r"^hub_configs/release.json lacks \['dataset_configs'\]$"):
        release_config.load_release_config()
