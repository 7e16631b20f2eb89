"""Text embeddings from a trained text encoder: `encode(texts) -> float32 [n, D]`, during
training (the evaluation hook) or from a finished run's checkpoint, and every layer's
(`make_layer_encode`, what a web-text run's snapshots are scored on); and the next-token arm's
validation loss during training (`make_val_loss`). Image embeddings are prh.embed's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from prh.batches import trim
from prh.checkpoint import SNAPSHOT, read_checkpoint, tokenizer_from_files
from prh.io import ContractError
from prh.losses import ntp_loss
from prh.models import TextEncoder, TextEncoderConfig, attention_mask
from prh.tokenizer import Tokenizer
from prh.views import collate_ntp


def make_encode(encoder: TextEncoder, tokenizer: Tokenizer, max_len: int, device: torch.device,
                batch_size: int = 256, pad_multiple: int = 1
                ) -> Callable[[list[str]], np.ndarray]:
    """encode(texts) -> float32 [n, D]: pooled encoder output (not the projector) in eval mode.

    Each text is read whole as `[CLS] text [SEP]`, cut to `max_len`, no masking: the input
    format of the NTP arm, and of a JEPA view that keeps 100% with nothing masked.
    """

    @torch.no_grad()
    def encode(texts: list[str]) -> np.ndarray:
        was_training = encoder.training
        encoder.eval()
        out = [torch.zeros((0, encoder.cfg.hidden))]
        for i in range(0, len(texts), batch_size):
            chunk = tokenizer.encode_batch(list(texts[i: i + batch_size]))
            tokens, mask = trim(*collate_ntp(chunk, max_len, tokenizer), pad_multiple)
            out.append(encoder.embed(tokens.to(device), mask.to(device)).float().cpu())
        encoder.train(was_training)
        return torch.cat(out).numpy()

    return encode


def make_val_loss(encoder: TextEncoder, tokenizer: Tokenizer, max_len: int, device: torch.device,
                  texts: list[str], batch_size: int = 256) -> Callable[[], float]:
    """val_loss() -> the next-token cross-entropy (nats per target token, every non-padding
    target of every text counted once) of `texts` under a causal `encoder`, in eval mode.

    Each text is read as the NTP arm trains on it, `[CLS] text [SEP]` cut to `max_len`, and
    scored by `prh.losses.ntp_loss` (the word embeddings as output head). The audit article's
    "validation loss bottoms out at 3.04 at epoch 29" is this quantity on the paper's held-out
    captions; the texts are tokenized once."""
    if not texts:
        raise ValueError("make_val_loss: no validation texts")
    pad = encoder.cfg.pad_id
    batches = [trim(*collate_ntp(tokenizer.encode_batch(texts[i: i + batch_size]), max_len,
                                 tokenizer)) for i in range(0, len(texts), batch_size)]

    @torch.no_grad()
    def val_loss() -> float:
        was_training = encoder.training
        encoder.eval()
        total, count = 0.0, 0
        for tokens, mask in batches:
            tokens, mask = tokens.to(device), mask.to(device)
            n = int((tokens[:, 1:] != pad).sum())
            total += float(ntp_loss(encoder(tokens, mask), tokens, encoder.word_embeddings,
                                    pad)) * n
            count += n
        encoder.train(was_training)
        return total / count

    return val_loss


def load_text_encoder(out_dir: Path, device: str = "cpu") -> Callable[[list[str]], np.ndarray]:
    """encode(texts) -> float32 [n, D] from out_dir/checkpoint.pt (its own tokenizer inside)."""
    path = Path(out_dir) / "checkpoint.pt"
    if not path.exists():
        raise ContractError(f"{path}: no checkpoint; run `harness train` for this arm and seed")
    ckpt = read_checkpoint(path)
    enc_cfg = TextEncoderConfig(**ckpt["config"]["encoder"])
    encoder = TextEncoder(enc_cfg)
    prefix = "encoder."
    encoder.load_state_dict({k[len(prefix):]: v for k, v in ckpt["net"].items()
                             if k.startswith(prefix)}, strict=True)
    encoder.to(device)
    tokenizer = tokenizer_from_files(ckpt["tokenizer_files"])
    return make_encode(encoder, tokenizer, ckpt["config"]["train"]["max_len"],
                       torch.device(device))


def make_layer_encode(encoder: TextEncoder, tokenizer: Tokenizer, max_len: int,
                      device: torch.device, batch_size: int = 256
                      ) -> Callable[[list[str]], np.ndarray]:
    """layers(texts) -> float32 [n, L + 1, D]: every hidden state (the embeddings' output, then
    each layer's), each pooled as the encoder pools its last (TextEncoder.pool), in eval mode;
    the texts read as `make_encode` reads them, so the last layer is its embedding. prh.layers
    scores them pair by pair with an image encoder's (platonic-rep's best layer pair)."""

    @torch.no_grad()
    def layers(texts: list[str]) -> np.ndarray:
        was_training = encoder.training
        encoder.eval()
        out = []
        for i in range(0, len(texts), batch_size):
            chunk = tokenizer.encode_batch(list(texts[i: i + batch_size]))
            tokens, mask = (x.to(device) for x in trim(*collate_ntp(chunk, max_len, tokenizer)))
            hidden = encoder.bert(input_ids=tokens, output_hidden_states=True, use_cache=False,
                                  attention_mask=attention_mask(mask, encoder.cfg.causal)
                                  ).hidden_states
            out.append(torch.stack([encoder.pool(h, mask) for h in hidden], 1).float().cpu())
        encoder.train(was_training)
        return torch.cat(out).numpy()

    return layers


def load_snapshot(path: Path, device: str = "cpu") -> tuple[TextEncoder, Tokenizer, int, dict]:
    """(encoder, its tokenizer, max_len, the run's account there) of a web-text run's snapshot
    (prh.train_stream)."""
    ckpt = read_checkpoint(Path(path), SNAPSHOT)
    encoder = TextEncoder(TextEncoderConfig(**ckpt["encoder_config"]))
    encoder.load_state_dict(ckpt["encoder"], strict=True)
    return (encoder.to(device), tokenizer_from_files(ckpt["tokenizer_files"]), ckpt["max_len"],
            dict(ckpt["account"]))
