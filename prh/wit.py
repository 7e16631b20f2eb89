"""WIT-1024 as Huh et al. publish it: the `minhuh/prh` dataset at revision `wit_1024` (1,024
image-text pairs from the WIT subset of facebook/pmd; platonic-rep `data.py`), read from the
user's copy and checked on arrival, before any model runs.

Two layouts are read, both with the columns `image` (a struct of encoded `bytes` and a `path`)
and `text` (a list of strings per row):
- the parquet files of `hf download minhuh/prh --repo-type dataset --revision
  wit_1024 --local-dir DIR` (every `*.parquet` under DIR, in sorted path order), or one file;
- a `datasets.Dataset.save_to_disk` folder (`state.json` naming its Arrow stream files).
Each row's text at `caption_idx` is scored (platonic-rep's default 0). Every row must have a
decodable image and a non-empty text there; the count must be `n_rows` (1,024). Errors name the
file, the row and the fix.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

N_ROWS = 1024
FIX = ("download it with `hf download minhuh/prh --repo-type dataset --revision "
       "wit_1024 --local-dir DIR` and name DIR in params.yaml")


class WitError(ValueError):
    """The WIT-1024 copy is missing, of another layout, or has a bad row."""


@dataclass(frozen=True)
class Wit:
    """The rows in file order: encoded images, the scored text of each, and where they came
    from (file and row per item, for error messages and the report)."""

    images: list[bytes]
    texts: list[str]
    sources: list[str]

    def decoded(self) -> list[Any]:
        """The images as RGB PIL images (already checked to decode)."""
        from PIL import Image
        return [Image.open(io.BytesIO(b)).convert("RGB") for b in self.images]


def _tables(path: Path) -> list[tuple[Path, Any]]:
    """(file, table) per data file; a file Arrow cannot read raises WitError naming it."""
    import pyarrow as pa

    try:
        return _read_tables(path)
    except (pa.ArrowException, OSError) as e:
        raise WitError(f"{path}: a data file does not read as Arrow or parquet ({e}); download "
                       "the data set again") from e


def _read_tables(path: Path) -> list[tuple[Path, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.is_file() and path.suffix == ".parquet":
        return [(path, pq.read_table(path))]
    if not path.is_dir():
        raise WitError(f"{path}: WIT-1024 not found; {FIX}")
    if (path / "state.json").is_file():  # save_to_disk
        state = json.loads((path / "state.json").read_text())
        files = [path / f["filename"] for f in state.get("_data_files", [])]
        if not files:
            raise WitError(f"{path / 'state.json'}: names no data files; save the dataset "
                           "again with `save_to_disk`")
        out = []
        for f in files:
            with pa.memory_map(str(f)) as src:
                out.append((f, pa.ipc.open_stream(src).read_all()))
        return out
    files = sorted(path.rglob("*.parquet"))
    if not files:
        raise WitError(f"{path}: no parquet files and no save_to_disk state.json; {FIX}")
    return [(f, pq.read_table(f)) for f in files]


def read_wit(path: str | Path, *, caption_idx: int = 0, n_rows: int = N_ROWS) -> Wit:
    """Read and check WIT-1024 (module docstring)."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    images: list[bytes] = []
    texts: list[str] = []
    sources: list[str] = []
    for file, table in _tables(path):
        missing = {"image", "text"} - set(table.column_names)
        if missing:
            raise WitError(f"{file}: no column(s) {sorted(missing)} (has {table.column_names}); "
                           f"not the minhuh/prh wit_1024 layout; {FIX}")
        for row, (img, text) in enumerate(zip(table.column("image").to_pylist(),
                                              table.column("text").to_pylist(), strict=True)):
            where = f"{file}: row {row}"
            data = img.get("bytes") if isinstance(img, dict) else None
            if not data:
                raise WitError(f"{where}: no encoded image bytes; {FIX}")
            try:
                with Image.open(io.BytesIO(data)) as im:
                    im.load()
            except (UnidentifiedImageError, OSError) as e:
                raise WitError(f"{where}: the image does not decode ({e}); download the data "
                               "set again") from e
            n_text = len(text) if isinstance(text, list) else 0
            if n_text <= caption_idx:
                fix = (f"set wit1024.caption_idx below {n_text} or fix the data" if n_text
                       else f"the row has no text: {FIX}")
                raise WitError(f"{where}: text has {n_text} entries, caption_idx is "
                               f"{caption_idx}; {fix}")
            caption = text[caption_idx]
            if not isinstance(caption, str) or not caption.strip():
                others = [i for i, t in enumerate(text) if isinstance(t, str) and t.strip()]
                fix = (f"set wit1024.caption_idx to one of {others[:5]} (platonic-rep scores "
                       "0) or fix the data" if others else f"the row has no text: {FIX}")
                raise WitError(f"{where}: text[{caption_idx}] is empty; {fix}")
            images.append(data)
            texts.append(caption)
            sources.append(f"{file.name}:{row}")
    if len(texts) != n_rows:
        raise WitError(f"{path}: {len(texts)} rows, WIT-1024 has {n_rows}; download the whole "
                       f"revision (or set wit1024.n_rows for a deliberate subset)")
    return Wit(images, texts, sources)
