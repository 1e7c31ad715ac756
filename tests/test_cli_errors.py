"""Every bad input a new user can give the CLI ends in exit status 2, one line on stderr, no traceback — and leaves
nothing half-made behind.

Each case runs ``python -m queerbench`` as a subprocess (with this checkout first on ``PYTHONPATH``), the way a user
runs it, so that tracebacks printed by the interpreter itself, chained errors and stray output are all caught.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.tiny_models import tiny_bert

REPO = Path(__file__).resolve().parents[1]
QUIET = {"TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1", "PYTHONWARNINGS": "ignore"}


def queerbench(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, **QUIET, **(env or {})}
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "queerbench", *args],
        cwd=cwd,
        env={k: v for k, v in environ.items() if v is not None},
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line_error(proc: subprocess.CompletedProcess, *needles: str, code: int = 2) -> str:
    """Assert the documented failure shape and return the message."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("queerbench: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A folder nobody can write to: mode 0555, and immutable when the tests run as root (root ignores modes)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = os.geteuid() == 0 and shutil.which("chattr") is not None
    if immutable:
        subprocess.run(["chattr", "+i", str(folder)], check=False, capture_output=True)
    try:
        try:
            (folder / "probe").touch()
        except OSError:
            pass
        else:
            pytest.fail(f"could not make {folder} read-only here (as root, this needs chattr +i on the file system)")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)
        folder.chmod(0o755)


def test_out_pointing_at_a_file(bert: Path, tmp_path: Path):
    target = tmp_path / "a-file"
    target.write_text("mine")
    proc = queerbench("run", "--model", str(bert), "--limit", "1", "--toxicity", "none", "--out", str(target))
    one_line_error(proc, str(target), "is a file", "--out")
    assert target.read_text() == "mine"


def test_out_below_a_file(bert: Path, tmp_path: Path):
    target = tmp_path / "a-file"
    target.write_text("mine")
    proc = queerbench("run", "--model", str(bert), "--limit", "1", "--toxicity", "none", "--out", str(target / "run"))
    one_line_error(proc, "which is a file", "--out")


def test_out_in_a_read_only_folder(bert: Path, read_only_dir: Path):
    out = read_only_dir / "run"
    proc = queerbench("run", "--model", str(bert), "--limit", "1", "--toxicity", "none", "--out", str(out))
    one_line_error(proc, str(out), "not writable", "--out")


def test_default_out_from_a_read_only_working_directory(bert: Path, read_only_dir: Path):
    proc = queerbench("run", "--model", str(bert), "--limit", "1", "--toxicity", "none", cwd=read_only_dir)
    one_line_error(proc, "default output folder", str(read_only_dir), "pass --out")


def test_toxicity_hf_missing_folder(bert: Path, tmp_path: Path):
    proc = queerbench(
        "run", "--model", str(bert), "--limit", "1", "--toxicity", "hf:/nonexistent", "--out", str(tmp_path / "r")
    )
    one_line_error(proc, "/nonexistent", "no such folder")
    assert not (tmp_path / "r").exists()


def test_model_folder_that_does_not_exist(tmp_path: Path):
    proc = queerbench("run", "--model", "/no/such/dir", "--toxicity", "none", "--out", str(tmp_path / "r"))
    one_line_error(proc, "--model /no/such/dir", "no such")
    assert not (tmp_path / "r").exists()


def test_toxicity_precomputed_is_for_score(bert: Path, tmp_path: Path):
    proc = queerbench("run", "--model", str(bert), "--toxicity", "precomputed", "--out", str(tmp_path / "r"))
    one_line_error(proc, "--toxicity precomputed", "queerbench score")
    assert not (tmp_path / "r").exists()


def test_top_k_above_the_whole_word_vocabulary(bert: Path, tmp_path: Path):
    proc = queerbench(
        "run", "--model", str(bert), "--top-k", "100000", "--toxicity", "none", "--out", str(tmp_path / "r")
    )
    one_line_error(proc, "--top-k 100000", "choose --top-k <=")
    assert not (tmp_path / "r").exists()  # no half-made run.json or .chunks


def test_score_an_empty_csv(tmp_path: Path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    one_line_error(queerbench("score", str(empty)), str(empty), "empty")


@pytest.fixture(scope="module")
def default_run(bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished `default`-config top-5 run (the CLI's defaults) on one template."""
    run = tmp_path_factory.mktemp("runs") / "run"
    done = queerbench("run", "--model", str(bert), "--limit", "1", "--toxicity", "none", "--bootstrap", "0",
                      "--permutations", "0", "--out", str(run))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return run


def test_check_predictions_against_a_non_csv(default_run: Path, tmp_path: Path):
    binary = tmp_path / "not-a.csv"
    binary.write_bytes((default_run / "predictions.parquet").read_bytes())
    one_line_error(queerbench("check-predictions", str(default_run), "--against", str(binary)), str(binary), "CSV")


def test_check_predictions_says_config_and_k_differ(default_run: Path, reference_file):
    """A default top-5 run against the paper's top-1 file: the numbers come with the reason they mean little."""
    paper_top1 = reference_file("upstream/queerbench/data/prediction/bert-base-uncased_template_1.csv")
    proc = queerbench("check-predictions", str(default_run), "--against", str(paper_top1))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert any("config 'default'" in w and "--config paper" in w for w in warnings), proc.stderr
    assert any("top-5" in w and "top-1" in w for w in warnings), proc.stderr


def test_readme_first_command_offline(tmp_path: Path):
    """`queerbench run --model bert-base-uncased` with no data directory and no network: a short line that names
    QUEERBENCH_DATA_DIR and the missing file, and no `runs/` folder left behind."""
    env = {
        "QUEERBENCH_DATA_DIR": None,
        "QUEERBENCH_OFFLINE": "1",
        "QUEERBENCH_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
    }
    message = one_line_error(
        queerbench("run", "--model", "bert-base-uncased", cwd=tmp_path, env=env), "QUEERBENCH_DATA_DIR", "missing"
    )
    assert len(message) < 450, len(message)
    assert not (tmp_path / "runs").exists()


def test_readme_first_command_without_the_model_in_the_cache(tmp_path: Path):
    """The data directory is set, but bert-base-uncased is not in the (empty) Hugging Face cache and the Hub is off."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "QUEERBENCH_CACHE": str(tmp_path / "cache")}
    message = one_line_error(
        queerbench("run", "--model", "bert-base-uncased", cwd=tmp_path, env=env),
        "bert-base-uncased",
        "Hub",
    )
    assert len(message) < 450, len(message)
    assert not (tmp_path / "runs").exists()


def test_a_changed_lexicon_fails_before_inference(bert: Path, tmp_path: Path, data_folder):
    data = data_folder(
        "upstream/queerbench/data/templates", "upstream/queerbench/data/queer_identities", "lexicons/hurtlex"
    )
    hurtlex = data / "lexicons/hurtlex/hurtlex_EN.tsv"
    hurtlex.write_text(hurtlex.read_text() + "x\ty\tz\tw\tv\tu\n")
    proc = queerbench(
        "run", "--model", str(bert), "--limit", "1", "--toxicity", "none", "--out", str(tmp_path / "r"),
        env={"QUEERBENCH_DATA_DIR": str(data), "QUEERBENCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    one_line_error(proc, "checksum mismatch", "hurtlex")
    assert not (tmp_path / "r").exists()


def test_rerun_against_a_changed_model_folder(tmp_path: Path):
    from safetensors.torch import load_file, save_file

    model = tiny_bert(tmp_path, name="bert-to-change")
    out = tmp_path / "run"
    args = ("run", "--model", str(model), "--limit", "1", "--toxicity", "none", "--bootstrap", "0",
            "--permutations", "0", "--out", str(out))  # fmt: skip
    assert queerbench(*args).returncode == 0
    before = pd.read_parquet(out / "predictions.parquet")
    weights = load_file(model / "model.safetensors")
    name = next(iter(weights))
    weights[name] = weights[name] + 1.0  # same size, new values
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    one_line_error(queerbench(*args), "changed", "model.safetensors", "delete")
    pd.testing.assert_frame_equal(pd.read_parquet(out / "predictions.parquet"), before)  # untouched
