"""Offline WordPiece tokenizer, trained on the training captions and saved with the run.

Built with the `tokenizers` library (the BertWordPieceTokenizer(lowercase=True) pipeline) so
nothing is downloaded; the merges are counted here so that the vocabulary is deterministic.
transformers 5 silently ignores `BertTokenizerFast(vocab_file=...)`: the vocabulary is then
the 5 special tokens and every word maps to [UNK], so this module never goes through
transformers.
Special tokens, in id order: [PAD] [UNK] [CLS] [SEP] [MASK] (BERT's names; ids assumed by us).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import tokenizers
from tokenizers import models
from tokenizers.implementations import BertWordPieceTokenizer

from prh.io import ContractError, write_text

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILE = "tokenizer.json"
VOCAB_FILE = "vocab.txt"
PREFIX = "##"                # WordPiece continuing-subword prefix


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
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids.values()
        self.vocab_size: int = backend.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (lowercased WordPiece), without [CLS]/[SEP]."""
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """`encode` for many texts at once (the library parallelises it)."""
        return [e.ids for e in self._backend.encode_batch(texts, add_special_tokens=False)]

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


def _word_counts(texts: Iterable[str], backend: tokenizers.Tokenizer) -> Counter[str]:
    """Count the words of `texts` after BERT normalisation and pre-tokenisation."""
    counts: Counter[str] = Counter()
    for text in texts:
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
