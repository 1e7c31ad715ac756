"""How a model runs (queerbench.models.spec.ModelSpec): every value checked once, in one line naming the flag, the
same for a fill-in-the-blank run, a request run and a probes run; and what each run builds its model from."""

from __future__ import annotations

from typing import Any

import pytest

from queerbench.cli import main
from queerbench.models.backends import open_backend
from queerbench.models.registry import model_ref
from queerbench.models.spec import ModelSpec
from queerbench.run.options import RunOptions
from queerbench.run.probes import check_model_settings
from queerbench.run.requests import resolve_request_run

BAD = [
    ({"dtype": "int8"}, "--dtype must be one of float32, bfloat16, float16, got 'int8'"),
    ({"batch_size": 0}, "--batch-size must be at least 1, got 0"),
    ({"batch_size": True}, "--batch-size must be at least 1, got True"),
    ({"concurrency": 0}, "--concurrency must be at least 1 (requests in flight), got 0"),
    ({"requests_per_minute": 0}, "--requests-per-minute must be > 0, got 0"),
    ({"request_timeout": 0}, "--request-timeout must be > 0 seconds, got 0"),
    ({"device_map": "everywhere"}, "unknown --device-map 'everywhere'; use one of "),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_each_bad_value_is_one_line_naming_the_flag(change: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        ModelSpec(**change)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("change", "message"), BAD)
def test_a_run_and_a_request_run_refuse_them_alike(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message[:30]}"):
        RunOptions(model="bert-base-uncased", **change)
    if set(change) <= {"dtype", "batch_size", "concurrency", "request_timeout"}:
        with pytest.raises(ValueError, match=f"^{message[:30]}"):
            resolve_request_run("misgendered", model="embedded:smollm2-135m-instruct", **change)


def test_no_rate_limit_is_none_and_a_rate_that_is_no_number_is_one_line() -> None:
    assert ModelSpec(requests_per_minute=None).requests_per_minute is None
    assert check_model_settings(requests_per_minute=None).requests_per_minute is None  # a library caller's "no limit"
    with pytest.raises(ValueError, match=r"^--requests-per-minute must be > 0, got 'fast'$"):
        ModelSpec(requests_per_minute="fast")  # type: ignore[arg-type]


def test_the_runs_hold_the_spec_their_settings_make() -> None:
    options = RunOptions(model="bert-base-uncased", device="cpu", dtype="bfloat16", batch_size=3, concurrency=2)
    assert options.model_spec == ModelSpec(
        device="cpu",
        dtype="bfloat16",
        batch_size=3,
        concurrency=2,
        requests_per_minute=options.requests_per_minute,
        request_timeout=options.request_timeout,
    )
    run = resolve_request_run("misgendered", model="embedded:smollm2-135m-instruct", batch_size=5, dtype="float16")
    assert (run.model_spec.batch_size, run.model_spec.dtype) == (5, "float16")
    assert run.key()["dtype"] == "float16" and run.folder_name().endswith("-float16")


def test_a_device_map_is_refused_for_an_endpoint_before_anything_opens() -> None:
    pytest.importorskip("accelerate", reason="a device map needs accelerate, which the test extra installs")
    with pytest.raises(ValueError, match=r"^--device-map places a local model's layers; an --endpoint serves its own"):
        open_backend(model_ref("served", "http://127.0.0.1:9/v1"), "generate", ModelSpec(device_map="auto"))


@pytest.mark.parametrize(("change", "message"), [(c, m) for c, m in BAD if "batch_size" not in c])
def test_a_probes_run_checks_its_model_flags_into_one_spec(change: dict, message: str) -> None:
    """(A probes task's batch size is its plan's: the survey decoding's.)"""
    with pytest.raises(ValueError, match=f"^{message[:30]}"):
        check_model_settings(**change)
    assert check_model_settings(dtype="bfloat16", concurrency=3) == ModelSpec(dtype="bfloat16", concurrency=3)


def test_scm_run_refuses_a_bad_device_map_before_the_model_loads(tmp_path, capsys) -> None:
    """argparse checks the numbers; a device map's value is the spec's to check, before anything loads."""
    args = ["scm", "run", "--out", str(tmp_path / "out"), "--model", str(tmp_path / "absent")]
    assert main([*args, "--device-map", "everywhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("queerbench: error: unknown --device-map 'everywhere'") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_request_run_takes_the_device_map_and_the_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """`queerbench run --config misgendered` passes --device-map and --requests-per-minute to its run's spec (they
    were ignored for request tasks before); a device map with an endpoint is one line."""
    import queerbench.run.requests as requests_module

    pytest.importorskip("accelerate", reason="a device map needs accelerate, which the test extra installs")
    run = resolve_request_run(
        "misgendered", model="embedded:smollm2-135m-instruct", device_map="auto", requests_per_minute=30.0
    )
    assert (run.model_spec.device_map, run.model_spec.requests_per_minute) == ("auto", 30.0)
    with pytest.raises(ValueError, match=r"^--device-map places a local model's layers; an --endpoint serves"):
        resolve_request_run("misgendered", model="served", endpoint="http://127.0.0.1:9/v1", device_map="auto")
    seen: list[Any] = []

    def stop(run: Any, out: Any = None, **_: Any) -> None:
        seen.append(run)
        raise KeyboardInterrupt  # nothing is run: the resolved run is what is checked

    monkeypatch.setattr(requests_module, "run_requests", stop)
    argv = ["run", "--config", "misgendered", "--model", "embedded:smollm2-135m-instruct", "--device-map", "auto"]
    assert main([*argv, "--requests-per-minute", "45", "--out", "unused"]) != 0  # "interrupted", as by ctrl-c
    assert (seen[0].model_spec.device_map, seen[0].model_spec.requests_per_minute) == ("auto", 45.0)
