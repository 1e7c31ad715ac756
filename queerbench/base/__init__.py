"""The base layer: what every other part uses and that knows nothing of models, methods or benchmarks.

The environment (:mod:`.env`, the one reader of environment variables), files written atomically (:mod:`.files`),
the one HTTP client (:mod:`.http`), progress bars (:mod:`.progress`) and the pinned external sources (:mod:`.sources`).
"""
