"""Files and folders the library writes honour the umask (outputs and cached sources)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from queerbench.base.files import atomic_dir, write_text
from queerbench.run.pipeline import RunOptions, run_benchmark
from tests.tiny_models import tiny_bert

FAST = {"n_bootstrap": 0, "n_permutations": 0}


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


# --------------------------------------------------------------------------------------------------- file modes
@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775)])
def test_outputs_honour_the_umask(bert: Path, tmp_path: Path, umask: int, file_mode: int, dir_mode: int):
    old = os.umask(umask)
    try:
        text = write_text(tmp_path / "a.txt", "x")
        with atomic_dir(tmp_path / "built", overwrite=False, is_ours=lambda _: True) as tmp:
            (tmp / "f").write_text("x")
        run_benchmark(RunOptions(model=str(bert), limit=1, toxicity="none", **FAST), tmp_path / "r", log=print)
    finally:
        os.umask(old)
    assert stat.S_IMODE(text.stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "built").stat().st_mode) == dir_mode
    for name in ("run.json", "predictions.parquet", "scores.json", "report.md", "heatmap.png", "model.json"):
        assert stat.S_IMODE((tmp_path / "r" / name).stat().st_mode) == file_mode, name


def test_cached_sources_honour_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from queerbench.base.sources import _tmp_in

    old = os.umask(0o002)
    try:
        assert stat.S_IMODE(_tmp_in(tmp_path).stat().st_mode) == 0o664
    finally:
        os.umask(old)
