"""A write that fails in the middle of a run (a full disk) is one line naming the file and what was kept; the rerun
resumes from what was kept (issue 30: "the error names neither the file nor what was kept")."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from queerbench.base.files import atomic_path
from queerbench.cli import main
from tests.test_instructed_method import BlankServer

FAST = ["--bootstrap", "20", "--permutations", "20", "--toxicity", "none", "--requests-per-minute", "100000"]


def test_atomic_path_names_the_file_a_nameless_write_error_was_about(tmp_path: Path):
    with pytest.raises(OSError) as info, atomic_path(tmp_path / "chunk.parquet"):
        raise OSError(28, "No space left on device")  # what a parquet writer raises: no file named
    assert info.value.filename == str(tmp_path / "chunk.parquet") and info.value.errno == 28
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone


def test_a_full_disk_mid_run_names_the_file_and_what_was_kept_and_the_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "run"
    real = pd.DataFrame.to_parquet
    writes = []

    def fills_up(frame, path, *args, **kwargs):  # the third part finds the disk full
        writes.append(path)
        if len(writes) == 3:
            raise OSError(28, "No space left on device")
        return real(frame, path, *args, **kwargs)

    with BlankServer({"[MASK]": ["doctor"]}) as server:
        args = ["run", "--endpoint", server.url, "--model", "served", "--limit", "3", "--top-k", "1"]
        args += ["--out", str(out), "--concurrency", "2", *FAST]
        monkeypatch.setattr(pd.DataFrame, "to_parquet", fills_up)
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        saved = sum(len(pd.read_parquet(p)) for p in (out / ".chunks").glob("chunk-*.parquet"))
        assert err.startswith(f"queerbench: error: No space left on device: {out / '.chunks'}/chunk-")
        assert f"; the predictions of {saved} of 231 sentences are saved in {out / '.chunks'}, and " in err
        assert err.endswith(
            "asking only the calls whose replies are not saved); free some space or fix the folder first"
        )
        assert 128 <= saved < 231  # the parts written before the disk filled up (and the flush at the end)
        asked = server.calls
        monkeypatch.setattr(pd.DataFrame, "to_parquet", real)
        assert main(args) == 0  # space again: the rerun resumes
        assert server.calls - asked <= 231 - saved  # the lost part's replies come from the cache
    assert len(pd.read_parquet(out / "predictions.parquet")) == 231


def test_what_was_kept_is_said_without_a_count_when_the_saved_parts_cannot_be_read(tmp_path: Path):
    """A stopped run whose saved parts cannot be counted (one is damaged) says they are kept, not that none is."""
    from queerbench.run.parts import kept

    frame = pd.DataFrame({"id": ["a", "b"], "masked_sentence": ["The [MASK] one.", "A [MASK] two."]})
    chunks = tmp_path / "run" / ".chunks"
    chunks.mkdir(parents=True)
    pd.DataFrame({"id": ["a"], "tokens": [["x"]]}).to_parquet(chunks / "chunk-000000-000001.parquet")
    assert kept(tmp_path / "run", frame) == (
        f"the predictions of 1 of 2 sentences are saved in {chunks}; rerun the same command to resume (it predicts "
        "the other 1)"
    )
    (chunks / "chunk-000001-000002.parquet").write_bytes(b"not parquet")
    assert kept(tmp_path / "run", frame) == (
        f"the predictions saved in {chunks} are kept (they could not be counted); rerun the same command to resume "
        "(it predicts the rest)"
    )
