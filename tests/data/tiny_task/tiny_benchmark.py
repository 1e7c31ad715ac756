"""A fourth benchmark for the tests: one task module and its data files, registered by ``QUEERBENCH_TASK_PATH``.

Nothing else in queerbench names it: the run, scoring, the report, the dataset builder and the lm-eval export find it
through the task registry (tests/test_tasks.py).
"""

from pathlib import Path

from queerbench.tasks import TemplateTask, load_specs

HERE = Path(__file__).parent
TASKS = [TemplateTask(spec, folder=HERE) for spec in load_specs(HERE / "tiny_tasks.json").values()]
