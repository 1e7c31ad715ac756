"""``results push`` and ``release build|push`` against what a probe of faults and secrets found (issue 38): only
regular files inside a results folder are pushed and each is listed; a folder without rows or with a malformed row is
refused; a Hub that cannot be reached is one line after one request, naming the variable that keeps it offline; a
release uploads exactly the files its build recorded, never prints a password inside ``TWINE_REPOSITORY_URL``, and
``--overwrite`` leaves the user's own files alone.

The Hub is the mock of ``tests/hub_server.py``, the package index the local pypiserver of ``tests/package_index.py``.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from queerbench.cli import main
from queerbench.reporting.rows import ResultRow
from tests.hub_server import HubServer
from tests.net import free_port
from tests.package_index import LocalIndex, fake_dist, need_index_tools

NS = "qb-test"
RESULTS = ("dataset", "queerbench/queerbench-results")
PRIVATE = "PRIVATE-ssh-key-do-not-upload"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def _row(**changes: object) -> dict:
    row = ResultRow(
        task="default",
        benchmark="queerbench",
        model="tiny/model",
        method="scored",
        k=5,
        toxicity="none",
        scores={"queer": 12.5, "non-queer": 10.0},
        n={"queer": 4, "non-queer": 4},
        signature="task:default|method:scored|model:tiny/model",
    ).to_dict()
    return {**row, **changes}


def _eval_folder(root: Path, rows: list[dict]) -> Path:
    """An eval folder as `queerbench eval` leaves it: its rows and card."""
    folder = root / "eval"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"rows": rows}))
    (folder / "card.md").write_text("# card\n")
    return folder


def _one_line(err: str) -> str:
    assert err.startswith("queerbench: error: ") and err.count("\n") == 1, err
    return err


def _uploaded(hub: HubServer) -> bytes:
    return b"".join(b for repo in hub.state.repos.values() for b in repo.files.values())


# ------------------------------------------------------------------------------------------------- results push
def test_results_push_uploads_regular_files_only_and_lists_each(
    tmp_path: Path, hub: HubServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """S1: a report.md or a figure linked to a private file, or a linked run folder, is never uploaded."""
    secret = tmp_path / "id_rsa"
    secret.write_text(PRIVATE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "report.md").write_text(PRIVATE)
    folder = _eval_folder(tmp_path, [_row()])
    (folder / "heatmap.png").write_bytes(b"\x89PNG real figure")
    (folder / "report.md").symlink_to(secret)
    (folder / "extra.png").symlink_to(secret)
    (folder / "default-scored").symlink_to(elsewhere, target_is_directory=True)

    assert main(["results", "push", str(folder)]) == 0
    out = capsys.readouterr().out
    assert main(["results", "push", str(folder), "--yes"]) == 0
    assert PRIVATE.encode() not in _uploaded(hub)
    files = hub.state.repos[RESULTS].files
    assert sorted(n.rsplit("/", 1)[-1] for n in files if n.startswith("results/")) == [
        "card.md", "heatmap.png", "results.json"
    ]  # fmt: skip
    for name in ("card.md", "heatmap.png", "results.json"):
        assert f"\n  {name} (" in out  # each file it would upload, listed
    for name in ("default-scored", "extra.png", "report.md"):
        assert f"left out: {name} (a symbolic link" in out
    assert "would upload 3 files" in out and PRIVATE not in out


def test_results_push_refuses_a_malformed_row(
    tmp_path: Path, hub: HubServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """S6: a run whose scores.json makes a row no reader can use (``k: [1]``) is never pushed."""
    run = tmp_path / "run"
    run.mkdir()
    scores = {
        "config": "default",
        "k": [1],
        "n": {"queer": 3, "non-queer": 3},
        "queerbench": {"queer": 1.0, "non-queer": 2.0},
        "run": {"model": "tiny/model", "method": "mlm"},
        "signature": "task:default|method:mlm|model:tiny/model",
    }
    (run / "scores.json").write_text(json.dumps(scores))
    for extra in ([], ["--yes"]):
        assert main(["results", "push", str(run), *extra]) == 2
        err = _one_line(capsys.readouterr().err)
        # refused where the row is read (the leaderboard's reader names the file) or where push checks it
        assert "'k' must be a positive integer" in err and ("scores.json" in err or "nothing was uploaded" in err)
    assert hub.state.repos == {}  # nothing reached the Hub
    scores["k"] = 1
    scores["queerbench"]["queer"] = "abc"
    (run / "scores.json").write_text(json.dumps(scores))
    assert main(["results", "push", str(run), "--yes"]) == 2
    assert "scores['queer'] must be a number" in _one_line(capsys.readouterr().err)
    assert hub.state.repos == {}


def test_results_push_refuses_a_result_without_rows_before_the_dry_run(
    tmp_path: Path, hub: HubServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """U11: an eval whose every part failed has no rows: refused at once, never an empty result on the Hub."""
    folder = _eval_folder(tmp_path, [])
    (folder / "eval.json").write_text(json.dumps({"parts": [{"folder": "default-scored", "status": "failed"}]}))
    for extra in ([], ["--yes"]):
        assert main(["results", "push", str(folder), *extra]) == 2
        captured = capsys.readouterr()
        assert "holds no result rows" in _one_line(captured.err) and "would upload" not in captured.out
    assert hub.state.repos == {} and hub.state.requests == []


class _Hangup:
    """A server that accepts each connection and closes it at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def test_results_push_dry_run_without_the_hub_lists_the_files_then_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """T8: the files are listed without the network; an unreachable Hub is one line naming it, after one request."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    folder = _eval_folder(tmp_path, [_row()])
    port = free_port()  # nothing listens: connection refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert main(["results", "push", str(folder)]) == 2
    captured = capsys.readouterr()
    assert "\n  card.md (" in captured.out and "\n  results.json (" in captured.out
    err = _one_line(captured.err)
    assert f"could not reach the Hub at http://127.0.0.1:{port} (datasets/queerbench/queerbench-results)" in err
    assert "ConnectError" in err and "Traceback" not in err

    hangup = _Hangup()
    try:
        monkeypatch.setenv("HF_ENDPOINT", hangup.url)
        assert main(["results", "push", str(folder)]) == 2
        assert f"could not reach the Hub at {hangup.url}" in _one_line(capsys.readouterr().err)
        assert hangup.accepted == 1  # one request, no retries
    finally:
        hangup.sock.close()


def test_results_push_offline_names_the_variable_that_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """T8: ``TRANSFORMERS_OFFLINE=1`` alone keeps huggingface_hub offline; the refusal names it."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what huggingface_hub reads from it
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    folder = _eval_folder(tmp_path, [_row()])
    assert main(["results", "push", str(folder)]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "TRANSFORMERS_OFFLINE is set" in err and "HF_HUB_OFFLINE" not in err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["results", "push", str(folder)]) == 2
    assert "HF_HUB_OFFLINE is set" in _one_line(capsys.readouterr().err)


# ------------------------------------------------------------------------------------------------------ release
@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dist")
    fake_dist(folder)
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> Path:
    out = tmp_path_factory.mktemp("release") / "v"
    assert main(["release", "build", "--out", str(out), "--namespace", NS, "--dist", str(dist)]) == 0
    return out


@pytest.fixture
def release(built: Path, tmp_path: Path) -> Path:
    """A copy of the build that a test may change."""
    copy = tmp_path / "release"
    shutil.copytree(built, copy, symlinks=True)
    return copy


def test_release_build_overwrite_replaces_only_its_own_files(
    tmp_path: Path, dist: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """D4: NOTES.md and .git/ that the user added to an earlier build survive ``--overwrite``."""
    out = tmp_path / "v"
    build = ["release", "build", "--out", str(out), "--namespace", NS, "--dist", str(dist)]
    assert main(build) == 0
    built = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    (out / "NOTES.md").write_text("my notes")
    (out / ".git").mkdir()
    (out / ".git" / "config").write_text("[core]")
    (out / "space" / "app.py").write_text("edited")  # the build's own file: replaced
    assert main([*build, "--overwrite"]) == 0
    assert (out / "NOTES.md").read_text() == "my notes" and (out / ".git" / "config").read_text() == "[core]"
    assert (out / "space" / "app.py").read_text() != "edited"
    assert set(json.loads((out / "release.json").read_text())["files"]) == built - {"release.json"}  # recorded
    # a build of an earlier queerbench recorded no files: its four folders are its own, nothing else
    manifest = json.loads((out / "release.json").read_text())
    del manifest["files"]
    (out / "release.json").write_text(json.dumps(manifest))
    (out / "space" / "stale.txt").write_text("left by the earlier build")
    assert main([*build, "--overwrite"]) == 0
    assert (out / "NOTES.md").read_text() == "my notes" and (out / ".git" / "config").is_file()
    assert not (out / "space" / "stale.txt").exists()
    capsys.readouterr()


@pytest.mark.parametrize(
    "change",
    ["extra file", "symlink", "linked folder", "folder outside", "absolute folder", "changed file", "extra dist"],
)
def test_release_push_refuses_anything_the_build_did_not_record(
    release: Path, tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """S4: a .env, a link to a private file, a release.json naming a folder outside the build, a changed file."""
    secret = tmp_path / "private"
    secret.mkdir()
    (secret / "app.py").write_text(PRIVATE)
    manifest = json.loads((release / "release.json").read_text())
    if change == "extra file":
        (release / "space" / ".env").write_text(f"TOKEN={PRIVATE}")
        want = "space/.env was not written by the build"
    elif change == "symlink":
        (release / "metric" / "notes.md").symlink_to(secret / "app.py")
        want = "metric/notes.md is a symbolic link"
    elif change == "linked folder":
        (release / "dataset" / "more").symlink_to(secret, target_is_directory=True)
        want = "dataset/more is a symbolic link"
    elif change in ("folder outside", "absolute folder"):
        manifest["repos"]["space"]["folder"] = "../private" if change == "folder outside" else str(secret)
        (release / "release.json").write_text(json.dumps(manifest))
        want = "as the space folder, which is not a folder of the build"
    elif change == "changed file":
        (release / "space" / "app.py").write_text(PRIVATE)
        want = "space/app.py is missing or changed since the build"
    else:
        fake_dist(tmp_path / "other", version="0.0.1")
        shutil.copy(next((tmp_path / "other").glob("*.whl")), release / "dist")
        want = "was not written by the build"
    assert main(["release", "push", "--dir", str(release)]) == 2  # the dry run already refuses
    captured = capsys.readouterr()
    assert want in _one_line(captured.err) and PRIVATE not in captured.out + captured.err


def test_release_push_uploads_exactly_the_recorded_files(
    release: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """S4: the Hub gets the recorded files, byte for byte; a __pycache__ left by trying the app is not uploaded."""
    need_index_tools()
    (release / "space" / "__pycache__").mkdir()
    (release / "space" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0compiled")
    with LocalIndex(release.parent / "packages") as index:
        for name, value in index.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("QUEERBENCH_INDEX_URL", raising=False)
        assert main(["release", "push", "--dir", str(release), "--yes"]) == 0
    for entry in json.loads((release / "release.json").read_text())["repos"].values():
        files = hub.state.repos[(entry["repo_type"], entry["repo_id"])].files
        root = release / entry["folder"]
        built = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert files == {p.relative_to(root).as_posix(): p.read_bytes() for p in built}
    assert "__pycache__" not in capsys.readouterr().out


def test_release_push_never_prints_a_password_inside_the_index_url(
    release: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """S3: ``TWINE_REPOSITORY_URL=https://user:password@host/`` is printed as ``https://host/``."""
    need_index_tools()
    password = "s3cret-Pa55word"
    with LocalIndex(release.parent / "packages") as index:
        for name, value in index.env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("QUEERBENCH_INDEX_URL", raising=False)
        with_password = index.url.replace("http://", f"http://uploader:{password}@")
        monkeypatch.setenv("TWINE_REPOSITORY_URL", with_password)
        assert main(["release", "push", "--dir", str(release)]) == 0  # the dry run's plan
        assert main(["release", "push", "--dir", str(release), "--yes"]) == 0
        captured = capsys.readouterr()
        assert f"uploaded {', '.join(json.loads((release / 'release.json').read_text())['dist']['files'])}" in (
            captured.out
        )
        assert index.url in captured.out and password not in captured.out + captured.err
    # an index that cannot be reached: the error names it, without the password
    gone = f"http://uploader:{password}@127.0.0.1:{free_port()}/"
    monkeypatch.setenv("TWINE_REPOSITORY_URL", gone)
    assert main(["release", "push", "--dir", str(release), "--yes"]) == 2
    captured = capsys.readouterr()
    assert "could not read http://127.0.0.1:" in _one_line(captured.err)
    assert password not in captured.out + captured.err
