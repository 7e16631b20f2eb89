"""Web texts (prh.recap, prh.recap_subset, `harness recap`): a miniature Recap-style parquet
corpus the tests write, the subset against an md5 selection written here, its counts checked
by hand, a killed build resumed, and bad shards refused from their footers before any row is
read."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from harness.stages.recap import main
from prh import recap_subset
from prh.recap import RecapConfig, RecapError, check_shards, list_shards
from prh.recap_subset import build_subset

ROOT = Path(__file__).resolve().parents[1]
# shard -> rows (key, alt-text, recaption): 3 + 4 + 2 = 9 images; row 4 has no alt-text, row 6
# a blank recaption, rows 2 and 7 share a key (one image listed twice)
SHARDS = {
    "part/b-0001.parquet": [("k3", "a red dog", "A red dog runs on grass."),
                            ("k4", None, "Two cats sleep."),
                            ("k5", "blue car", "A blue car parked by a tree."),
                            ("k6", "kite", "   ")],
    "a-0000.parquet": [("k0", "dog", "A dog."), ("k1", "cat photo", "A small cat sits."),
                       ("k2", "tree", "A tall tree.")],
    "part/c-0002.parquet": [("k2", "tree again", "A tall green tree."),
                            ("k8", "boat", "A white boat on a lake.")],
}


def write_corpus(root: Path) -> Path:
    for name, rows in SHARDS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        keys, alt, recap = zip(*rows, strict=True)
        pq.write_table(pa.table({"key": list(keys), "org_caption": list(alt),
                                 "re_caption": list(recap), "url": ["u"] * len(rows)}),
                       root / name, row_group_size=2)
    return root


def config(root: Path, images: int, seed: int = 0, **kw: object) -> RecapConfig:
    return RecapConfig.from_dict({"data": str(root), "images": images, "tokenizer_sample": 100,
                                  "vocab_size": 60, "seed": seed, **kw,
                                  "sources": {"alt": ["org_caption"],
                                              "recap": ["re_caption"]}})


def by_md5(seed: int) -> list[str]:
    """The corpus's distinct keys (every row has a text) by md5(f"{seed}:{key}"), the subset's
    definition written out: the first N are the subset of N."""
    keys = {row[0] for rows in SHARDS.values() for row in rows}
    return sorted(keys, key=lambda k: hashlib.md5(f"{seed}:{k}".encode()).hexdigest())


def build(cfg: RecapConfig, out: Path, workers: int = 1) -> tuple[dict, list[dict]]:
    """The subset built into `out` (its summary and written rows)."""
    out.mkdir(parents=True)
    summary = build_subset(cfg, out, 62, out.parent / f"{out.name}.work", workers)
    return summary, [r for f in sorted(out.glob("texts-*.parquet"))
                     for r in pq.read_table(f).to_pylist()]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_subset_is_the_n_keys_of_smallest_md5_whatever_the_listing_and_merge(
        tmp_path, seed, monkeypatch):
    root = write_corpus(tmp_path / "raw")
    assert [p.relative_to(root).as_posix() for p in list_shards(root)] == [
        "a-0000.parquet", "part/b-0001.parquet", "part/c-0002.parquet"]  # canonical order
    ranked = by_md5(seed)
    for n in (1, 3, 8):  # nested by construction: the first n of one ranking
        summary, got = build(config(root, n, seed), tmp_path / f"n{n}")
        assert sorted(r["key"] for r in got) == sorted(ranked[:n])
        assert summary["unique_images"] == n and summary["seed"] == seed
    assert summary["duplicate_key_rows"] == 1  # k2's second row
    k2 = [r for r in got if r["key"] == "k2"]
    assert k2 == [{"row": 2, "key": "k2", "h": k2[0]["h"], "alt": ["tree"],
                   "recap": ["A tall tree."]}]  # a key's first row in canonical order
    # the shards renamed (another canonical order) and merged one signature at a time
    other = tmp_path / "other"
    for i, name in enumerate(reversed(sorted(SHARDS))):
        (other / f"z{i}").mkdir(parents=True)
        (root / name).rename(other / f"z{i}" / "x.parquet")
    monkeypatch.setattr(recap_subset, "MERGE_RECORDS", 1)
    monkeypatch.setattr(recap_subset, "MIN_CHUNK", 1)
    for n in (3, 8):
        _, moved = build(config(other, n, seed), tmp_path / f"moved{n}")
        assert sorted(r["key"] for r in moved) == sorted(ranked[:n])
    assert [r for r in moved if r["key"] == "k2"][0]["alt"] == ["tree again"]
    with pytest.raises(RecapError, match=r"8 distinct keys with a text of recap\.sources, "
                                         r"fewer than recap\.images = 9"):
        build(config(other, 9, seed), tmp_path / "nine")


@pytest.mark.parametrize("draw", range(3))
def test_keys_repeated_within_and_across_shards_are_one_image_whatever_the_windows(
        tmp_path, monkeypatch, draw):
    """Random corpora where keys repeat inside a shard and across shards, merged with windows
    of one signature (every window edge falls somewhere): the chosen keys are the md5 ranking's
    first N, each once, from its first row, and the repeats are counted."""
    rng = np.random.default_rng(draw)
    root = tmp_path / "raw"
    rows, start = [], 0
    for shard in range(3):
        keys = [f"k{k}" for k in rng.integers(0, 12, 15)]
        rows += [(shard, start + i, k) for i, k in enumerate(keys)]
        (root / f"s{shard}").mkdir(parents=True)
        pq.write_table(pa.table({"key": keys, "org_caption": [f"row {start + i}"
                                                             for i in range(15)],
                                 "re_caption": [None] * 15}), root / f"s{shard}/x.parquet")
        start += 15
    first = {}
    for _, row, key in rows:
        first.setdefault(key, row)
    ranked = sorted(first, key=lambda k: hashlib.md5(f"{draw}:{k}".encode()).hexdigest())
    monkeypatch.setattr(recap_subset, "MERGE_RECORDS", 1)
    monkeypatch.setattr(recap_subset, "MIN_CHUNK", 1)
    n = len(ranked) - 2
    summary, got = build(config(root, n, draw, tokenizer_sample=5), tmp_path / "out")
    assert sorted(r["key"] for r in got) == sorted(ranked[:n])  # each once
    assert all(r["alt"] == [f"row {first[r['key']]}"] for r in got)  # from its first row
    assert summary["duplicate_key_rows"] == sum(1 for _, _, k in rows if k in ranked[:n]) - n


@pytest.mark.slow  # a pool of two spawned workers: .ci/run's pipeline section
def test_two_workers_write_the_same_subset_as_one(tmp_path):
    root = write_corpus(tmp_path / "raw")
    one, rows_one = build(config(root, 6, tokenizer_sample=5), tmp_path / "one", workers=1)
    two, rows_two = build(config(root, 6, tokenizer_sample=5), tmp_path / "two", workers=2)
    assert (one, rows_one) == (two, rows_two)
    for name in sorted(p.name for p in (tmp_path / "one/tokens").iterdir()):
        assert (tmp_path / "one/tokens" / name).read_bytes() == \
            (tmp_path / "two/tokens" / name).read_bytes()


def test_a_killed_build_resumes_from_its_finished_tasks(tmp_path, monkeypatch):
    """The texts step dies on its second shard, then the rerun dies gathering; the next skips
    every finished task (the signatures are not rewritten), gathers again and writes what an
    uninterrupted build writes."""
    root = write_corpus(tmp_path / "raw")
    cfg, out, work = config(root, 6), tmp_path / "out", tmp_path / "work"
    whole = build(cfg, tmp_path / "whole")
    run = recap_subset.Texts.run

    def dies(self, data=None, rank=0, world_size=1):
        if rank == 1:
            raise RuntimeError("killed")
        return run(self, data, rank, world_size)

    monkeypatch.setattr(recap_subset.Texts, "run", dies)
    out.mkdir()
    with pytest.raises(RecapError, match=r"b-0001.parquet: texts step: RuntimeError: killed; "
                       r"rerun once mended"):  # the task's shard and step named
        build_subset(cfg, out, 62, work, 1)
    monkeypatch.setattr(recap_subset.Texts, "run", run)
    stamps = {p: p.stat().st_mtime_ns for p in (work / "sig").iterdir()}
    assert (work / "texts/texts-00000.parquet").exists()  # shard 0's texts task finished
    link, links = recap_subset._link, []

    def dies_gathering(src, dst):  # killed after the first file reached the output
        if links:
            raise RuntimeError("killed while gathering")
        links.append(dst)
        link(src, dst)

    monkeypatch.setattr(recap_subset, "_link", dies_gathering)
    with pytest.raises(RuntimeError, match="gathering"):
        build_subset(cfg, out, 62, work, 1)
    monkeypatch.setattr(recap_subset, "_link", link)
    shutil.rmtree(out)  # as atomic_dir drops its temp folder
    out.mkdir()
    summary = build_subset(cfg, out, 62, work, 1)  # every task done: gathers again
    assert {p: p.stat().st_mtime_ns for p in (work / "sig").iterdir()} == stamps
    assert (summary, [r for f in sorted(out.glob("texts-*.parquet"))
                      for r in pq.read_table(f).to_pylist()]) == whole


@pytest.mark.slow  # the subset stage end to end (about 13 s): .ci/run's pipeline section
def test_subset_stage_writes_each_sources_texts_and_counts_them_by_hand(tmp_path, capsys):
    from prh.stream import open_tokens
    from prh.tokenizer import Tokenizer, train_tokenizer

    root = write_corpus(tmp_path / "raw")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recap"].update(data=str(root), images=5, vocab_size=60, tokenizer_sample=4, seed=0)
    params["recap"]["train"]["encoder"] = {"max_len": 6}  # the encoder sees 4 tokens a text
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "subset"
    (tmp_path / ".subset.build-0f0ther").mkdir()  # a build of other params, left by a failure
    assert main(["--params", str(tmp_path / "params.yaml"), "--out", str(out)]) == 0
    assert not list(tmp_path.glob(".subset.build-*"))  # work folders go once out is in
    summary = json.loads((out / "summary.json").read_text())
    first: dict[str, tuple[list[str], list[str]]] = {}  # each key's first row: its texts
    for name in sorted(SHARDS):  # canonical order: sorted paths
        for key, alt, recap in SHARDS[name]:
            first.setdefault(key, ([alt.strip()] if alt and alt.strip() else [],
                                   [recap.strip()] if recap and recap.strip() else []))
    chosen = by_md5(0)[:5]
    written = [r for f in sorted(out.glob("texts-*.parquet"))
               for r in pq.read_table(f).to_pylist()]
    assert sorted(r["key"] for r in written) == sorted(chosen)
    assert all((r["alt"], r["recap"]) == first[r["key"]] for r in written)
    assert [r["row"] for r in written] == sorted(r["row"] for r in written)  # canonical order
    assert summary["cut_at"] == 4 and summary["rows_read"] == 9
    assert (summary["images"], summary["unique_images"]) == (5, 5)
    for i, name in enumerate(("alt", "recap")):
        assert summary["sources"][name]["texts"] == sum(len(first[k][i]) for k in chosen)
        assert summary["sources"][name]["images_without"] == sum(not first[k][i]
                                                                 for k in chosen)
    # the tokenizer's sample: the first 4 texts of the chosen keys in md5 order, sources in
    # params order
    sample = [t for k in chosen for texts in first[k] for t in texts][:4]
    tok = Tokenizer.load(out / "tokenizer")
    assert summary["tokenizer"]["sample_texts"] == 4
    assert tok.vocab() == train_tokenizer(sample, 60).vocab()
    encoded = {name: [tok.encode(t) for r in written for t in r[name]]
               for name in ("alt", "recap")}
    assert {n: s["tokens"] for n, s in summary["sources"].items()} == {
        n: sum(map(len, e)) for n, e in encoded.items()}
    unk = {n: sum(ids.count(tok.unk_id) for ids in e) for n, e in encoded.items()}
    assert {n: s["unk_tokens"] for n, s in summary["sources"].items()} == unk
    assert sum(unk.values()) > 0  # a 4-text tokenizer cannot spell every word
    cut = {n: sum(len(ids) > 4 for ids in e) for n, e in encoded.items()}
    assert {n: s["texts_cut"] for n, s in summary["sources"].items()} == cut
    # the tokens the stream reads: each row's texts' ids, uint16, in the written rows' order
    table = open_tokens(out / "tokens")
    assert table.features["alt"].feature.feature.dtype == "uint16"
    assert list(table["alt"]) == [[tok.encode(t) for t in r["alt"]] for r in written]
    params["recap"]["images"] = 8  # the whole corpus: k2 is listed twice, k6's recap is blank
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    capsys.readouterr()
    assert main(["--params", str(tmp_path / "params.yaml"), "--out", str(out)]) == 0
    assert "1 row(s) repeat the key of a chosen image" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["images"], summary["duplicate_key_rows"]) == (8, 1)
    assert summary["sources"]["recap"]["images_without"] == 1
    assert summary["written"] == ["texts-00000.parquet", "texts-00001.parquet",
                                  "texts-00002.parquet"]


@pytest.mark.parametrize("case, needle", [
    ("missing column", r"b-0001\.parquet: no column\(s\) \['re_caption'\]"),
    ("not parquet", r"b-0001\.parquet: not a readable parquet file"),
    ("too few rows", r"9 rows in 3 shard\(s\), fewer than recap\.images = 10"),
    ("no shards", r"no \*\.parquet file"),
    ("numbers", r"b-0001\.parquet: text column\(s\) \['re_caption \(double\)'\] do not hold "
                r"strings"),
])
def test_bad_shards_are_refused_naming_the_file_before_any_row_is_read(tmp_path, case,
                                                                        needle):
    root = write_corpus(tmp_path / "raw")
    bad = root / "part/b-0001.parquet"
    if case == "missing column":
        pq.write_table(pa.table({"key": ["x"], "org_caption": ["y"]}), bad)
    elif case == "not parquet":
        bad.write_bytes(b"<html>rate limited</html>")
    elif case == "numbers":
        pq.write_table(pa.table({"key": ["x"], "org_caption": ["y"], "re_caption": [0.3]}), bad)
    elif case == "no shards":
        root = tmp_path / "empty"
        root.mkdir()
    cfg = config(root, 10)
    with pytest.raises(RecapError, match=needle):
        check_shards(root, cfg.columns, 10 if case == "too few rows" else 9, cfg.text_columns)


@pytest.mark.parametrize("section, needle", [
    ({"images": 0}, r"recap\.images: a whole number"),
    ({"sources": {}}, r"recap\.sources: a mapping"),
    ({"sources": {"alt": "org_caption"}}, r"recap\.sources: a mapping"),
    ({"colour": 1}, r"unknown key\(s\) \['colour'\]"),
    ({"sources": {"key": ["org_caption"]}}, r"\['key'\] name\(s\) the written subset's own"),
    ({"sources": {"": ["org_caption"]}}, r"recap\.sources: a mapping"),
])
def test_a_bad_recap_section_names_the_key(section, needle):
    base = yaml.safe_load((ROOT / "params.yaml").read_text())["recap"]
    with pytest.raises(RecapError, match=needle):
        RecapConfig.from_dict({**base, **section})


# a run of a few steps of a one-layer encoder: what the pipeline tests train on the corpus
TINY_TRAIN = {"arms": ["good", "ntp"], "seeds": [0], "sources": ["alt", "recap"], "samples": 11,
              "warmup_samples": 2, "first_checkpoint": 2, "per_decade": 2, "save_every": 2,
              "encoder": {"batch_size": 2, "max_len": 12, "n_slices": 8, "device": "cpu",
                          "model": {"hidden": 16, "layers": 1, "heads": 2, "intermediate": 32,
                                    "proj_dim": 16, "proj_hidden": 32}}}


def recap_repo(tmp_path: Path, **recap: object) -> tuple[Path, dict]:
    """The project copied into a git repo with the corpus in data/recap/raw and params.yaml's
    recap section updated by `recap`; returns the repo and its params."""
    import shutil

    from tiny_world import commit_all, copy_code

    repo = copy_code(tmp_path / "repo")
    shutil.copytree(ROOT / "pipelines", repo / "pipelines")
    commit_all(repo, "code")
    write_corpus(repo / "data" / "recap" / "raw")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["recap"].update(recap)
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return repo, raw


@pytest.mark.slow  # dvc repro: .ci/run's pipeline section
def test_dvc_repro_runs_the_subset_stage_and_reruns_it_only_when_recap_changes(tmp_path):
    from tiny_world import sh

    repo, raw = recap_repo(tmp_path, images=7, vocab_size=60, tokenizer_sample=10,
                           train=TINY_TRAIN, score=[])
    stage = "pipelines/recap/dvc.yaml:recap"  # the subset alone (the runs: the next test)
    first = sh(repo, "dvc", "repro", stage)
    assert "Running stage 'pipelines/recap/dvc.yaml:recap'" in first.stdout
    summary = json.loads((repo / "data/recap/subset/summary.json").read_text())
    assert (summary["schema"], summary["images"]) == ("prh.recap_subset/2", 7)
    assert "Running stage" not in sh(repo, "dvc", "repro", stage).stdout
    raw["world"]["train"]["lr"] = 0.002  # another section: the subset stays
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert "Running stage" not in sh(repo, "dvc", "repro", stage).stdout
    raw["recap"]["images"] = 8
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert "Running stage" in sh(repo, "dvc", "repro", stage).stdout
    assert json.loads((repo / "data/recap/subset/summary.json").read_text())["images"] == 8


def test_rows_without_a_key_are_left_out_counted_and_named(tmp_path, capsys):
    root = write_corpus(tmp_path / "raw")
    pq.write_table(pa.table({"key": ["k3", None, "k9", None], "org_caption": ["a", "b", "e", "f"],
                             "re_caption": ["c", "d", "g", "h"]}), root / "part/b-0001.parquet")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["recap"].update(data=str(root), images=6, vocab_size=60, tokenizer_sample=10)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert main(["--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["rows_without_key"] == 2
    assert summary["first_without_key"] == {"path": "part/b-0001.parquet", "row": 1}
    assert ("2 row(s) have no 'key' and are left out (the first: part/b-0001.parquet row 1)"
            in capsys.readouterr().err)
    keys = {r["key"] for f in (tmp_path / "out").glob("texts-*.parquet")
            for r in pq.read_table(f).to_pylist()}
    assert keys == {"k0", "k1", "k2", "k3", "k9", "k8"}  # every keyed image


@pytest.mark.slow  # the whole web-text profile under dvc repro: .ci/run's pipeline section
def test_harness_run_on_the_recap_profile_ends_at_the_report_with_the_account(tmp_path):
    """`harness run` under `profile: recap` checks the shards and configs, then runs the
    web-text pipeline to its report: each arm's samples, texts, tokens and unique images per
    checkpoint, as its run.json and MLflow have them."""
    import re

    import mlflow
    from tiny_world import sh

    repo, raw = recap_repo(tmp_path, images=8, vocab_size=60, tokenizer_sample=100,
                           train=TINY_TRAIN, score=[])
    raw["profile"] = "recap"
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = sh(repo, "harness", "run", MLFLOW_TRACKING_URI=uri)
    assert "reports/recap.html and reports/recap.pdf are ready" in out.stdout
    html = (repo / "reports/recap.html").read_text()
    assert (repo / "reports/recap.pdf").read_bytes()[:5] == b"%PDF-"
    assert "smallest (2,240,000): these runs check the pipeline" in html
    for arm in ("good", "ntp"):
        run = json.loads((repo / f"runs/recap/{arm}-s0/run.json").read_text())
        assert [r["samples"] for r in run["account"]] == [2, 6, 12]
        for row in run["account"]:
            for key in ("samples", "texts", "tokens", "unique_images"):
                cell = re.search(rf'data-k="recap\.{arm}-s0\.{row["samples"]}\.{key}">([\d,]+)<',
                                 html)
                assert cell and int(cell.group(1).replace(",", "")) == row[key], (arm, key)
        mlflow.set_tracking_uri(uri)
        parts = run["config"]["parameters"]  # the report says what the count holds
        assert parts["encoder"] + parts["projector"] == parts["total"] > parts["encoder"] > 0 \
            if arm == "good" else parts["projector"] == 0 and parts["total"] == parts["encoder"]
        assert f"encoder {parts['encoder']:,}" in html
        history = mlflow.tracking.MlflowClient().get_metric_history(run["mlflow_run_id"],
                                                                    "unique_images")
        assert [(m.step, m.value) for m in history] == [
            (r["samples"], r["unique_images"]) for r in run["account"]]
    assert "Not scored" in html
    assert re.search(r'data-k="recap\.verdict\.t7_captioner_good"><b>not rerun</b>', html)
    # --fail-on gates the recap audit: against a baseline whose verdict differs, it trips
    base = json.loads((repo / "runs/recap_audit.json").read_text())
    next(r for r in base["claims"] if r["id"] == "t7_captioner_good")["verdict"] = "reproduced"
    (tmp_path / "base.json").write_text(json.dumps(base))
    gated = sh(repo, "harness", "run", "--fail-on", "changed", "--baseline",
               str(tmp_path / "base.json"), check=False, MLFLOW_TRACKING_URI=uri)
    assert gated.returncode == 1 and "changed: t7_captioner_good" in gated.stderr, gated.stderr
    assert sh(repo, "harness", "run", "--fail-on", "differs,inconclusive",
              MLFLOW_TRACKING_URI=uri).returncode == 0  # nothing judged: nothing trips

    def stale(**recap: object) -> set[str]:
        changed = dict(raw, recap={**raw["recap"], **recap})
        (repo / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
        status = sh(repo, "dvc", "status", "pipelines/recap/dvc.yaml").stdout.splitlines()
        return {line.rstrip(":").split(":")[-1] for line in status if line.endswith(":")
                and not line.startswith("\t")}

    assert stale(score=["wit1024"]) == {"recap_score"}  # scored again, not retrained
    assert stale(train={**TINY_TRAIN, "samples": 13}) == {"recap_train@good-0",
                                                          "recap_train@ntp-0"}
    bad = dict(raw, recap={**raw["recap"], "train": {**TINY_TRAIN, "sources": ["paraphrase"]}})
    (repo / "params.yaml").write_text(yaml.safe_dump(bad, sort_keys=False))
    refused = sh(repo, "harness", "run", check=False, MLFLOW_TRACKING_URI=uri)
    assert refused.returncode == 2 and "recap.train.sources ['paraphrase'] names a source" \
        in refused.stderr
    unscored = dict(raw, recap={**raw["recap"], "score": ["wit1024"]})  # no WIT-1024 here
    (repo / "params.yaml").write_text(yaml.safe_dump(unscored, sort_keys=False))
    refused = sh(repo, "harness", "run", check=False, MLFLOW_TRACKING_URI=uri)
    assert refused.returncode == 2 and "data/wit1024" in refused.stderr \
        and "or set recap.score: [] to train without scoring" in refused.stderr
