"""Table 7's paraphrase source (prh.paraphrase, `harness recap_paraphrase`) with a tiny random
Qwen2 causal LM written by save_pretrained: each text rewritten with the recorded prompt and
greedy decoding, the same as generating it alone by hand, deterministic, and read as a source
by the stream; no model, no source."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from reference_parts import minilm_dir

from harness.config.recap_train import configs
from harness.stages.recap_paraphrase import main as paraphrase_main
from prh.paraphrase import DEFAULT_PROMPT, PARAPHRASE
from prh.stream import StreamData
from prh.tokenizer import Tokenizer
from prh.train_stream import train_stream
from tests.test_recap import ROOT
from tests.test_stream import cfg, stream, subset  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> Path:
    """A random 2-layer Qwen2ForCausalLM (width 32) with the MiniLM tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("qwen")
    tok = AutoTokenizer.from_pretrained(minilm_dir(), local_files_only=True)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=tok.vocab_size, hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=512)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def params(tmp_path: Path, model: Path | None) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["recap"]["paraphrase"] = {"model": str(model) if model else None, "source": "alt",
                                  "max_new_tokens": 6, "batch_size": 3, "device": "cpu",
                                  "precision": "float32"}
    raw["recap"]["train"]["sources"] = [PARAPHRASE]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path / "params.yaml"


def test_each_alt_text_is_rewritten_as_generating_it_alone_and_read_as_a_source(
        subset: Path, generator: Path, tmp_path: Path) -> None:  # noqa: F811
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "para"
    args = ["--params", str(params(tmp_path, generator)), "--subset", str(subset)]
    assert paraphrase_main([*args, "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())["paraphrase"]
    assert summary["generator"]["prompt"] == DEFAULT_PROMPT
    assert summary["generator"]["decoding"].startswith("greedy")
    alt = [r for f in sorted(subset.glob("texts-*.parquet")) for r in pq.read_table(f)
           .to_pylist()]
    rows = pq.read_table(out / "texts.parquet").to_pylist()
    assert [r["row"] for r in rows] == [r["row"] for r in alt]
    assert summary["texts"] + summary["empty"] == sum(len(r["alt"]) for r in alt) == 7
    # the first alt-text generated alone, greedily, by hand
    model = AutoModelForCausalLM.from_pretrained(generator, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(generator, local_files_only=True)
    ids = tok(DEFAULT_PROMPT.format(text=alt[0]["alt"][0]), return_tensors="pt")
    with torch.no_grad():
        new = model.generate(**ids, do_sample=False, max_new_tokens=6,
                             pad_token_id=tok.pad_token_id)[0, ids["input_ids"].shape[1]:]
    assert rows[0][PARAPHRASE] == [t for t in [tok.decode(new, skip_special_tokens=True)
                                              .strip()] if t]
    assert paraphrase_main([*args, "--out", str(tmp_path / "again")]) == 0
    assert pq.read_table(tmp_path / "again/texts.parquet").to_pylist() == rows  # deterministic
    data = StreamData.open(subset, [PARAPHRASE], out)
    assert data.texted_rows().tolist() == [i for i, r in enumerate(rows) if r[PARAPHRASE]]
    train_cfg, _ = configs(tmp_path / "params.yaml", "good", 0)
    got = train_stream(cfg("good"), stream(sources=(PARAPHRASE,)), data,
                       Tokenizer.load(subset / "tokenizer"), tmp_path / "run")
    assert got[-1]["texts"] >= got[-1]["samples"] and train_cfg.arm == "good"


def test_without_a_model_there_is_no_source_and_no_run_may_name_it(subset: Path,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    path = params(tmp_path, None)
    assert paraphrase_main(["--params", str(path), "--subset", str(subset), "--out",
                            str(tmp_path / "para")]) == 0
    assert json.loads((tmp_path / "para/summary.json").read_text())["paraphrase"] is None
    with pytest.raises(Exception, match=r"names a source that is not there \(\['alt', "
                                        r"'recap'\]\).*paraphrase with recap\.paraphrase\.model"):
        configs(path, "good", 0)
    with pytest.raises(Exception, match=r"no source \['paraphrase'\]"):
        StreamData.open(subset, [PARAPHRASE], tmp_path / "para")
