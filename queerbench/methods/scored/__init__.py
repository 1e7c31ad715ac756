"""``scored``: candidate words ranked by whole-sentence probability, on a local causal LM or a completions endpoint."""
