"""Results across runs: comparisons of run folders."""
