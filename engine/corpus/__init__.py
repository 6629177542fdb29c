"""1. Corpus: programs and their inputs, from files (JSONL, JSON, a directory of ``.py``
files), streams or records in memory (a list of dicts, a polars DataFrame), as ``Job``s;
and the one reader of the text files a user gives."""

from steptrace._lazy import lazy_exports

_EXPORTS = {
    "Corpus": "_formats",
    "CorpusError": "_formats",
    "Job": "_formats",
    "NotUtf8Error": "_text",
    "Program": "_formats",
    "Records": "_formats",
    "as_corpus_source": "_formats",
    "demo_corpus_path": "_formats",
    "iter_corpus": "_formats",
    "jobs_from_record": "_formats",
    "load_corpus": "_formats",
    "open_utf8": "_text",
    "read_utf8": "_text",
    "source_lines": "_formats",
    "statement_lines": "_statements",
    "statements": "_statements",
    "utf8_lines": "_text",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
