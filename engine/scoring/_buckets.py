"""Step buckets: the one definition of how step counts are grouped, for ``steptrace
score``'s "by difficulty" table, the ``accuracy_by_kind`` and ``step_distribution``
queries and the report's plots of them.

A count ``n`` of line steps (or instruction steps) falls in the bucket ``[2^k, 2^(k+1))``
with ``2^k <= n``: 1, 2-3, 4-7, 8-15, ... (0 steps: the bucket ``[0, 1)``). Doubling
buckets because a run's difficulty grows with the order of magnitude of its steps, not
their exact count, and because they are the buckets the store's step distribution is
shown in: the report's accuracy-by-difficulty plot and its step histogram share their
x axis, and ``score`` prints the same buckets the report plots. Before this definition
``score`` used 1-4, 5-16, 17-64, 65-256, 257+, so the two "accuracy by difficulty"
tables of one store disagreed. The queries also take a fixed ``width`` (``--param
width=10``: 0-9, 10-19, ...).

The queries are SQL files (queries/*.sql), runnable as they stand; they carry the SQL of
:func:`bucket_from_sql` and :func:`bucket_to_sql` verbatim, which the tests check, and
the tests check that the SQL and :func:`step_bucket` put every count from 0 to 2^20 (and
each power of two up to 2^40, and its neighbours) in the same bucket.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Bucket:
    """The counts ``low`` to ``high - 1``."""

    low: int
    high: int

    @property
    def label(self) -> str:
        """``8-15``, or ``1`` for a bucket of one count."""
        return f"{self.low}" if self.high == self.low + 1 else f"{self.low}-{self.high - 1}"


def step_bucket(count: int, width: int = 0) -> Bucket:
    """The bucket of a step count >= 0: doubling buckets, or ``width`` wide ones."""
    if width > 0:
        low = (count // width) * width
        return Bucket(low, low + width)
    if count < 1:
        return Bucket(0, 1)
    low = 1 << (count.bit_length() - 1)
    return Bucket(low, 2 * low)


def bucket_from_sql(count: str, width: str = "$width") -> str:
    """SQL for ``step_bucket(count, width).low`` (NULL for a NULL count); ``count`` and
    ``width`` are SQL expressions. ``floor(log2(n))`` is exact for the counts a store
    holds (below 2^48)."""
    return (f"CASE WHEN {count} IS NULL THEN NULL\n"
            f"     WHEN {width} > 0 THEN ({count} // {width}) * {width}\n"
            f"     WHEN {count} < 1 THEN 0\n"
            f"     ELSE 1::BIGINT << floor(log2({count}))::INTEGER END")


def bucket_to_sql(low: str, width: str = "$width") -> str:
    """SQL for the bucket's ``high`` from its ``low`` (the SQL of bucket_from_sql)."""
    return (f"CASE WHEN {low} IS NULL THEN NULL\n"
            f"     WHEN {width} > 0 THEN {low} + {width}\n"
            f"     WHEN {low} = 0 THEN 1\n"
            f"     ELSE 2 * {low} END")
