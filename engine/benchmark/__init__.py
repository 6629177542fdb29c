"""Benchmark construction: generating candidate programs with a model, harvesting real
functions from packages (inputs from a model), excerpts of them as they sit in their
modules, repairing examples that do not run (a model
revising them with the sandbox's feedback), CRUXEval-style filters, de-duplication,
selection, the size check, and synthetic corpora."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "ExcerptSummary": "_excerpts",
    "excerpts_of_site": "_excerpts",
    "write_excerpts": "_excerpts",
    "FilterOptions": "_filters",
    "filter_runs": "_filters",
    "HarvestOptions": "_harvest",
    "HarvestSummary": "_harvest",
    "harvest": "_harvest",
    "RepairOptions": "_repair",
    "RepairSummary": "_repair",
    "repair": "_repair",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
