"""7. Scoring: predictions judged exactly against the runs, per task kind; pass@k and
comparisons; the official CRUXEval scoring, and predictions exported as its generations."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "RewardJudge": "_reward",
    "RewardLimits": "_reward",
    "ScoreError": "_verdicts",
    "ScoreOptions": "_verdicts",
    "ScoreSummary": "_summary",
    "Verdict": "_verdicts",
    "export_generations": "_generations",
    "judge": "_verdicts",
    "judge_answers": "_reward",
    "score_cruxeval": "_cruxeval",
    "score_predictions": "_score",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
