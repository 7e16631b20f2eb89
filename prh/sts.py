"""STS-B: the Spearman correlation between the cosine of two sentences' embeddings and the human
similarity score (Cer et al. 2017), on the public test split with its labels (1,379 pairs).

Read from either usual form: the original `sts-test.csv` of the STS benchmark (tab-separated, no
header: genre, file, year, id, score, sentence 1, sentence 2, sometimes more columns), or a
tab- or comma-separated file with a header naming `sentence1`, `sentence2` and `score` (or
`label`, `similarity_score`: the GLUE and MTEB copies). Embeddings are the encoder's: for a
public model, mean pooling of the last hidden state (what the paper's "mean pooling" rows and
sentence-transformers' mean pooling compute; prh.features); for a trained arm, its own encoder.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

SCORE_COLUMNS = ("score", "label", "similarity_score")
FIX = ("use the STS benchmark's sts-test.csv or a file with columns sentence1, sentence2, score "
       "(e.g. the mteb/stsbenchmark-sts test split saved as TSV)")


class StsError(ValueError):
    """An STS-B file that cannot be read, with the row and the fix."""


@dataclass(frozen=True)
class Sts:
    first: list[str]
    second: list[str]
    scores: np.ndarray  # float64 [n], the gold similarity (0 to 5)


def read_sts(path: str | Path) -> Sts:
    path = Path(path)
    if not path.is_file():
        raise StsError(f"{path}: STS-B file not found; {FIX}")
    text = path.read_text(encoding="utf-8")
    head = text.split("\n", 1)[0]
    delim = "\t" if "\t" in head else ","
    rows = list(csv.reader(text.splitlines(), delimiter=delim,
                           quoting=csv.QUOTE_NONE if delim == "\t" else csv.QUOTE_MINIMAL))
    names = [c.strip().lower() for c in rows[0]] if rows else []
    score_col = next((names.index(c) for c in SCORE_COLUMNS if c in names), None)
    if {"sentence1", "sentence2"} <= set(names) and score_col is not None:
        cols, body, first_line = (names.index("sentence1"), names.index("sentence2"),
                                  score_col), rows[1:], 2
    elif delim == "\t" and rows and len(rows[0]) >= 7:
        cols, body, first_line = (5, 6, 4), rows, 1
    else:
        raise StsError(f"{path}: neither a header with sentence1, sentence2 and score nor the "
                       f"7-column sts-test.csv layout; {FIX}")
    a, b, s = [], [], []
    for line, row in enumerate(body, first_line):
        if not row:
            continue
        try:
            score = float(row[cols[2]])
            a.append(row[cols[0]])
            b.append(row[cols[1]])
        except (IndexError, ValueError) as e:
            raise StsError(f"{path}: line {line}: not sentence, sentence and a number ({e}); "
                           f"{FIX}") from e
        if not a[-1].strip() or not b[-1].strip():
            raise StsError(f"{path}: line {line}: an empty sentence; {FIX}")
        s.append(score)
    if len(s) < 3:
        raise StsError(f"{path}: {len(s)} pairs; Spearman needs at least 3; {FIX}")
    return Sts(a, b, np.asarray(s, dtype=np.float64))


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of paired rows; a zero row has cosine 0."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    num = np.einsum("ij,ij->i", a, b)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def spearman(data: Sts, encode: Callable[[list[str]], np.ndarray]) -> float:
    """Spearman's rho (scipy, ties by midranks) between the embeddings' cosine and the gold
    scores."""
    sims = cosine(encode(data.first), encode(data.second))
    return float(stats.spearmanr(sims, data.scores).statistic)
