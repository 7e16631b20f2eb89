"""Text encoders and the LeJEPA projector, built from a config with random weights.

The encoder is transformers' `BertModel`, never downloaded. We use that class rather than a
hand-written one because the authors' next-token head reads
`self.backbone.bert.embeddings.word_embeddings.weight` (the rerun article, "Next-token
prediction in two lines"): their encoder is Hugging Face
BERT, so the same class gives the same layer layout and initialisation (normal, std 0.02).
The NTP arm is "the same BERT turned causal" (the audit article, "What '109M Beats 72B'
Measured Was Not Language Ability"): `is_decoder=True` swaps the
bidirectional mask for a causal one and nothing else.

Pooling is a parameter. The default for every arm is the mean over non-pad tokens: for JEPA it
is our assumption (the articles do not quote the pooling line); for NTP it is how
platonic-rep embeds causal language models (`extract_features.py`: the mask-weighted mean
over tokens of every hidden state), so the causal encoder is scored the way the PRH
literature scores LLMs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

Pooling = Literal["mean", "cls", "last"]
POOLINGS: tuple[str, ...] = ("mean", "cls", "last")


@dataclass(frozen=True)
class TextEncoderConfig:
    """Shape of a BERT-style text encoder (nanoGPT `GPTConfig` style).

    `max_len` sizes the position table (tokens per sequence, specials included); `pad_id` is
    the tokenizer's padding id, ignored by pooling and by the NTP loss.
    """

    vocab_size: int = 30522
    hidden: int = 384
    layers: int = 12
    heads: int = 12
    intermediate: int = 1536
    max_len: int = 512
    dropout: float = 0.1  # BERT's default hidden and attention dropout (assumed by us)
    causal: bool = False  # True for the NTP arm
    pooling: Pooling = "mean"
    pad_id: int = 0

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling={self.pooling!r}: use one of {POOLINGS}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} is not divisible by heads={self.heads}")


# BERT-S: 12 layers, width 384, 12 heads, ~33M parameters (the rerun article, "Can a Text Model
# Match Photos...": "a 33M-parameter text encoder"); intermediate 4 x width as in BERT.
BERT_S = TextEncoderConfig(hidden=384, layers=12, heads=12, intermediate=1536)
# BERT-B: the 109M encoder of the web-scale runs (the rerun article, "What the paper claims at
# scale"); Devlin et al.'s BERT-base shape.
BERT_B = TextEncoderConfig(hidden=768, layers=12, heads=12, intermediate=3072)


class TextEncoder(nn.Module):
    """BERT encoder + pooling: `forward(tokens, mask) -> hidden [B, L, D]`, `embed -> [B, D]`."""

    def __init__(self, cfg: TextEncoderConfig) -> None:
        # imported here: transformers takes seconds to import, and every stage that reads a
        # training config (world, prepare, report) imports this module without building one
        from transformers import BertConfig, BertModel

        super().__init__()
        self.cfg = cfg
        bert_cfg = BertConfig(
            vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
            num_attention_heads=cfg.heads, intermediate_size=cfg.intermediate,
            max_position_embeddings=cfg.max_len, hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.dropout, pad_token_id=cfg.pad_id,
            is_decoder=cfg.causal, use_cache=False, attn_implementation="sdpa",
        )
        # No pooler: its tanh head is unused by every arm and would sit idle under DDP.
        self.bert = BertModel(bert_cfg, add_pooling_layer=False)

    @property
    def word_embeddings(self) -> Tensor:
        """The input word-embedding matrix [V, D]: the tied output head of the NTP arm."""
        return self.bert.embeddings.word_embeddings.weight

    def forward(self, tokens: Tensor, mask: Tensor, *packed: Tensor) -> Tensor:
        """tokens, mask: [B, L] (mask 1 on real tokens, right padding) -> hidden [B, L, D].

        With `packed` (packed tokens, positions, segments [R, W] and index [B, L], from
        prh.batches.pack_group) the encoder runs on the packed rows instead, each token
        attending within its own sequence only, and the output is gathered back to [B, L, D]
        (zeros on padding): the same function of each sequence, on fewer computed tokens."""
        if not packed:
            out = self.bert(input_ids=tokens,
                            attention_mask=attention_mask(mask, self.cfg.causal), use_cache=False)
            return out.last_hidden_state
        rows, positions, segments, index = packed
        allowed = segments[:, None, :, None] == segments[:, None, None, :]   # [R, 1, W, W]
        if self.cfg.causal:
            allowed = allowed & torch.ones_like(allowed[0, 0]).tril()
        hidden = self.bert(input_ids=rows, attention_mask=allowed, position_ids=positions,
                           use_cache=False).last_hidden_state                # [R, W, D]
        real = (index >= 0).unsqueeze(-1)
        out = hidden.flatten(0, 1)[index.clamp_min(0)]                        # [B, L, D]
        return out * real.to(out.dtype)

    def pool(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """hidden [B, L, D], mask [B, L] -> [B, D] by `cfg.pooling`."""
        if self.cfg.pooling == "cls":
            return hidden[:, 0]
        m = mask.to(hidden.dtype)
        if self.cfg.pooling == "mean":
            return (hidden * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True).clamp_min(1.0)
        last = mask.long().sum(1).clamp_min(1) - 1  # [B]: index of the last real token
        return hidden[torch.arange(hidden.size(0), device=hidden.device), last]

    def embed(self, tokens: Tensor, mask: Tensor, *packed: Tensor) -> Tensor:
        """tokens, mask: [B, L] (and optionally their packed form) -> pooled embedding [B, D]."""
        return self.pool(self(tokens, mask, *packed), mask)


def attention_mask(mask: Tensor, causal: bool) -> Tensor:
    """Padding mask [B, L] -> boolean SDPA mask (True = may attend): [B, 1, 1, L] for the
    bidirectional encoder, [B, 1, L, L] with the lower triangle for the causal one.

    BertModel takes a 4-D mask as is. Given the 2-D mask it builds the same one, but first asks
    `padding_mask.all()` on the device, which stalls the host on every forward pass on CUDA
    (transformers 5, masking_utils `_ignore_bidirectional_mask_sdpa`). The outputs are
    identical (tests/test_models.py)."""
    allowed = mask.bool()[:, None, None, :]
    if causal:
        n = mask.size(-1)
        allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    return allowed


def build_text_encoder(cfg: TextEncoderConfig) -> TextEncoder:
    """A randomly initialised encoder (nothing is downloaded)."""
    return TextEncoder(cfg)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def parameter_counts(encoder: nn.Module, projector: nn.Module | None) -> dict[str, int]:
    """What a run's parameter count holds: the encoder's (its word embeddings included, which
    next-token reads as its tied output head: that arm has no head of its own) and the
    projector's (the JEPA arms' only; 0 for next-token), and their total."""
    enc = count_parameters(encoder)
    proj = 0 if projector is None else count_parameters(projector)
    return {"encoder": enc, "projector": proj, "total": enc + proj}


class Projector(nn.Module):
    """stable-pretraining's default LeJEPA projector (`methods/lejepa.py`, `backbone/mlp.py`).

    Linear(D -> 512), then two blocks Linear -> BatchNorm1d -> ReLU of width 2048, then
    Linear(2048 -> 512) with no norm or activation on the output. The first Linear has no
    nonlinearity after it (a linear bottleneck), as upstream. SPT's Dropout(0) layers are
    identities and are left out. BatchNorm statistics run over all V x B view features, which
    the caller concatenates before the projector, as upstream does.
    """

    def __init__(self, in_dim: int, out_dim: int = 512, hidden: int = 2048) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, out_dim),
            nn.Linear(out_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
            nn.Linear(hidden, out_dim),
        )

    def forward(self, x: Tensor) -> Tensor:
        """x: [N, D] -> [N, out_dim]."""
        return self.net(x)
