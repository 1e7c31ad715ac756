"""How a model runs: :class:`ModelSpec`, the settings of a model that are not which model it is.

A run names its model by a :class:`~queerbench.models.registry.ModelRef` (the name, an endpoint, a revision) and
runs it by a :class:`ModelSpec`: where and in what precision a local model runs, how its layers are placed, how many
rows a forward pass takes, whether only safetensors weights may load, and, for an endpoint, how many requests are in
flight, how fast they go and how long each may take. The backends and predictors are built from it; every run (a
fill-in-the-blank run's options, a request run, a probes run) makes one, so each value is checked once, the same way,
in one line before anything loads.

Of these only ``dtype`` can change what a model predicts (a run's key and signature hold it); the rest change where
and how fast it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queerbench.models.generation.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_REQUESTS_PER_MINUTE,
)

__all__ = ["DTYPES", "ModelSpec"]

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""The precisions a local model loads in (``--dtype``)."""


@dataclass(frozen=True)
class ModelSpec:
    """The settings a model runs with, checked when made (a one-line ``ValueError`` naming the flag for each bad
    value); see the module doc."""

    device: str = "auto"
    """``auto`` (CUDA, then MPS, then CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``: checked when the model loads."""
    dtype: str = "float32"
    device_map: str | None = None
    """accelerate's placement of a local model's layers (None: the whole model on ``device``)."""
    batch_size: int = 16
    """Rows per forward pass of a local model; prompts per completions request of an endpoint."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Endpoint requests in flight."""
    requests_per_minute: float | None = DEFAULT_REQUESTS_PER_MINUTE
    """An endpoint's rate limit (None: none)."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    """Seconds an endpoint's reply may take."""
    safetensors_only: bool = False
    """Refuse a masked LM's pickle checkpoints (the Space)."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1, got {self.batch_size!r}")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1 (requests in flight), got {self.concurrency!r}")
        rate = self.requests_per_minute
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0):
            raise ValueError(f"--requests-per-minute must be > 0, got {self.requests_per_minute!r}")
        if isinstance(self.request_timeout, bool) or not self.request_timeout > 0:
            raise ValueError(f"--request-timeout must be > 0 seconds, got {self.request_timeout!r}")
        from queerbench.models.memory import check_device_map

        check_device_map(self.device_map)  # an unknown value or a missing accelerate fails before anything loads

    @classmethod
    def from_flags(
        cls, endpoint: str | None = None, *, request_timeout: float | None = None, **settings: Any
    ) -> ModelSpec:
        """The spec of a command's model flags (``request_timeout`` None: the default), checked against the
        ``endpoint`` the command names (:meth:`check_endpoint`)."""
        spec = cls(request_timeout=DEFAULT_REQUEST_TIMEOUT if request_timeout is None else request_timeout, **settings)
        spec.check_endpoint(endpoint)
        return spec

    def check_endpoint(self, endpoint: str | None) -> None:
        """A one-line ``ValueError`` for a setting that places a local model's layers given with an endpoint."""
        if endpoint and self.device_map is not None:
            raise ValueError("--device-map places a local model's layers; an --endpoint serves its own: drop it")
