"""Records from the tables users already hold them in: a pandas DataFrame, a Hugging Face
``datasets.Dataset`` (in memory, or saved with ``save_to_disk``), Parquet files (alone,
or in the Hub's layout: ``data/<split>-00000-of-00001.parquet``).

Each is read as a sequence of records (dicts), a missing cell (None, or a float NaN, as
pandas writes a missing string) an absent key, the way a JSONL file's records are read;
nothing here imports pandas or ``datasets`` to tell what a value is (the corpus module is
imported by light commands), and a directory saved with ``save_to_disk`` is read with
pyarrow alone (its Arrow files), so reading needs no ``datasets`` installed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator, Mapping

from steptrace.errors import InputError

SAVED_FILES = ("state.json", "dataset_info.json")  # what save_to_disk writes beside the data


def is_pandas_frame(value: object) -> bool:
    """Whether ``value`` is a pandas DataFrame (iterating one gives its column names)."""
    return (type(value).__module__.partition(".")[0] == "pandas"
            and type(value).__name__ == "DataFrame")


def is_hf_dataset(value: object) -> bool:
    """Whether ``value`` is a ``datasets.Dataset`` (or a ``DatasetDict``: see ``frame_rows``)."""
    return (type(value).__module__.partition(".")[0] == "datasets"
            and type(value).__name__ in ("Dataset", "DatasetDict", "IterableDataset"))


def is_frame(value: object) -> bool:
    return is_pandas_frame(value) or is_hf_dataset(value)


def frame_rows(value: Any, keep_missing: bool = False) -> Iterator[dict]:
    """The records of a pandas DataFrame or a Hugging Face Dataset, missing cells left out
    (``keep_missing``: as None, as a tasks record has them); InputError for a DatasetDict
    (which split?)."""
    if is_hf_dataset(value) and type(value).__name__ == "DatasetDict":
        raise InputError(f"a DatasetDict holds the splits {', '.join(sorted(value))}: give "
                         "one of them (dataset['test'])")
    rows = value.to_dict(orient="records") if is_pandas_frame(value) else value
    for row in rows:
        kept = present(row)
        yield {key: kept.get(key) for key in row} if keep_missing else kept


def present(row: Mapping) -> dict:
    """``row`` without its missing cells (None, NaN)."""
    return {key: cell for key, cell in row.items()
            if cell is not None and not (isinstance(cell, float) and math.isnan(cell))}


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a directory ``Dataset.save_to_disk`` wrote (or a DatasetDict's)."""
    return path.is_dir() and (all((path / name).is_file() for name in SAVED_FILES)
                              or (path / "dataset_dict.json").is_file())


def hub_files(path: Path) -> list[Path] | None:
    """The data files of a directory in the Hub's layout (``data/*.parquet`` or
    ``data/*.jsonl``, or those files at its top), None when it has none; InputError when
    they are of several splits (``train-...``, ``test-...``): name one's file."""
    for folder in (path / "data", path):
        files = sorted(p for p in folder.glob("*") if p.suffix in (".parquet", ".jsonl")
                       and p.is_file()) if folder.is_dir() else []
        if files:
            splits = sorted({p.name.split("-")[0] for p in files})
            if len(splits) > 1:
                raise InputError(f"{folder} holds the splits {', '.join(splits)}: give one "
                                 f"split's file ({files[0]})")
            return files
    return None


def saved_dataset_rows(path: Path, keep_missing: bool = False) -> Iterator[dict]:
    """The records of a dataset saved with ``save_to_disk``, read from its Arrow files
    (``keep_missing``: a missing cell as None, as a tasks record has it)."""
    import pyarrow as pa
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        raise InputError(f"{path} is a DatasetDict saved with save_to_disk (splits "
                         f"{', '.join(splits)}): give one split's directory "
                         f"({path / (splits[0] if splits else 'test')})")
    try:
        state = json.loads((path / "state.json").read_text())
        files = [path / entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a readable save_to_disk directory ({exc})") from None
    for file in files:
        try:
            with pa.memory_map(str(file)) as source:
                reader = pa.ipc.open_stream(source)
                for batch in reader:
                    for row in batch.to_pylist():
                        yield row if keep_missing else present(row)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"cannot read {file}: {exc}") from None


def parquet_rows(path: Path, keep_missing: bool = False) -> Iterator[dict]:
    """The records of a Parquet file, a batch at a time (``keep_missing`` as above)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        handle = pq.ParquetFile(str(path))
        for batch in handle.iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                yield row if keep_missing else present(row)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"cannot read Parquet file {path}: {exc}") from None
