"""Stage `recap_paraphrase` (pipelines/recap/dvc.yaml): Table 7's paraphrase source. Each text
of `recap.paraphrase.source` in the subset rewritten by the instruction model
`recap.paraphrase.model` (prh.paraphrase: the prompt and greedy decoding recorded), written as
texts (texts.parquet: row, paraphrase) and tokens (tokens/, the subset's tokenizer, read beside
the subset's own by prh.stream). With no model set it writes only a summary saying so, and no
run may name the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config.recap import encoder_cut, load_paraphrase
from harness.stages.common import fail, stage_parser
from prh.io import ContractError, atomic_dir, write_json


def write_paraphrase(cfg: Any, subset: Path, out: Path, cut: int) -> dict[str, Any]:
    """Rewrite the subset's texts of `cfg.source` into `out`; return the summary's counts (with
    the paraphrases longer than the `cut` tokens the encoder sees)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prh.features import identity
    from prh.paraphrase import PARAPHRASE, load_generator, paraphrase
    from prh.recap import TOKENS
    from prh.recap_subset import tokenize_file
    from prh.tokenizer import Tokenizer

    model, generator_tokenizer = load_generator(cfg)  # before any text is read
    rows = [r for f in sorted(subset.glob("texts-*.parquet"))
            for r in pq.read_table(f, columns=["row", cfg.source]).to_pylist()]
    flat = paraphrase([t for r in rows for t in r[cfg.source]], cfg, model,
                      generator_tokenizer, cfg.device)
    it = iter(flat)
    grouped = [[t for t in (next(it) for _ in r[cfg.source]) if t] for r in rows]
    pq.write_table(pa.table({"row": [r["row"] for r in rows],
                             PARAPHRASE: pa.array(grouped, pa.list_(pa.string()))}),
                   out / "texts.parquet")
    stats = tokenize_file(out / "texts.parquet", [PARAPHRASE], Tokenizer.load(subset / "tokenizer"),
                          out / TOKENS / "00000.arrow", cut)[PARAPHRASE]
    return {"generator": {**cfg.record(), "identity": identity(cfg.model)},
            "texts": sum(map(len, grouped)), "empty": len(flat) - sum(map(len, grouped)),
            **stats, "cut_at": cut,
            "examples": [{"text": r[cfg.source][0], "paraphrase": g[0]}
                         for r, g in zip(rows, grouped, strict=True) if g][:5]}


def main(argv: list[str]) -> int:
    """Rewrite the texts of recap.paraphrase.source in --subset with recap.paraphrase.model;
    write the paraphrases, their tokens and summary.json to --out."""
    parser = stage_parser("recap_paraphrase", main.__doc__)
    parser.add_argument("--subset", type=Path, required=True, help="the recap stage's folder")
    parser.add_argument("--out", type=Path, required=True, help="the paraphrase source's folder")
    args = parser.parse_args(argv)
    from harness.records.schemas import RECAP_PARAPHRASE

    try:
        cfg, cut = load_paraphrase(args.params), encoder_cut(args.params)
        with atomic_dir(args.out) as tmp:
            summary = write_paraphrase(cfg, args.subset, tmp, cut) if cfg.model else None
            write_json(tmp / "summary.json", {"schema": str(RECAP_PARAPHRASE),
                                              "paraphrase": summary})
    except ContractError as e:
        return fail(e)
    print("recap_paraphrase: " + (f"{summary['texts']:,} texts ({summary['empty']:,} empty) "
                                  f"by {cfg.model}" if summary else
                                  "no recap.paraphrase.model: no paraphrase source")
          + f" -> {args.out}")
    return 0
