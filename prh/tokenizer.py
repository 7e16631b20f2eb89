"""Offline WordPiece tokenizer, trained on the training captions and saved with the run.

Built with the `tokenizers` library (the BertWordPieceTokenizer(lowercase=True) pipeline) so
nothing is downloaded; the merges are counted here so that the vocabulary is deterministic.
transformers 5 silently ignores `BertTokenizerFast(vocab_file=...)`: the vocabulary is then
the 5 special tokens and every word maps to [UNK], so this module never goes through
transformers.
Special tokens, in id order: [PAD] [UNK] [CLS] [SEP] [MASK] (BERT's names; ids assumed by us).

Web text is tokenised by `Tokenizer.encode_arrow`, the library's pipeline vectorised over an
Arrow array for plain texts (`PLAIN`), the library itself for the rest: same ids, about ten
times faster (the library spends about 1 us a token building Encoding objects).
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import tokenizers
from tokenizers import models
from tokenizers.implementations import BertWordPieceTokenizer

from prh.io import ContractError, write_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILE = "tokenizer.json"
VOCAB_FILE = "vocab.txt"
PREFIX = "##"                # WordPiece continuing-subword prefix

# Texts made of printable ASCII, tab, newline and carriage return. On them the library's
# BertNormalizer(lowercase=True) is ASCII lowercasing (clean_text turns \t\n\r into spaces
# and removes only other control characters; accents and Chinese characters are not ASCII),
# and its BertPreTokenizer splits at whitespace and isolates every punctuation character:
# in ASCII, the 32 of Rust's is_ascii_punctuation (`PUNCTUATION`).
PLAIN = r"^[\t\n\r\x20-\x7e]*$"
PUNCTUATION = r"([!-/:-@\[-`{-~])"
# The pipeline PLAIN describes, as the library writes it in tokenizer.json: another normaliser
# setting, added tokens (matched before the normaliser), truncation or padding would change
# the ids, so a tokenizer that differs takes the library's path for every text.
PIPELINE = {"added_tokens": [], "truncation": None, "padding": None,
            "normalizer": {"type": "BertNormalizer", "clean_text": True,
                           "handle_chinese_chars": True, "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"}}
KNOWN_BYTES = 1 << 26        # word text whose pieces encode_arrow keeps between calls (64 MiB)
COUNT_TEXTS = 1 << 18        # texts counted at once by the trainer (an Arrow array stays < 2 GiB)


class TokenizerError(ContractError):
    """A saved tokenizer directory is missing or inconsistent."""


class Tokenizer:
    """WordPiece tokenizer with BERT's special tokens; `encode` adds no special tokens."""

    def __init__(self, backend: tokenizers.Tokenizer, *, source: str = "<memory>") -> None:
        ids = {tok: backend.token_to_id(tok) for tok in SPECIAL_TOKENS}
        missing = [tok for tok, i in ids.items() if i is None]
        if missing:
            raise TokenizerError(f"{source}: vocabulary lacks special tokens {missing}; "
                                 "retrain it with prh.tokenizer.train_tokenizer")
        self._backend = backend
        spec = json.loads(backend.to_str())
        self._plain = spec["model"]["type"] == "WordPiece" and all(
            spec.get(key) == value for key, value in PIPELINE.items())
        self._known = (pa.array([], pa.string()), pa.array([], pa.list_(pa.int64())))
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids.values()
        self.vocab_size: int = backend.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (lowercased WordPiece), without [CLS]/[SEP]."""
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` for many texts at once (the library parallelises it)."""
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]

    def encode_arrow(self, texts: pa.Array, ids: pa.DataType | None = None) -> pa.ListArray:
        """`encode_batch` of a string array without nulls, as one list of `ids` per text.
        Plain texts (`PLAIN`) are split into words by `plain_words`, each distinct word is
        tokenised once by the WordPiece model, and the texts' ids gathered by Arrow; the rest,
        and every text of a tokenizer whose pipeline is not `PIPELINE`, go through the library.
        Offsets are int32: under 2^31 tokens a call."""
        ids = ids or pa.int64()
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        texts = texts.cast(pa.string())
        if texts.null_count:
            raise ValueError(f"{texts.null_count} of {len(texts)} texts are null: leave them out")
        plain, plain_texts, other = _split_plain(texts, self._plain)
        fast = self._encode_plain(plain_texts, ids)
        if len(fast) == len(texts):
            return fast
        slow = pa.array(self.encode_batch(other.to_pylist()), pa.list_(ids))
        where = np.asarray(plain.to_numpy(zero_copy_only=False), bool)
        order = np.empty(len(texts), np.int64)  # text i's row in [fast, slow]
        order[where] = np.arange(len(fast))
        order[~where] = len(fast) + np.arange(len(other))
        return pa.concat_arrays([fast, slow]).take(pa.array(order))

    def _encode_plain(self, texts: pa.Array, ids: pa.DataType) -> pa.ListArray:
        """`encode_arrow` of texts that are all `PLAIN`."""
        words = plain_words(texts)
        coded = pc.list_flatten(words).dictionary_encode()
        pieces = self._pieces(coded.dictionary).cast(pa.list_(ids))
        index = coded.indices
        counts = np.asarray(pc.list_value_length(pieces), np.int64)[index.to_numpy()]
        ends = np.r_[0, np.cumsum(counts)]
        if ends[-1] >= 1 << 31:
            raise ValueError(f"{len(texts)} texts hold {ends[-1]} tokens: encode fewer at a time")
        flat = pc.list_flatten(pieces.take(index))
        first = words.offsets[0].as_py()
        offsets = ends[np.asarray(words.offsets, np.int64) - first]
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat)

    def _pieces(self, words: pa.Array) -> pa.ListArray:
        """The WordPiece ids of each of the distinct normalised `words`; a word is tokenised
        by the model once and kept (up to KNOWN_BYTES of word text or one call's words, then
        the store starts over)."""
        known, pieces = self._known
        at = pc.index_in(words, value_set=known)
        missing = pc.is_null(at)
        new = words.filter(missing)
        if len(new):
            if known.nbytes + new.nbytes > KNOWN_BYTES:
                known, pieces, new = known[:0], pieces[:0], words
                missing = pa.array(np.ones(len(words), bool))
            model = self._backend.model
            found = pa.array([[t.id for t in model.tokenize(w)] for w in new.to_pylist()],
                             pa.list_(pa.int64()))
            # the new words are appended in their order: the k-th lands at len(known) + k
            placed = len(known) - 1 + np.cumsum(missing.to_numpy(zero_copy_only=False))
            at = pc.if_else(missing, pa.array(placed, pa.int32()), at)
            known, pieces = pa.concat_arrays([known, new]), pa.concat_arrays([pieces, found])
            self._known = known, pieces
        return pieces.take(at)

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` (special tokens kept, for inspecting views)."""
        return self._backend.decode(ids, skip_special_tokens=False)

    def vocab(self) -> list[str]:
        """Tokens in id order."""
        by_id = {i: tok for tok, i in self._backend.get_vocab().items()}
        return [by_id[i] for i in range(len(by_id))]

    def save(self, directory: str | Path) -> None:
        """Write `tokenizer.json` (full pipeline) and `vocab.txt` (a token per line), atomically."""
        directory = Path(directory)
        write_text(directory / VOCAB_FILE, "".join(f"{tok}\n" for tok in self.vocab()))
        write_text(directory / TOKENIZER_FILE, self._backend.to_str(pretty=True))

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """Read a directory written by `save`; refuses one whose two files disagree."""
        path = Path(directory) / TOKENIZER_FILE
        if not path.is_file():
            raise TokenizerError(f"{path}: file not found; run `dvc repro prepare` to train "
                                 "and save the tokenizer")
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust library raises a bare Exception on bad JSON
            raise TokenizerError(f"{path}: cannot be read ({e}); rerun `dvc repro prepare`") from e
        tok = cls(backend, source=str(path))
        vocab_path = Path(directory) / VOCAB_FILE
        if vocab_path.is_file() and vocab_path.read_text(encoding="utf-8").split("\n")[:-1] \
                != tok.vocab():
            raise TokenizerError(f"{vocab_path}: differs from {path}; rerun `dvc repro prepare`")
        return tok


def _split_plain(texts: pa.StringArray, fast: bool = True
                 ) -> tuple[pa.BooleanArray, pa.StringArray, pa.StringArray]:
    """Which `texts` are `PLAIN` (none unless `fast`), those texts, and the others."""
    plain = (pc.match_substring_regex(texts, PLAIN) if fast
             else pa.array(np.zeros(len(texts), bool)))
    return plain, texts.filter(plain), texts.filter(pc.invert(plain))


def plain_words(texts: pa.Array) -> pa.ListArray:
    """The words of `PLAIN` texts after BERT normalisation and pre-tokenisation (see `PLAIN`)."""
    spaced = pc.replace_substring_regex(pc.ascii_lower(texts), PUNCTUATION, r" \1 ")
    split = pc.ascii_split_whitespace(spaced)  # leading or trailing whitespace gives ""
    flat = pc.list_flatten(split)
    kept = pc.greater(pc.binary_length(flat), 0)
    counts = np.bincount(pc.list_parent_indices(split).filter(kept).to_numpy(),
                         minlength=len(texts))
    return pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(counts)], pa.int32()),
                                    flat.filter(kept))


def _word_counts(texts: Iterable[str], backend: tokenizers.Tokenizer) -> Counter[str]:
    """Count the words of `texts` after BERT normalisation and pre-tokenisation: plain texts
    by `plain_words`, the rest by the library's normaliser and pre-tokeniser."""
    counts: Counter[str] = Counter()
    texts = iter(texts)
    while chunk := list(itertools.islice(texts, COUNT_TEXTS)):
        array = pa.array(chunk, pa.string())
        if array.null_count:
            raise ValueError(f"{array.null_count} texts are None: leave them out")
        _, plain, other = _split_plain(array)
        found = pc.value_counts(pc.list_flatten(plain_words(plain)))
        counts.update(dict(zip(found.field("values").to_pylist(),
                               found.field("counts").to_pylist(), strict=True)))
        for text in other.to_pylist():
            normal = backend.normalizer.normalize_str(text)
            counts.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(normal))
    return counts


def _merge_vocabulary(counts: Counter[str], vocab_size: int, min_frequency: int) -> list[str]:
    """WordPiece vocabulary by greedy pair merging (the algorithm of the library's
    WordPieceTrainer) with ties broken by the pair's text, so the result is deterministic."""
    words = [[w[0], *(f"{PREFIX}{c}" for c in w[1:])] for w in sorted(counts)]
    freq = [counts[w] for w in sorted(counts)]
    vocab = sorted({s for word in words for s in word})
    known = set(vocab)
    pairs: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], set[int]] = {}
    for i, word in enumerate(words):
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] += freq[i]
            where.setdefault(pair, set()).add(i)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    while heap and len(vocab) + len(SPECIAL_TOKENS) < vocab_size:
        negative, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -negative:
            continue                                  # stale entry: the count has changed
        if -negative < min_frequency:
            break
        merged = pair[0] + pair[1].removeprefix(PREFIX)
        if merged not in known:                       # two pairs can spell the same token
            known.add(merged)
            vocab.append(merged)
        for i in sorted(where.pop(pair)):
            old = words[i]
            for p in zip(old, old[1:], strict=False):
                pairs[p] -= freq[i]
            new, j = [], 0
            while j < len(old):
                if j + 1 < len(old) and (old[j], old[j + 1]) == pair:
                    new.append(merged)
                    j += 2
                else:
                    new.append(old[j])
                    j += 1
            words[i] = new
            for p in zip(new, new[1:], strict=False):
                pairs[p] += freq[i]
                where.setdefault(p, set()).add(i)
                heapq.heappush(heap, (-pairs[p], p))
        del pairs[pair]
    return vocab


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2) -> Tokenizer:
    """Train a lowercase WordPiece vocabulary of at most `vocab_size` tokens on `texts`.

    Normaliser, pre-tokeniser, model and decoder are those of the library's
    BertWordPieceTokenizer(lowercase=True) (min_frequency 2 is its default). Its trainer breaks
    ties between equally frequent pairs by hash order, so two runs on the same texts gave
    different vocabularies here (tokenizers 0.23); the merges are therefore counted in
    `_merge_vocabulary`, which breaks ties by the pair's text: same texts, same vocabulary.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, "
                         f"got {vocab_size}")
    backend = tokenizers.Tokenizer.from_str(BertWordPieceTokenizer(lowercase=True).to_str())
    merged = _merge_vocabulary(_word_counts(texts, backend), vocab_size, min_frequency)
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *merged])}  # specials are "[...]"
    backend.model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix=PREFIX)
    return Tokenizer(backend)
