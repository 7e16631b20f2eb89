"""prh.models: parameter counts, causal vs bidirectional attention, pooling, the projector."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prh.losses import ntp_loss
from prh.models import (
    BERT_B,
    BERT_S,
    Projector,
    TextEncoderConfig,
    attention_mask,
    build_text_encoder,
    count_parameters,
)

TINY = TextEncoderConfig(vocab_size=50, hidden=16, layers=2, heads=2, intermediate=32,
                         max_len=16, dropout=0.0)


def bert_parameters(c: TextEncoderConfig) -> int:
    """Hand count of a pooler-free BERT: embeddings (word, position, 2 token types, LayerNorm)
    plus per layer Q, K, V, output projections, the two FFN linears and two LayerNorms."""
    h, i = c.hidden, c.intermediate
    embeddings = (c.vocab_size + c.max_len + 2) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    return embeddings + c.layers * layer


@pytest.mark.parametrize(("cfg", "target", "tol"), [(BERT_S, 33e6, 1e6), (BERT_B, 109e6, 2e6)])
def test_preset_parameter_counts(cfg: TextEncoderConfig, target: float, tol: float) -> None:
    with torch.device("meta"):  # no memory for the weights
        n = count_parameters(build_text_encoder(cfg))
    assert n == bert_parameters(cfg)
    assert abs(n - target) < tol


def test_bert_s_count_matches_transformers_reference() -> None:
    # BertModel(L12, H384, A12, I1536, V30522) has 33,360,000 parameters with its pooler, whose
    # Linear(384, 384) is 147,840 (transformers' BertModel, counted); we build it without the
    # pooler.
    with torch.device("meta"):
        assert count_parameters(build_text_encoder(BERT_S)) == 33_360_000 - 147_840


def test_projector_layout_and_count() -> None:
    p = Projector(in_dim=384)
    kinds = [type(m).__name__ for m in p.net]
    assert kinds == ["Linear", "Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU",
                     "Linear"]
    linears = [(m.in_features, m.out_features) for m in p.net if isinstance(m, torch.nn.Linear)]
    assert linears == [(384, 512), (512, 2048), (2048, 2048), (2048, 512)]
    expected = sum(a * b + b for a, b in linears) + 2 * 2 * 2048  # + BN weight and bias
    assert count_parameters(p) == expected
    assert p(torch.randn(6, 384)).shape == (6, 512)


def _hidden(causal: bool, tokens: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)
    enc = build_text_encoder(TextEncoderConfig(**{**TINY.__dict__, "causal": causal})).eval()
    with torch.no_grad():
        return enc(tokens, torch.ones_like(tokens))


@settings(max_examples=8, deadline=None)
@given(st.integers(min_value=0, max_value=8))
def test_causal_output_ignores_later_tokens(i: int) -> None:
    g = torch.Generator().manual_seed(i)
    a = torch.randint(5, 50, (2, 10), generator=g)
    b = a.clone()
    b[:, i + 1:] = torch.randint(5, 50, (2, 10 - i - 1), generator=g)
    b[:, i + 1] = (a[:, i + 1] + 1 - 5) % 45 + 5  # make sure position i+1 really changed
    ha, hb = _hidden(True, a), _hidden(True, b)
    assert torch.equal(ha[:, : i + 1], hb[:, : i + 1])
    assert not torch.allclose(ha[:, i + 1], hb[:, i + 1])
    # the bidirectional encoder does see the change at every earlier position
    ba, bb = _hidden(False, a), _hidden(False, b)
    assert not torch.allclose(ba[:, : i + 1], bb[:, : i + 1])


def test_mean_pooling_is_the_mean_over_real_tokens_and_ignores_padding() -> None:
    torch.manual_seed(0)
    enc = build_text_encoder(TINY).eval()
    tokens = torch.tensor([[7, 8, 9, 10]])
    padded = torch.tensor([[7, 8, 9, 10, 0, 0, 0]])
    with torch.no_grad():
        h = enc(tokens, torch.ones_like(tokens))
        e = enc.embed(tokens, torch.ones_like(tokens))
        e_pad = enc.embed(padded, (padded != 0).long())
    torch.testing.assert_close(e, h.mean(1))
    torch.testing.assert_close(e_pad, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_our_4d_mask_gives_bertmodels_own_2d_mask_outputs(causal: bool) -> None:
    """The boolean mask we pass (to avoid a host sync) equals transformers' own expansion of
    the padding mask, bidirectional and causal, padding rows included; and it masks: other
    ids in the padding leave the real tokens' outputs as they are."""
    enc = build_text_encoder(TextEncoderConfig(**{**TINY.__dict__, "causal": causal})).eval()
    tokens = torch.tensor([[2, 7, 8, 9, 3, 0, 0], [2, 11, 12, 13, 14, 15, 3],
                           [2, 5, 3, 0, 0, 0, 0]])
    mask = (tokens != 0).long()
    with torch.no_grad():
        ours = enc(tokens, mask)
        theirs = enc.bert(input_ids=tokens, attention_mask=mask).last_hidden_state
        other_padding = enc(torch.where(mask.bool(), tokens, 40), mask)
    assert torch.equal(ours, theirs)
    torch.testing.assert_close(other_padding[mask.bool()], ours[mask.bool()])
    assert attention_mask(mask, causal).shape == ((3, 1, 7, 7) if causal else (3, 1, 1, 7))


def test_cls_and_last_pooling_pick_their_positions() -> None:
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    cls = build_text_encoder(TextEncoderConfig(**{**TINY.__dict__, "pooling": "cls"}))
    last = build_text_encoder(TextEncoderConfig(**{**TINY.__dict__, "pooling": "last"}))
    assert torch.equal(cls.pool(hidden, mask), hidden[:, 0])
    assert torch.equal(last.pool(hidden, mask), torch.stack([hidden[0, 2], hidden[1, 3]]))


def test_word_embeddings_is_the_input_embedding_matrix() -> None:
    enc = build_text_encoder(TINY)
    assert enc.word_embeddings is enc.bert.get_input_embeddings().weight
    assert enc.word_embeddings.shape == (50, 16)


def test_zeroed_encoder_is_collapsed_and_scores_chance_ntp_loss() -> None:
    """All weights zero: every hidden state is 0, so embeddings are identical rows and the
    tied-head logits are all 0: the NTP loss is exactly log(vocab)."""
    enc = build_text_encoder(TextEncoderConfig(**{**TINY.__dict__, "causal": True})).eval()
    with torch.no_grad():
        for p in enc.parameters():
            p.zero_()
        tokens = torch.tensor([[2, 7, 8, 9, 3], [2, 11, 12, 3, 0]])
        mask = (tokens != 0).long()
        h = enc(tokens, mask)
        emb = enc.embed(tokens, mask)
        loss = ntp_loss(h, tokens, enc.word_embeddings, pad_id=0)
    assert torch.equal(emb[0], emb[1])
    assert loss.item() == pytest.approx(math.log(50), abs=1e-6)


def test_bad_configs_raise() -> None:
    with pytest.raises(ValueError, match="pooling"):
        TextEncoderConfig(pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="divisible"):
        TextEncoderConfig(hidden=100, heads=12)


def test_parameter_counts_split_a_run_into_encoder_and_projector() -> None:
    """A JEPA arm's count is its encoder's and its projector's; next-token has no projector
    and no head of its own (its output head is the encoder's word embeddings)."""
    from prh.models import parameter_counts

    enc, proj = build_text_encoder(TINY), Projector(TINY.hidden, 32, 64)
    parts = parameter_counts(enc, proj)
    assert parts == {"encoder": bert_parameters(TINY), "projector": count_parameters(proj),
                     "total": count_parameters(torch.nn.ModuleList([enc, proj]))}
    assert parameter_counts(enc, None) == {"encoder": bert_parameters(TINY), "projector": 0,
                                           "total": bert_parameters(TINY)}
