"""prh.tokenizer: offline WordPiece, deterministic, saved and loaded with the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prh.tokenizer import Tokenizer, TokenizerError, train_tokenizer

WORDS = ["a", "dog", "runs", "in", "the", "park", "two", "dogs", "play", "with", "red", "ball",
         "man", "riding", "bike", "on", "street", "woman", "holding", "umbrella"]
CORPUS = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6)) + " ."
          for i in range(200)]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(CORPUS, vocab_size=120)


def test_special_ids_and_size(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.vocab()[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert all(i >= 5 for i in tok.encode("A dog runs ."))
    assert 5 < tok.vocab_size <= 120


def test_encode_is_lowercase_wordpiece_without_specials(tok):
    ids = tok.encode("A DOG runs in the park .")
    assert tok.decode(ids) == "a dog runs in the park."
    assert tok.encode("a dog runs in the park .") == ids
    assert tok.encode_batch(["a dog", "red ball"]) == [tok.encode("a dog"), tok.encode("red ball")]
    assert tok.unk_id in tok.encode("zebra")      # 'z' never occurs in the training captions


def test_same_texts_give_the_same_vocabulary():
    a = train_tokenizer(CORPUS, vocab_size=120)
    b = train_tokenizer(list(CORPUS), vocab_size=120)
    assert a.vocab() == b.vocab()
    assert a.encode(CORPUS[3]) == b.encode(CORPUS[3])


def test_save_and_load_round_trip(tok, tmp_path):
    tok.save(tmp_path / "tokenizer")
    assert (tmp_path / "tokenizer" / "vocab.txt").read_text().split("\n")[:5] == \
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    back = Tokenizer.load(tmp_path / "tokenizer")
    assert back.vocab() == tok.vocab() and back.vocab_size == tok.vocab_size
    assert [back.encode(t) for t in CORPUS[:20]] == [tok.encode(t) for t in CORPUS[:20]]
    assert sorted(p.name for p in (tmp_path / "tokenizer").iterdir()) == \
        ["tokenizer.json", "vocab.txt"]            # no temp files left behind


def test_load_errors_name_the_file(tok, tmp_path):
    with pytest.raises(TokenizerError, match=r"missing/tokenizer\.json: file not found"):
        Tokenizer.load(tmp_path / "missing")
    tok.save(tmp_path / "t")
    (tmp_path / "t" / "vocab.txt").write_text("[PAD]\nother\n")
    with pytest.raises(TokenizerError, match=r"vocab\.txt: differs from"):
        Tokenizer.load(tmp_path / "t")
    (tmp_path / "t" / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot be read"):
        Tokenizer.load(tmp_path / "t")


def test_vocab_size_must_exceed_specials():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(CORPUS, vocab_size=5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12))
def test_known_words_round_trip(tok, words):
    text = " ".join(words)
    ids = tok.encode(text)
    assert tok.unk_id not in ids
    assert tok.decode(ids) == text


def test_merges_by_hand():
    # words: "ab" x3, "abc" x2 -> symbols [a, ##b], [a, ##b, ##c]; pair counts (a, ##b) = 5,
    # (##b, ##c) = 2: merge "ab" first, then (ab, ##c) = 2 gives "abc".
    texts = ["ab ab ab abc abc"]
    assert train_tokenizer(texts, 100).vocab()[5:] == ["##b", "##c", "a", "ab", "abc"]
    assert train_tokenizer(texts, 100, min_frequency=3).vocab()[5:] == ["##b", "##c", "a", "ab"]
    # A tie (both pairs seen once) goes to the pair whose text sorts first: (a, ##b).
    assert train_tokenizer(["ab cd"], 5 + 4 + 1, min_frequency=1).vocab()[-1] == "ab"


def test_vocabulary_does_not_depend_on_the_process_hash_seed(tmp_path):
    script = ("import sys; sys.path.insert(0, 'tests'); from test_tokenizer import CORPUS; "
              "from prh.tokenizer import train_tokenizer; "
              "print(' '.join(train_tokenizer(CORPUS, 120).vocab()))")
    out = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONHASHSEED": seed},
                          cwd=Path(__file__).parents[1]).stdout
           for seed in ("1", "2")]
    assert out[0] == out[1] == " ".join(train_tokenizer(CORPUS, 120).vocab()) + "\n"


# The vectorised path against the library. Its alphabet holds every class PLAIN and
# PUNCTUATION split on: letters of both cases, digits, the 32 ASCII punctuation characters,
# space, \t\n\r, \v and \f (whitespace the library's clean_text removes), other control
# characters, and non-ASCII text (accents, CJK, NBSP, U+FFFD) that must take the library path.
ALPHABET = ("abcdezABCDEZ019 " + "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())
            + "\t\n\r\x0b\x0c\x00\x01\x7f" + "éÉñ中文\u00a0\ufffd\u0301")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(ALPHABET, max_size=40) | st.sampled_from(CORPUS)
                | st.text("ab", min_size=99, max_size=103), max_size=12))
def test_encode_arrow_equals_the_library(tok, texts):
    import pyarrow as pa

    got = tok.encode_arrow(pa.array(texts, pa.string()), pa.uint16())
    assert got.type == pa.list_(pa.uint16())
    assert got.to_pylist() == tok.encode_batch(texts)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(ALPHABET, max_size=40) | st.sampled_from(CORPUS), max_size=12))
def test_word_counts_equal_the_library(tok, texts):
    from collections import Counter

    from prh.tokenizer import _word_counts

    backend = tok._backend
    expected = Counter(w for t in texts for w, _ in
                       backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(t)))
    assert _word_counts(iter(texts), backend) == expected


def test_encode_arrow_refuses_null_texts(tok):
    import pyarrow as pa

    with pytest.raises(ValueError, match="1 of 2 texts are null"):
        tok.encode_arrow(pa.array(["a dog", None]))


@pytest.mark.parametrize("c", [*"\t\n\r\x0b\x0c\x00\x01\x1f\x7f\u00a0\ufffd\u0301é中!`~"])
def test_encode_arrow_inside_a_word(tok, c):
    """Each character class of ALPHABET between two letters, and at the ends: a character the
    library removes, spaces or isolates must not be taken for a letter, nor the reverse."""
    import pyarrow as pa

    texts = [f"dog{c}ball", f"{c}red {c}", f"A{c}{c}B"]
    assert tok.encode_arrow(pa.array(texts)).to_pylist() == tok.encode_batch(texts)


def test_encode_arrow_keeps_known_words_up_to_its_bound(tok, monkeypatch):
    """Words kept between calls, and the store started over when full, give the same ids."""
    import pyarrow as pa

    import prh.tokenizer

    monkeypatch.setattr(prh.tokenizer, "KNOWN_BYTES", 40)
    fresh = Tokenizer(tok._backend)
    for start in range(5):  # each call brings new words and repeats some of the last call's
        texts = [f"red{start} dog{start - 1}", f"ball{start}, the park", "a dog runs"]
        assert fresh.encode_arrow(pa.array(texts)).to_pylist() == tok.encode_batch(texts)
        distinct = len(set(prh.tokenizer.plain_words(pa.array(texts)).flatten().to_pylist()))
        kept = fresh._known[0]
        assert kept.nbytes <= 40 or len(kept) == distinct  # one call's words are all kept


def test_encode_arrow_takes_any_string_array_and_a_tokenizer_of_another_pipeline(tok):
    """Large strings, string views and chunked arrays read as strings; a tokenizer whose
    pipeline is not the one PLAIN describes (here: special tokens registered as added
    tokens, which the library matches before normalising) is encoded by the library."""
    import pyarrow as pa
    import tokenizers

    texts = ["a [MASK] dog", "[CLS]", "red ball", "zebra"]
    for array in (pa.array(texts, pa.large_string()), pa.array(texts, pa.string_view()),
                  pa.chunked_array([texts[:2], texts[2:]])):
        assert tok.encode_arrow(array).to_pylist() == tok.encode_batch(texts)
    backend = tokenizers.Tokenizer.from_str(tok._backend.to_str())
    backend.add_special_tokens(["[MASK]", "[CLS]"])
    other = Tokenizer(backend)
    assert other.encode_arrow(pa.array(texts)).to_pylist() == other.encode_batch(texts)
    assert other.encode_batch(texts) != tok.encode_batch(texts)  # the added tokens matter
