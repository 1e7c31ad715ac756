"""The run's bookkeeping without a model: option checks, the cache key, output-folder states, claim and undo, the
model-folder pin and the run record.

Fast on purpose (no inference): ``tools/mutation.py`` runs this file against every mutant of these functions. The
behaviour through a real run (resume, reuse, refusals) is in ``test_run_key.py``, ``test_run.py`` and
``test_run_generative.py``; here each rule is pinned on its own, with the exact message a user sees.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from queerbench import __version__
from queerbench.models.generation import DEFAULT_MODEL, ResponseCache
from queerbench.run import folder as run_folder
from queerbench.run import pipeline as run_module
from queerbench.run.pipeline import RunOptions, default_out_dir
from queerbench.run.signature import Signature, cache_key
from queerbench.tasks.queerbench.templates import COLUMNS

KEY = {"model": "org/m", "revision": None, "config": "default", "mode": "default", "top_k": 5, "limit": None}


# ------------------------------------------------------------------------------------------------ option checks
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"config": "nope"}, "unknown config 'nope'; choose one of: "),
        ({"method": "nope"}, "--method must be one of auto, mlm, scored, instructed, got 'nope'"),
        ({"concurrency": 0}, "--concurrency must be at least 1 (requests in flight), got 0"),
        ({"concurrency": 2.0}, "--concurrency must be at least 1 (requests in flight), got 2.0"),
        ({"requests_per_minute": 0}, "--requests-per-minute must be > 0, got 0"),
        ({"requests_per_minute": -5.0}, "--requests-per-minute must be > 0, got -5.0"),
        (
            {"model": None, "endpoint": "http://127.0.0.1:9/v1"},
            "--endpoint needs --model NAME (the model name the endpoint serves, e.g. gpt-4o-mini)",
        ),
        (
            {"method": "instructed", "endpoint": "http://127.0.0.1:9/v1", "revision": "v1"},
            "--revision pins a Hub model's commit; an --endpoint serves its own weights: drop --revision",
        ),
        (
            {"method_settings": {"prompt_id": "nope"}},
            "unknown prompt id 'nope' (--prompt); choose one of queergen-1, queergen-2",
        ),
        ({"method_settings": {"max_new_tokens": 0}}, "--max-new-tokens must be at least 1, got 0"),
        (
            {"method_settings": {"prompt": "queergen-2"}},
            "prompt: not a setting of any method; the methods' settings are max_new_tokens (instructed), prompt_id "
            "(instructed)",
        ),
        ({"top_k": 0}, "--top-k must be a positive integer, got 0"),
        ({"top_k": 2.0}, "--top-k must be a positive integer, got 2.0"),
        ({"limit": 0}, "--limit must be at least 1 template (or omitted for all), got 0"),
        ({"dtype": "int8"}, "--dtype must be one of float32, bfloat16, float16, got 'int8'"),
        ({"batch_size": 0}, "--batch-size must be at least 1, got 0"),
        ({"toxicity_input": "words"}, "--toxicity-input must be one of neutral, full, frame, got 'words'"),
        ({"toxicity": "precomputed"}, "--toxicity precomputed reads flags stored in a file, which a new run does"),
        ({"toxicity": "nope"}, "unknown toxicity scorer 'nope'"),
    ],
)
def test_bad_options_are_refused_with_a_message_naming_the_flag(change: dict, message: str):
    with pytest.raises(ValueError) as info:
        RunOptions(**{"model": "org/m", **change})
    assert str(info.value).startswith(message)


def test_the_precomputed_refusal_names_the_command_that_reads_stored_flags():
    with pytest.raises(ValueError) as info:
        RunOptions(model="org/m", toxicity="precomputed")
    assert str(info.value) == (
        "--toxicity precomputed reads flags stored in a file, which a new run does not have; use "
        "`queerbench score FILE --toxicity precomputed` for such a file, or run with --toxicity embedded, "
        "hf:<model id or path>, perspective or none"
    )


@pytest.mark.parametrize(
    "edge",
    [
        {"concurrency": 1},
        {"requests_per_minute": 0.5},
        {"method_settings": {"max_new_tokens": 1}},
        {"top_k": 1},
        {"limit": 1},
        {"batch_size": 1},
        {"dtype": "float16"},
        {"dtype": "bfloat16"},
        {"toxicity_input": "frame"},
        {"method_settings": {"prompt_id": "queergen-2"}},
        {"method": "instructed", "endpoint": "http://127.0.0.1:9/v1"},
    ],
)
def test_the_smallest_allowed_values_are_accepted(edge: dict):
    options = RunOptions(model="org/m", **edge)
    assert all(getattr(options, k) == v for k, v in edge.items())


@pytest.mark.parametrize(
    ("method", "model"),
    [("auto", "bert-base-uncased"), ("mlm", "bert-base-uncased"), ("scored", None), ("instructed", None)],
)
def test_the_default_model_depends_on_the_method(method: str, model: str | None):
    assert RunOptions(model=None, method=method).model == (model or DEFAULT_MODEL)
    assert DEFAULT_MODEL != "bert-base-uncased"


@pytest.mark.parametrize(("config", "expected"), [("default", "neutral"), ("queergen", "neutral"), ("paper", "full")])
def test_the_toxicity_input_defaults_per_config(config: str, expected: str):
    assert RunOptions(model="org/m", config=config).toxicity_input == expected
    assert RunOptions(model="org/m", config=config, toxicity_input="frame").toxicity_input == "frame"


# ------------------------------------------------------------------------------------------------ cache key
def test_the_masked_lm_key_is_exactly_the_six_fields_and_keeps_its_old_shape():
    options = RunOptions(model="org/m", revision="v1", config="paper", top_k=3, limit=4, dtype="float16")
    expected = {
        "model": "org/m",
        "revision": "v1",
        "config": "paper",
        "top_k": 3,
        "limit": 4,
        "dtype": "float16",
    }
    assert cache_key(options) == expected
    assert cache_key(replace(options, method="mlm")) == expected  # auto and mlm: old run folders still resume
    # scoring-only options never enter the key
    other = replace(options, seed=7, n_bootstrap=3, n_permutations=0, batch_size=2, device="cpu", toxicity="none")
    assert cache_key(other) == expected


def test_a_key_of_an_earlier_version_is_the_same_run():
    """run.json files of earlier versions stored the config twice (``mode``) and left defaults out: compared by
    what they mean, they are the key of the same run, so their folders resume."""
    stored = {"model": "org/m", "revision": None, "config": "default", "mode": "default", "top_k": 5, "limit": None,
              "dtype": "float32", "method": "instructed", "endpoint": None, "prompt_id": None, "max_new_tokens": None,
              "seed": 0}  # fmt: skip
    typed = {"prompt_id": "queergen-2", "max_new_tokens": 32}
    now = cache_key(RunOptions(model="org/m", method="instructed", method_settings=typed))
    assert Signature.from_key(stored).key() == Signature.from_key(now).key()
    assert now["prompt_id"] == "queergen-2" and now["max_new_tokens"] == 32 and "mode" not in now


def test_generative_keys_add_the_method_endpoint_prompt_and_decoding():
    scored = RunOptions(model="org/m", method="scored", seed=4)
    key = cache_key(scored)
    expected = {k: v for k, v in KEY.items() if k != "mode"}
    assert key == {**expected, "dtype": "float32", "method": "scored", "endpoint": None}  # no sampling, no prompt
    own = {"prompt_id": "queergen-3"}
    served = RunOptions(model="m", method="instructed", endpoint="http://h/v1", method_settings=own, seed=4)
    key = cache_key(replace(served, method_settings={**own, "max_new_tokens": 9}))
    assert key["method"] == "instructed" and key["endpoint"] == "http://h/v1"
    assert (key["prompt_id"], key["max_new_tokens"], key["seed"]) == ("queergen-3", 9, 4)
    for change in (
        {"seed": 5},
        {"method_settings": {"prompt_id": "queergen-1"}},
        {"method_settings": {**own, "max_new_tokens": 8}},
        {"endpoint": "http://o/v1"},
    ):
        assert cache_key(replace(served, **change)) != cache_key(served), change


# ------------------------------------------------------------------------------------------------ default folder
@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"model": "org/m", "method": "scored"}, "org_m-default-k5-scored"),
        ({"model": "org/m", "method": "instructed", "limit": 3}, "org_m-default-k5-instructed-limit3"),
        ({"model": "org/m", "method": "mlm"}, "org_m-default-k5"),
        ({"model": "/models/My Model v2/"}, "models_My_Model_v2-default-k5"),
        ({"model": "org/m", "revision": "refs/pr/1"}, "org_m-default-k5-revrefs_pr_1"),
        ({"model": "a.b_c-d"}, "a.b_c-d-default-k5"),
        ({"model": "Xorg/VAE-X"}, "Xorg_VAE-X-default-k5"),  # only slashes and underscores go from the ends
        ({"model": "///"}, "x-default-k5"),
        ({"model": "_?_"}, "x-default-k5"),
        ({"model": "org/m", "revision": ""}, "org_m-default-k5"),
    ],
)
def test_default_out_dir_names(options: dict, name: str):
    assert default_out_dir(RunOptions(**options)) == Path("runs") / name


# ------------------------------------------------------------------------------------------------ folder states
def test_a_missing_or_empty_folder_is_new(tmp_path: Path):
    assert run_folder.inspect_out_dir(tmp_path / "a" / "b", KEY) == ("new", None)
    (tmp_path / "empty").mkdir()
    assert run_folder.inspect_out_dir(tmp_path / "empty", KEY) == ("new", None)
    assert not (tmp_path / "a").exists() and list((tmp_path / "empty").iterdir()) == []  # nothing written


def test_a_folder_with_foreign_files_is_refused(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError) as info:
        run_folder.inspect_out_dir(tmp_path, KEY)
    assert str(info.value) == f"output folder {tmp_path} is not empty and holds no queerbench run; choose another --out"


def _started(folder: Path, key: dict, *files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({**key, "model_fingerprint": {"kind": "hub"}}))
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")
    return folder


@pytest.mark.parametrize(
    ("files", "state"),
    [
        ((), "restart"),
        ((".chunks/model.json",), "restart"),
        ((".chunks/chunk-00003.parquet",), "resume"),
        ((".chunks/replies.sqlite",), "resume"),
        (("predictions.parquet", ".chunks/chunk-00000.parquet"), "finished"),
        (("predictions.parquet",), "finished"),
    ],
)
def test_the_state_of_a_started_folder(tmp_path: Path, files: tuple[str, ...], state: str):
    out = _started(tmp_path / "run", KEY, *files)
    found, stored = run_folder.inspect_out_dir(out, KEY)
    assert found == state and stored == {**KEY, "model_fingerprint": {"kind": "hub"}}


def test_another_run_is_refused_naming_every_field_that_differs(tmp_path: Path):
    out = _started(tmp_path / "run", KEY, "predictions.parquet")
    now = {**KEY, "top_k": 3, "limit": 2}
    with pytest.raises(FileExistsError) as info:
        run_folder.inspect_out_dir(out, now)
    assert str(info.value) == (
        f"output folder {out} holds another run (top_k: 5 there, 3 now, limit: None there, 2 now); "
        "choose another --out (or delete that folder)"
    )
    # a field the stored key lacks (an older run) differs too
    with pytest.raises(FileExistsError, match="method: None there, 'scored' now"):
        run_folder.inspect_out_dir(out, {**KEY, "method": "scored"})


def test_an_unreadable_run_json_is_one_line(tmp_path: Path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{not json")
    with pytest.raises(ValueError) as info:
        run_folder.inspect_out_dir(out, KEY)
    text = str(info.value)
    assert text.startswith(f"{out / 'run.json'} is unreadable (") and text.endswith(
        f"); delete the folder {out} or choose another --out"
    )


@pytest.mark.parametrize("chosen", [True, False])
def test_a_file_in_the_way_is_refused(tmp_path: Path, chosen: bool):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    for out, what in ((blocker, "it is a file, not a folder"), (blocker / "a" / "b", f"it lies below {blocker}")):
        with pytest.raises(ValueError) as info:
            run_folder.inspect_out_dir(out, KEY, chosen=chosen)
        text = str(info.value)
        assert text.startswith(f"cannot write the output folder {out} (") and what in text
        if chosen:
            assert "(--out)" in text and text.endswith("; choose an --out in a folder you can write to")
        else:
            assert f"(the default output folder (relative to the current directory {Path.cwd()}))" in text
            assert text.endswith("; pass --out DIR in a folder you can write to")
    assert not list(tmp_path.glob(".queerbench-write-test-*"))


def test_a_folder_that_cannot_be_written_is_refused():
    # /proc refuses new folders even to root (for whom permission bits do not bind): the real write probe says so
    out = Path("/proc/queerbench-test/run")
    if os.access("/proc", os.W_OK | os.X_OK):  # root: the permission bits pass, the real attempt fails
        try:
            os.rmdir(tempfile.mkdtemp(dir="/proc"))
        except OSError as exc:
            reason = exc.strerror
        else:  # pragma: no cover - a /proc that takes folders
            pytest.fail("/proc took a new folder")
    else:
        reason = "permission denied"
    with pytest.raises(ValueError) as info:
        run_folder.inspect_out_dir(out, KEY)  # chosen (--out) unless told otherwise
    assert str(info.value) == (
        f"cannot write the output folder {out} (--out): /proc is not writable ({reason}); "
        "choose an --out in a folder you can write to"
    )


@pytest.mark.parametrize("chosen", [True, False])
def test_a_folder_without_write_permission_is_refused_before_any_attempt(tmp_path: Path, monkeypatch, chosen: bool):
    """A read-only folder (mode 0555) of a user whom its permission bits bind: refused from the bits, with the
    nearest existing folder named. ``access(2)`` ignores the bits for root, so it answers here as it does for such
    a user (from the owner bits), whoever runs the tests."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)

    def by_owner_bits(path, mode, **kwargs):
        need = (0o400 if mode & os.R_OK else 0) | (0o200 if mode & os.W_OK else 0) | (0o100 if mode & os.X_OK else 0)
        return os.stat(path).st_mode & need == need

    monkeypatch.setattr(os, "access", by_owner_bits)
    out = locked / "a" / "run"
    try:
        with pytest.raises(ValueError) as info:
            run_folder.inspect_out_dir(out, KEY, chosen=chosen)
    finally:
        locked.chmod(0o755)
    where = "--out" if chosen else f"the default output folder (relative to the current directory {Path.cwd()})"
    fix = "choose an --out in a folder you can write to" if chosen else "pass --out DIR in a folder you can write to"
    assert str(info.value) == (
        f"cannot write the output folder {out} ({where}): {locked} is not writable (permission denied); {fix}"
    )
    assert list(locked.iterdir()) == []  # refused before anything was tried there
    (tmp_path / "open").mkdir()
    run_folder.check_writable(tmp_path / "open" / "run", chosen=chosen)  # writable bits: no refusal


def test_the_write_probe_leaves_nothing_behind(tmp_path: Path):
    run_folder.check_writable(tmp_path / "new", chosen=True)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ claim and undo
def test_claiming_a_new_folder_writes_the_record_and_says_it_created_it(tmp_path: Path):
    out = tmp_path / "a" / "run"
    record = {**KEY, "model_fingerprint": {"kind": "local", "sha256": "1"}}
    assert run_folder.claim_out_dir(out, record, "new") is True
    assert json.loads((out / "run.json").read_text()) == record
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_folder.claim_out_dir(empty, record, "new") is False and (empty / "run.json").is_file()


def test_a_restart_drops_the_old_chunks_and_a_resume_writes_nothing(tmp_path: Path):
    out = _started(tmp_path / "run", KEY, ".chunks/model.json", "keep.txt")
    record = {**KEY, "model_fingerprint": {"kind": "local", "sha256": "2"}}
    assert run_folder.claim_out_dir(out, record, "restart") is False
    assert not (out / ".chunks").exists() and json.loads((out / "run.json").read_text()) == record
    resumed = _started(tmp_path / "resumed", KEY, ".chunks/chunk-00000.parquet")
    before = (resumed / "run.json").read_text()
    assert run_folder.claim_out_dir(resumed, record, "resume") is False
    assert (resumed / "run.json").read_text() == before and (resumed / ".chunks/chunk-00000.parquet").is_file()


def test_a_claim_that_cannot_write_is_one_line_and_leaves_no_folder(tmp_path: Path, monkeypatch):
    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_folder, "write_json", full_disk)
    out = tmp_path / "run"
    with pytest.raises(ValueError) as info:
        run_folder.claim_out_dir(out, KEY, "new", chosen=True)
    assert str(info.value) == (
        f"cannot write the output folder {out} (--out): No space left on device; "
        "choose an --out in a folder you can write to"
    )
    assert not out.exists()
    kept = tmp_path / "kept"  # a folder that was there before the claim stays
    kept.mkdir()
    with pytest.raises(ValueError, match="No space left on device"):
        run_folder.claim_out_dir(kept, KEY, "new", chosen=False)
    assert kept.is_dir()


def test_a_claim_that_fails_at_once_is_one_line(tmp_path: Path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = blocker / "run"  # mkdir fails: the folder never existed, and the undo must not trip over that
    with pytest.raises(ValueError) as info:
        run_folder.claim_out_dir(out, KEY, "new")
    assert str(info.value).startswith(f"cannot write the output folder {out} (--out): ")
    assert str(info.value).endswith("; choose an --out in a folder you can write to")

    def broken(path, data):
        raise OSError("the disk went away")  # an OSError without an errno text: its type is named

    monkeypatch.setattr(run_folder, "write_json", broken)
    with pytest.raises(ValueError) as info:
        run_folder.claim_out_dir(tmp_path / "run", KEY, "new")
    assert str(info.value) == (
        f"cannot write the output folder {tmp_path / 'run'} (--out): OSError; choose an --out in a folder you can "
        "write to"
    )


def test_a_restart_without_chunks_and_an_undo_of_what_is_gone_never_fail(tmp_path: Path):
    out = _started(tmp_path / "run", KEY)  # run.json only: a restart, no .chunks folder to drop
    assert run_folder.claim_out_dir(out, KEY, "restart") is False and (out / "run.json").is_file()
    run_folder.unclaim_out_dir(out, created=False)  # no .chunks either
    assert list(out.iterdir()) == []
    run_folder.unclaim_out_dir(tmp_path / "gone", created=True)  # removed meanwhile: nothing to undo
    assert not (tmp_path / "gone").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    run_folder.unclaim_out_dir(bare, created=False)  # neither run.json nor .chunks: nothing to undo either
    assert bare.is_dir()


def _replies(path: Path, n: int) -> Path:
    with ResponseCache(path) as cache:
        for i in range(n):
            cache.put(f"k{i}", "p", 0, "doctor", {})
    return path


def test_stored_replies_counts_the_cache(tmp_path: Path):
    assert run_folder._stored_replies(tmp_path / "none.sqlite") == 0
    assert not (tmp_path / "none.sqlite").exists()  # counting never creates the cache
    assert run_folder._stored_replies(_replies(tmp_path / "three.sqlite", 3)) == 3
    assert run_folder._stored_replies(_replies(tmp_path / "zero.sqlite", 0)) == 0


def test_undoing_a_claim_that_predicted_nothing(tmp_path: Path):
    out = _started(tmp_path / "created", KEY, ".chunks/model.json")
    _replies(out / ".chunks/replies.sqlite", 0)  # an endpoint that never answered: an empty cache
    run_folder.unclaim_out_dir(out, created=True)
    assert not out.exists()
    there = _started(tmp_path / "there", KEY, ".chunks/model.json", "notes.txt")
    run_folder.unclaim_out_dir(there, created=False)  # a folder the user made: only what the claim wrote goes
    assert sorted(p.name for p in there.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("kept", ["predictions.parquet", ".chunks/chunk-00000.parquet", "replies"])
def test_undoing_keeps_anything_predicted(tmp_path: Path, kept: str):
    out = _started(tmp_path / "run", KEY, *([] if kept == "replies" else [kept]))
    if kept == "replies":
        _replies(out / ".chunks/replies.sqlite", 1)
    for created in (True, False):
        run_folder.unclaim_out_dir(out, created=created)
        assert (out / "run.json").is_file() and (out / ".chunks").is_dir() == (kept != "predictions.parquet")


# ------------------------------------------------------------------------------------------------ model pin
def _local(files: dict[str, str]) -> dict:
    return {"kind": "local", "sha256": "".join(sorted(files.values())), "files": files}


def test_a_changed_model_folder_is_refused_naming_the_files(tmp_path: Path):
    options = RunOptions(model="/models/m")
    stored = {"model_fingerprint": _local({"a.bin": "1", "b.json": "2"})}
    run_folder.check_same_model(tmp_path, options.model, stored, _local({"a.bin": "1", "b.json": "2"}))
    run_folder.check_same_model(tmp_path, options.model, None, _local({"a.bin": "1"}))  # a new run: nothing to compare
    with pytest.raises(ValueError) as info:
        run_folder.check_same_model(tmp_path, options.model, stored, _local({"a.bin": "9", "b.json": "2"}))
    assert str(info.value) == (
        f"the files of model folder /models/m changed since the run in {tmp_path} started (a.bin); resuming "
        f"would mix two models' outputs: delete {tmp_path} to start over with the new files, or choose another --out"
    )
    many = {"model_fingerprint": _local({f"f{i}": "1" for i in range(5)})}
    with pytest.raises(ValueError, match=r"started \(f0, f1, f2 and 2 more\); resuming"):
        run_folder.check_same_model(tmp_path, options.model, many, _local({f"f{i}": "2" for i in range(5)}))
    four = {"model_fingerprint": _local({f"f{i}": "1" for i in range(4)})}
    with pytest.raises(ValueError, match=r"started \(f0, f1, f2 and 1 more\); resuming"):
        run_folder.check_same_model(tmp_path, options.model, four, _local({f"f{i}": "2" for i in range(4)}))
    three = {"model_fingerprint": _local({f"f{i}": "1" for i in range(3)})}
    with pytest.raises(ValueError, match=r"started \(f0, f1, f2\); resuming"):
        run_folder.check_same_model(tmp_path, options.model, three, _local({f"f{i}": "2" for i in range(3)}))


# ------------------------------------------------------------------------------------------------ run record
def test_the_run_record_says_what_produced_the_run():
    options = RunOptions(model="org/m", seed=3, toxicity="none", toxicity_kwargs={"api_key": "secret"})
    record = run_module._run_record({"model": "org/m", "top_k": 5}, options, {"commit_hash": "c"}, True, {"x": 1.5})
    assert record["model"] == "org/m" and record["top_k"] == 5
    assert record["options"]["seed"] == 3 and record["options"]["model"] == "org/m"
    assert "toxicity_kwargs" not in record["options"] and "secret" not in json.dumps(record)
    assert record["model_metadata"] == {"commit_hash": "c"} and record["queerbench_version"] == __version__
    assert record["reused_predictions"] is True and record["timings_s"] == {"x": 1.5}
    finished = datetime.fromisoformat(record["finished"])
    assert finished.utcoffset() is not None and finished.utcoffset().total_seconds() == 0
    assert finished.microsecond == 0  # seconds precision
    assert set(record) == {"model", "top_k", "options", "model_metadata", "queerbench_version", "reused_predictions",
                           "timings_s", "finished"}  # fmt: skip


# ------------------------------------------------------------------------------------------------ sentences
def test_limit_keeps_the_first_templates_with_every_subject():
    frame = run_module.run_items(RunOptions(model="org/m", limit=2))
    assert sorted(frame["template_id"].unique()) == [0, 1] and len(frame) == 2 * 77
    assert list(frame.index) == list(range(len(frame)))
    assert list(frame.columns) == [*COLUMNS, "split"]  # the frame's own columns, no old index among them
    assert len(run_module.run_items(RunOptions(model="org/m", config="paper", limit=1))) == 78


def test_a_methods_own_settings_are_recorded_flat_in_the_options_place():
    """``scores.json`` keeps the options' flat shape: each method's own setting by name where the options held it,
    None where not given, whichever method the run used."""
    options = RunOptions(model="org/m", method="instructed", method_settings={"prompt_id": "queergen-1"})
    record = options.record()
    names = list(record)
    assert "method_settings" not in record and record["prompt_id"] == "queergen-1" and record["max_new_tokens"] is None
    assert names[names.index("request_timeout") + 1 : names.index("exclude_function_words")] == [
        "prompt_id",
        "max_new_tokens",
    ]
    assert RunOptions(model="org/m", method="mlm").record()["prompt_id"] is None
    assert options.setting("prompt_id") == "queergen-1" and options.setting("max_new_tokens") is None


@pytest.mark.parametrize("method", ["mlm", "scored"])
def test_a_setting_of_another_method_is_refused_in_one_line_once_the_method_is_known(method: str):
    """``--prompt`` on an mlm run would be ignored without a word: refused, named by its flag, when the method is
    given and when ``auto`` resolves to it (before any folder or model)."""
    own = {"prompt_id": "queergen-2", "max_new_tokens": 9}
    with pytest.raises(ValueError) as info:
        RunOptions(model="org/m", method=method, method_settings=own)
    assert str(info.value) == (
        f"--prompt, --max-new-tokens: settings of --method instructed, which this run does not use (its method is "
        f"{method}): drop them"
    )
    auto = RunOptions(model="org/m", method_settings={"prompt_id": "queergen-2"})  # auto: not known yet
    with pytest.raises(
        ValueError,
        match=rf"^--prompt: a setting of --method instructed, which this run does not use \(its method is {method}\): drop it$",
    ):
        auto.with_fields(method=method)
    assert auto.with_fields(method="instructed").setting("prompt_id") == "queergen-2"
