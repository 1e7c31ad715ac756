"""What the generative methods' predictors share: the loading checks of a local causal LM made before the run claims
its folder."""

from __future__ import annotations

from typing import Any

from queerbench.models.generation.settings import DEFAULT_MODEL

__all__ = ["preflight_local"]


def preflight_local(options: Any) -> None:
    """A local causal LM's checks before the run claims its folder (config only: kind, device, memory)."""
    if getattr(options, "endpoint", None):
        return
    from queerbench.models.generation.loading import check_causal_lm_loads

    check_causal_lm_loads(
        None if options.model == DEFAULT_MODEL else options.model,
        device=options.device,
        dtype=options.dtype,
        revision=options.revision,
        device_map=getattr(options, "device_map", None),
    )
