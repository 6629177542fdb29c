"""Which traced examples of a harvest are sound enough to keep.

Every model-written call that passed the host's checks (it binds, its literals satisfy
the annotations: ``_harvest.admitted``) is traced once into a check store, then run
twice more by the analysis (``steptrace.tracing._analysis``): once untraced in the same
guest (it must agree with the trace: status, value or exception type, stdout) and once
traced in the *variant* guest, another string-hash secret, random state and clock (the
same steps, states and result, memory addresses aside). An example is kept when

* its run is ``ok``, both runs agree with it (:data:`NONDETERMINISTIC` otherwise), or
* its run is ``exception``, both runs agree, and the exception is the function's own:
  raised after the function's body began (its trace has a ``line`` step in the entry
  function). An exception before that is the call's (:data:`BAD_CALL`: a ``TypeError``
  of argument binding, the program's imports failing), never an ``error`` task.

Any other status (a limit, ``unsupported``, a crash) drops it as ``status NAME``; a run
whose second runs could not be made drops it as :data:`NOT_CHECKED`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

OK = "ok"                   # kept: an output example
ERROR = "error"             # kept: an error example (the function's own exception)
NONDETERMINISTIC = "nondeterministic"
BAD_CALL = "bad call"
NOT_CHECKED = "not run twice"

_QUERY = """
SELECT r.sample_id, r.input, r.status, a.agrees, a.deterministic,
       coalesce(a.disagreement, a.determinism_note),
       EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.run_id AND s.func = p.entry
               AND s.event = 'line') AS began
FROM runs r JOIN programs p USING (program_id) LEFT JOIN analyses a USING (run_id)
ORDER BY r.run_id
"""


@dataclass(frozen=True)
class Verdict:
    """One traced example: kept as ``ok``/``error``, or why it was dropped."""

    sample_id: str
    input: str
    verdict: str
    note: str | None = None

    @property
    def kept(self) -> bool:
        return self.verdict in (OK, ERROR)


def verdicts(db: str | Path) -> list[Verdict]:
    """Every run of the check store ``db`` (traced and analysed with determinism),
    judged by the rule of the module docstring."""
    import duckdb
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(_QUERY).fetchall()
    finally:
        con.close()
    found = []
    for sample, text, status, agrees, deterministic, note, began in rows:
        verdict = _judge(status, agrees, deterministic, began)
        found.append(Verdict(sample, text, verdict,
                             note if verdict == NONDETERMINISTIC else None))
    return found


def _judge(status: str, agrees: bool | None, deterministic: bool | None,
           began: bool) -> str:
    if status not in (OK, "exception"):
        return f"status {status}"
    if agrees is False or deterministic is False:
        return NONDETERMINISTIC
    if agrees is None or deterministic is None:
        return NOT_CHECKED
    if status == "exception" and not began:
        return BAD_CALL
    return OK if status == OK else ERROR
