"""Table 7's paraphrase source: each text of one source rewritten by an instruction model from
the user's local copy (e.g. Qwen2.5-7B-Instruct), so good views can draw among texts that no
image captioner wrote. The audit article: "With the captioner's recaptions swapped for a
text-only paraphrase, the WIT score drops from 0.107 to 0.060".

The prompt and the decoding are data (`ParaphraseConfig`) and are recorded with the output:
greedy decoding (deterministic for a given model, precision and device), at most
`max_new_tokens`, the model's chat template when its tokenizer has one, else the prompt as is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prh.io import ContractError

PARAPHRASE = "paraphrase"  # the source's name in the subset's tokens
DEFAULT_PROMPT = ("Rewrite this image caption in your own words, as one sentence with the same "
                  "meaning. Reply with the sentence only.\n\nCaption: {text}")  # assumed by us


@dataclass(frozen=True)
class ParaphraseConfig:
    """params.yaml's `recap.paraphrase` (harness.config.recap). `model`: a local
    transformers folder, or None for no paraphrase source."""

    model: Path | None = None
    source: str = "alt"
    prompt: str = DEFAULT_PROMPT
    max_new_tokens: int = 64
    batch_size: int = 32
    device: str = "cuda"
    precision: str = "bfloat16"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, where: str) -> ParaphraseConfig:
        """Strict build: unknown keys, a prompt without {text} and bad numbers raise."""
        d = dict(d or {})
        known = set(cls.__dataclass_fields__)
        if set(d) - known:
            raise ContractError(f"{where}: unknown key(s) {sorted(set(d) - known)}; the keys "
                                f"are {sorted(known)}")
        cfg = cls(**{**d, "model": Path(d["model"]) if d.get("model") else None})
        if "{text}" not in cfg.prompt:
            raise ContractError(f"{where}.prompt: it must hold {{text}}, where the caption goes")
        for key in ("max_new_tokens", "batch_size"):
            if not isinstance(getattr(cfg, key), int) or getattr(cfg, key) < 1:
                raise ContractError(f"{where}.{key}: a whole number of at least 1")
        return cfg

    def record(self) -> dict[str, Any]:
        """What the output records: every setting, the decoding spelled out."""
        return {**asdict(self), "model": str(self.model) if self.model else None,
                "decoding": "greedy (do_sample=False), stop at the model's end of sequence"}


def paraphrase(texts: Sequence[str], cfg: ParaphraseConfig, model: Any, tokenizer: Any,
               device: str) -> list[str]:
    """Each text rewritten (stripped; "" when the model wrote nothing)."""
    import torch

    out: list[str] = []
    tokenizer.padding_side = "left"  # generation continues from the right end of each row
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    for lo in range(0, len(texts), cfg.batch_size):
        prompts = [_prompt(cfg.prompt.format(text=t), tokenizer)
                   for t in texts[lo:lo + cfg.batch_size]]
        batch = tokenizer(prompts, return_tensors="pt", padding=True,
                          add_special_tokens=tokenizer.chat_template is None).to(device)
        with torch.no_grad():
            ids = model.generate(**batch, do_sample=False, max_new_tokens=cfg.max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id)
        new = ids[:, batch["input_ids"].shape[1]:]
        out += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    return out


def _prompt(text: str, tokenizer: Any) -> str:
    if tokenizer.chat_template is None:
        return text
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                         add_generation_prompt=True)


def load_generator(cfg: ParaphraseConfig) -> tuple[Any, Any]:
    """(model, tokenizer) of `cfg.model`, local files only; a folder that is not a causal LM
    raises naming it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(cfg.model)
    if not (path / "config.json").is_file():
        raise ContractError(f"{path}: no config.json, not a model folder; download the "
                            "instruction model once (`hf download Qwen/Qwen2.5-7B-Instruct "
                            "--local-dir DIR`) and name DIR in recap.paraphrase.model")
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16,
             "float32": torch.float32}.get(cfg.precision)
    if dtype is None:
        raise ContractError(f"recap.paraphrase.precision: {cfg.precision!r}; use bfloat16, "
                            "float16 or float32")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ContractError(f"{path}: cannot load a causal language model from it ({e})") from e
    return model.to(cfg.device).eval(), tokenizer
