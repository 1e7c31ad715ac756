"""Stereotype Content Model (SCM) probes for generative language models (Ostrow & Lopez).

Survey prompts (rating, selection, elicitation) and story-generation prompts for seven sexual and gender minority
groups, runners for local transformers models and OpenAI-compatible endpoints with an on-disk cache, and the
analysis that maps answers onto the Warmth and Competence axes. Modules: ``data`` (versioned prompt data),
``dataset`` (splits), ``runners`` and ``cache`` (collection), ``parse`` (ratings, terms, keywords, refusals),
``axes`` (SADCAT + embedding mapping), ``analysis`` (statistics), ``report`` (files), ``metric``, ``cli``, ``space``.
"""
