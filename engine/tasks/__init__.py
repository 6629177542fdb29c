"""5. Tasks: prediction questions made from stored runs (one kind per question: output,
input, state, next line, ...), with their prompts and answers."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "KINDS": "_names",
    "STYLES": "_names",
    "TASK_KINDS": "_kinds",
    "TaskKind": "_kinds",
    "TaskOptions": "_tasks",
    "TaskSummary": "_tasks",
    "extract_answer": "_answers",
    "generate_tasks": "_tasks",
    "parse_kinds": "_kinds",
    "task_kind": "_kinds",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
