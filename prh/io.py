"""File contracts shared by every stage (files, so that DVC can track them).

- Every output is written atomically: a temp file in the same folder, then `os.replace`, so an
  interrupted stage never leaves a half-written file that looks complete.
- Embeddings: one `.npz` per encoder per split with `ids` (str, row ids) and `emb` (float32,
  n x d). Ids must match across modalities: a mismatch raises, rows are never reordered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class ContractError(ValueError):
    """A file does not honour its contract; the message names the file, the record and the fix."""


def clear_leftovers(target: Path, suffix: str = "") -> list[Path]:
    """Remove the temp files or folders an interrupted write of `target` left beside it (the
    names `atomic_path` and `atomic_dir` give: `.NAME.XXXXXXXX.tmpSUFFIX`, mkstemp's 8 random
    characters). Safe because one target has one writer at a time (DVC's lock on the repo)."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.[A-Za-z0-9_]{{8}}\.tmp"
                         rf"{re.escape(suffix)}$")
    if not target.parent.is_dir():
        return []
    found = [p for p in target.parent.iterdir() if pattern.match(p.name)]
    for p in found:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return found


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    clear_leftovers(target, suffix)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".tmp{suffix}", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get normal modes
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temp folder beside `path`; it replaces `path` only if the block succeeds
    (a kill before that leaves the temp folder, which the next write of `path` removes)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    clear_leftovers(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The full sha256 hex digest of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Atomic JSON with sorted keys and a trailing newline (stable bytes for DVC hashes)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    if not p.exists():
        raise ContractError(f"{p}: file not found; run the stage that writes it (`dvc repro`)")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ContractError(f"{p}: not valid JSON (line {e.lineno}: {e.msg}); "
                            "rerun the stage that writes it") from e
    except UnicodeDecodeError as e:
        raise ContractError(f"{p}: not valid JSON (not UTF-8 text at byte {e.start}); "
                            "rerun the stage that writes it") from e


def safe_loader() -> type:
    """PyYAML's safe loader on LibYAML's parser where PyYAML has it (CSafeLoader: the same
    documents and line numbers, claims.yaml composed in 15 ms against 230 ms; its syntax errors
    quote no excerpt of the line), else yaml.SafeLoader."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _unique_loader() -> type:
    """safe_loader() refusing a key written twice in one mapping: PyYAML keeps the last one
    silently, so a second `profile:` line would switch the profile unseen."""
    import yaml

    class UniqueKeyLoader(safe_loader()):
        def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN202 (PyYAML's API)
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is written twice (lines {seen[key]} and "
                        f"{key_node.start_mark.line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def read_yaml(path: str | os.PathLike[str], missing_fix: str) -> Any:
    """Parse a YAML file; a missing file, a folder, bytes that are not UTF-8 text, bad syntax or
    a key written twice in one mapping raise ContractError naming the file."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise ContractError(f"{p}: not found; {missing_fix}")
    if not p.is_file():
        raise ContractError(f"{p}: not a file; {missing_fix}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ContractError(f"{p}: not UTF-8 text (byte {e.start}); give a YAML file") from e
    if "\0" in text:
        raise ContractError(f"{p}: holds NUL bytes, not YAML text; give a YAML file")
    try:
        return yaml.load(text, Loader=_unique_loader())  # noqa: S506 (safe_loader()'s constructor)
    except yaml.YAMLError as e:
        raise ContractError(f"{p}: not valid YAML ({' '.join(str(e).split())}); fix it") from e
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise ContractError(f"{p}: nested too deeply for the YAML reader (it recurses per "
                            f"level, within Python's limit of {sys.getrecursionlimit()} frames); "
                            "a config needs a few levels: fix it") from None


def save_embeddings(path: str | os.PathLike[str], ids: Sequence[str], emb: np.ndarray,
                    meta: dict[str, Any] | None = None) -> None:
    """Write `ids` and `emb` (n x d float32) atomically; `meta` is stored as JSON text."""
    emb = np.asarray(emb, dtype=np.float32)
    ids_arr = np.asarray([str(i) for i in ids])
    if emb.ndim != 2 or emb.shape[0] != len(ids_arr):
        raise ContractError(f"{path}: {len(ids_arr)} ids for embeddings of shape {emb.shape}")
    check_unique(ids_arr, str(path))
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, ids=ids_arr, emb=emb, meta=np.asarray(json.dumps(meta or {}, sort_keys=True)))


def load_embeddings(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Return (ids, emb, meta); refuse NaN/inf rows and duplicate ids, naming the ids."""
    p = Path(path)
    if not p.exists():
        raise ContractError(f"{p}: embeddings not found; run the stage that writes them")
    try:
        with np.load(p, allow_pickle=False) as z:
            if "ids" not in z or "emb" not in z:
                raise ContractError(f"{p}: needs arrays 'ids' and 'emb', has {sorted(z.files)}")
            ids, emb = z["ids"].astype(str), z["emb"]
            meta = json.loads(str(z["meta"])) if "meta" in z else {}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # truncated, not a zip
        if isinstance(e, ContractError):
            raise
        raise ContractError(f"{p}: unreadable embeddings ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:200]}); rerun the stage that writes "
                            "them (`dvc repro`)") from e
    if emb.ndim != 2 or emb.shape[0] != ids.shape[0]:
        raise ContractError(f"{p}: {ids.shape[0]} ids for embeddings of shape {emb.shape}")
    bad = ~np.isfinite(emb).all(axis=1)
    if bad.any():
        raise ContractError(f"{p}: NaN or inf in rows with ids {ids[bad][:10].tolist()}; "
                            "rerun the embedding stage (the encoder diverged or the input is bad)")
    check_unique(ids, str(p))
    return ids, emb, meta


def check_unique(ids: np.ndarray, where: str) -> None:
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise ContractError(f"{where}: duplicate ids {uniq[counts > 1][:10].tolist()}")


def check_same_ids(ids_a: np.ndarray, ids_b: np.ndarray, name_a: str, name_b: str) -> None:
    """Raise unless both files list the same ids in the same order (never reorder silently)."""
    if len(ids_a) != len(ids_b):
        raise ContractError(f"{name_a} has {len(ids_a)} rows, {name_b} has {len(ids_b)}; "
                            "embed both modalities from the same split file")
    diff = np.flatnonzero(ids_a != ids_b)
    if diff.size:
        i = int(diff[0])
        raise ContractError(f"{name_a} and {name_b}: ids differ at {diff.size} rows, first at "
                            f"row {i} ({ids_a[i]!r} vs {ids_b[i]!r}); embed both from the same "
                            "split file")
