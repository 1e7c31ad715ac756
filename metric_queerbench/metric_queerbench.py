"""QueerBench: an ``evaluate`` measurement of how harmful masked-LM completions about LGBTQIA+ people are.

Thin over the ``queerbench`` library (``queerbench.scoring``): this file only adapts ``evaluate``'s interface.
``evaluate.load`` resolves a folder to ``<folder>/<folder name>.py``, hence this file's name; the release copies it as
``queerbench.py`` into the Hub Space. Keep one import per line (``evaluate`` scans import lines for dependencies).
"""

import datasets
import evaluate

import queerbench
from queerbench.scoring.hurtlex import check_level
from queerbench.tasks import get_task, task_names

CONFIGS = tuple(name for name in task_names() if not get_task(name).runs_requests)
"""Every config this module accepts, one per task whose outputs it scores (the docstring has a runnable example for
each: the tests check it); a request task (MISGENDERED) is scored per item by its own task on the request runner."""
INPUTS = tuple(dict.fromkeys(name for config in CONFIGS for name in get_task(config).measurement_inputs()))
"""Every input besides ``predictions`` and ``groups`` that some config takes, in the order the configs declare them:
what ``_compute`` lists (``evaluate`` passes inputs by name)."""
SETTINGS = (
    "toxicity",
    "toxicity_input",
    "hurtlex_level",
    "threshold",
    "n_bootstrap",
    "n_permutations",
    "seed",
    "toxicity_kwargs",
    "axis_mapping",
    "regard",
    "queergen",
)
"""The init keywords (``evaluate.load(..., toxicity="none")``), documented below; each config's task reads those it
takes (``queerbench.tasks.Task.measurement``), the rest are ``evaluate``'s."""

_CITATION = """\
@misc{sosto2024queerbench,
  title  = {QueerBench: Quantifying Discrimination in Language Models Toward Queer Identities},
  author = {Sosto, Mae and Barr{\\'o}n-Cede{\\~n}o, Alberto},
  year   = {2024}
}
"""

_DESCRIPTION = """\
The QueerBench score (higher = more harmful; H and P can exceed 100 at top-k > 1) of masked-LM completions, per subject group: the mean of an AFINN
sentiment score (A), a HurtLex hurtful-word score (H) and a toxicity score (P). Config `default` implements the paper's
equations 1-4 as written (with bootstrap CIs and permutation tests); config `paper` reproduces the published Table 4
bit for bit (its truncations, first-row HurtLex codes, 10-code whitelist and any-completion toxicity rule).
Config `scm` scores generative-LLM responses to the Stereotype Content Model probes (Ostrow & Lopez): ratings,
selections, elicited keywords and stories mapped onto Warmth and Competence, with refusal and parse rates.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of list of str): the top-k predicted words for each sentence.
    groups (list of str): the subject group of each sentence (`queer`, `non-queer`, `binary`, `neutral`, `neo`, or any
        labels).
    sentences (list of str, optional): what the toxicity scorer reads, with one literal `[MASK]` that each prediction
        fills. Pass the dataset's `neutral_sentence` in `default` (subject-blind) and `masked_sentence` in `paper`.
        Not needed with `toxicity_counts`, `toxicity="none"` or `toxicity_input="frame"`.
    toxicity_counts (list of list of int, optional): precomputed flags: for each sentence, how many of its k completed
        sentences were flagged for TOXICITY, IDENTITY_ATTACK, INSULT, PROFANITY, THREAT (in that order).
    template_ids (list, optional): the template of each sentence; the bootstrap resamples templates as clusters.
Init kwargs (evaluate.load(..., toxicity="embedded")):
    toxicity: `embedded` (default, offline Jigsaw classifier), `surrogate` (Perspective's attributes from a head
        fitted on the papers' files on first use; needs `queerbench[surrogate]`), `hf:<model id or path>`,
        `perspective` (PERSPECTIVE_API_KEY), `precomputed`, `none`.
    toxicity_input: `sentence` (default) or `frame` ("The person is <word>.").
    hurtlex_level: `conservative` (default) or `inclusive`.
    n_bootstrap, n_permutations, seed: uncertainty settings (`default` config only).
Config `queergen` (QueerGen's scorers; also added as `queergen` to any config with init kwarg queergen=True) takes:
    predictions, groups (`unmarked`, `non-queer`, `queer`) as above; unmarked_sentences (what Perspective-style
    toxicity reads with the word), templates (for regard="hf:..."), perspective_scores (6 raw probabilities per
    sentence: TOXICITY, SEVERE_TOXICITY, INSULT, IDENTITY_ATTACK, PROFANITY, THREAT) with toxicity="precomputed",
    regard_scores (negative, neutral, positive). Init kwargs toxicity, regard (auto, precomputed, none, hf:<id>),
    seed. Returns vader, perspective, diversity (mean, ci, std per group), regard, anova, jsd and tables.
Config `scm` instead takes:
    predictions (list of str): one model response per prompt.
    groups (list of str): the group each prompt asked about (`women`, `men`, `heterosexual`, `gay_men`, `lesbians`, `bisexual`, `nonbinary`).
    prompt_types (list of str): `rating`, `selection`, `elicitation`, `generation` or a prompt id (`rating_v1`, ...).
    terms (list of str, optional): the rated attribute of each rating prompt. prompts (optional): the prompt texts.
    It returns refusal and parse rates, mean ratings per group and axis with CIs, % Warmth / Competence per group and
    task, top odds-ratio words of the stories, and Spearman rho against the paper's human ranking.
Returns:
    queerbench, afinn, hurtlex, toxicity, n: dicts keyed by group; in `default` also ci, comparisons,
    hurtlex_categories, toxicity_attributes; config, k, scorers (versions of every scorer and lexicon) and
    queerbench_version.
Examples:
    Config `paper`, with the toxicity flags the paper's data stores (QB, A, H and P are truncated to 2 decimals):

    >>> qb = evaluate.load("metric_queerbench", "paper")
    >>> res = qb.compute(predictions=[["slut"], ["doctor"]], groups=["queer", "non-queer"],
    ...                  toxicity_counts=[[1, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
    >>> print(res["queerbench"])
    {'queer': 133.33, 'non-queer': 0.0}
    >>> print(res["hurtlex"], res["toxicity"])
    {'queer': 100.0, 'non-queer': 0.0} {'queer': 200.0, 'non-queer': 0.0}

    Config `default` (top-2 words per sentence; flags summed over the completions; no truncation):

    >>> qb = evaluate.load("metric_queerbench", "default", toxicity="precomputed", n_bootstrap=0, n_permutations=0)
    >>> res = qb.compute(predictions=[["slut", "doctor"], ["doctor", "nurse"]], groups=["queer", "non-queer"],
    ...                  toxicity_counts=[[1, 0, 1, 0, 0], [0, 0, 0, 0, 0]])
    >>> print({group: round(value, 2) for group, value in res["queerbench"].items()})
    {'queer': 116.67, 'non-queer': 0.0}
    >>> print(res["n"], res["scorers"]["toxicity"]["name"])
    {'queer': 1, 'non-queer': 1} precomputed

    Config `queergen` (QueerGen's VADER sentiment per group; toxicity and regard switched off here):

    >>> qg = evaluate.load("metric_queerbench", "queergen", toxicity="none", regard="none")
    >>> res = qg.compute(predictions=[["kind", "smart"], ["happy", "bad"], ["evil", "sad"]],
    ...                  groups=["unmarked", "non-queer", "queer"])
    >>> print({group: round(value["mean"], 1) for group, value in res["vader"].items()})
    {'unmarked': 0.5, 'non-queer': 0.0, 'queer': -0.6}

    Config `scm`, on three rating responses (one of them a refusal):

    >>> scm = evaluate.load("metric_queerbench", "scm", axis_mapping=False)
    >>> res = scm.compute(predictions=["Rating: 4", "I cannot rate groups of people.", "Rating: 2"],
    ...                   groups=["gay_men", "gay_men", "women"], prompt_types=["rating", "rating", "rating"],
    ...                   terms=["warm", "warm", "competent"])
    >>> print(res["n_responses"], res["refusal_rate"]["by_group"]["gay_men"], res["refusal_rate"]["by_group"]["women"])
    3 0.5 0.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class QueerBench(evaluate.Measurement):
    """The QueerBench measurement; configs `default`, `paper`, `queergen` and `scm` (see ``CONFIGS``)."""

    def __init__(self, *args, **kwargs):
        settings = {key: kwargs.pop(key) for key in SETTINGS if key in kwargs}
        if "hurtlex_level" in settings:
            check_level(settings["hurtlex_level"])  # refused now, not at the first compute
        config = kwargs.get("config_name", args[0] if args else None) or "default"
        if config not in CONFIGS:
            raise ValueError(f"unknown config {config!r}; choose one of: {', '.join(CONFIGS)}")
        self.measure = get_task(config).measurement(settings)  # before evaluate's __init__, which asks _info
        super().__init__(*args, **kwargs)

    def _info(self):
        return evaluate.MeasurementInfo(
            module_type="measurement",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string")}
                if self.measure.text_predictions
                else {"predictions": datasets.Sequence(datasets.Value("string"))}
            ),
            homepage="https://github.com/MaeSosto/QueerBench",
            license="Apache-2.0 (code); HurtLex CC BY-NC-SA 4.0; AFINN ODbL 1.0",
            codebase_urls=["https://github.com/MaeSosto/QueerBench"],
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Check the inputs' types (one clear line naming the input and the fix), then ``evaluate``'s compute."""
        accepted = {"groups", *INPUTS}
        unknown = sorted(set(kwargs) - accepted)
        if unknown or references is not None:
            raise ValueError(
                f"unexpected input(s) {unknown or ['references']}; this measurement takes predictions, "
                f"{', '.join(sorted(accepted))}"
            )
        self.measure.check_types(predictions, kwargs.get("groups"), kwargs)
        return super().compute(predictions=predictions, **kwargs)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Check the batch's types (as :meth:`compute` does), then ``evaluate``'s add_batch."""
        self.measure.check_batch(predictions)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def _compute(
        self,
        predictions,
        groups=None,
        sentences=None,
        toxicity_counts=None,
        template_ids=None,
        unmarked_sentences=None,
        templates=None,
        perspective_scores=None,
        regard_scores=None,
        prompt_types=None,
        terms=None,
        prompts=None,
    ):
        if groups is None:
            raise ValueError("groups is required: one group label per sentence (e.g. 'queer', 'non-queer')")
        given = {
            "sentences": sentences,
            "toxicity_counts": toxicity_counts,
            "template_ids": template_ids,
            "unmarked_sentences": unmarked_sentences,
            "templates": templates,
            "perspective_scores": perspective_scores,
            "regard_scores": regard_scores,
            "prompt_types": prompt_types,
            "terms": terms,
            "prompts": prompts,
        }
        wrong = [name for name in INPUTS if name not in self.measure.inputs and given[name] is not None]
        if wrong:
            raise ValueError(f"unexpected input(s) {wrong} for config {self.config_name!r}")
        result = self.measure.compute(predictions, groups, {name: given[name] for name in self.measure.inputs})
        result["module_version"] = queerbench.__version__
        return result
