"""Printing rows as a table (rich), JSON or CSV: every data-printing command's --format."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Sequence

FORMATS = ("table", "json", "csv")


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str,
           title: str | None = None) -> str:
    """Rows as text in ``fmt``: a table for people, JSON (a list of objects) or CSV."""
    if fmt == "json":
        return json.dumps([{c: _plain(v) for c, v in zip(columns, row)} for row in rows],
                          indent=2, ensure_ascii=False)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_plain(v) for v in row] for row in rows])
        return out.getvalue().rstrip("\n")
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    # rich is imported for a table only (~40 ms): every command module imports this one
    # when steptrace starts, json and csv need none of it.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(Text(str(column)), overflow="fold")
    for row in rows:
        table.add_row(*[Text("NULL" if v is None else str(v)) for v in row])
    console = Console(width=160, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    return console.export_text().rstrip("\n")
