"""QueerBench as an lm-evaluation-harness task: export the task folders, import the harness's logged samples.

- :func:`~queerbench.lmeval.export.export_tasks` (``queerbench lm-eval export DIR``) writes task folders that
  lm-evaluation-harness 0.4 loads with ``--include_path DIR``; their hooks (:mod:`queerbench.lmeval.task`) are
  queerbench's own prompt, reply parser and scorers.
- :func:`~queerbench.lmeval.samples.import_samples` (``queerbench lm-eval import OUTPUT_DIR --out RUN_DIR``) turns
  the harness's ``--log_samples`` output into a queerbench run folder, scored and reported like ``queerbench run``.

Importing this package imports neither lm-evaluation-harness nor torch.
"""
