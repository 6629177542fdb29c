"""6. Predictions: tasks asked of a model over an OpenAI-compatible API, each answer stored
under its experiment (model, label, prompt style, sampling settings)."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "Experiment": "_experiments",
    "ExperimentError": "_experiments",
    "PredictError": "_predict",
    "PredictOptions": "_options",
    "PredictSummary": "_predict",
    "predict": "_predict",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
