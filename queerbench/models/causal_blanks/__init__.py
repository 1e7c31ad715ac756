"""A causal LM's top-k words for a blank: the engines that answer a top-k ``fill_mask`` request on a model that
cannot see a mask (:mod:`queerbench.models.requests`).

- :mod:`.blanks`: what both engines share (splitting a sentence at its blank, the candidates, their ranking);
- :mod:`.local`: a local causal LM proposes whole-word candidates from its next-token distribution and ranks them
  by the log-probability of the whole sentence (:func:`~.local.score_blanks`), what
  :class:`~queerbench.models.backends.causal.CausalBackend` answers ``fill_mask`` with;
- :mod:`.endpoint_steps`: the same steps on an OpenAI-compatible completions endpoint (proposals from its top
  log-probabilities, ranking from its echoed prompt log-probabilities).
"""
