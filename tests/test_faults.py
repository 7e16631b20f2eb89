"""Faults a user meets: file names leaving the image folder, sizes the data cannot hold,
duplicate or non-finite params, unreadable checkpoints and embeddings, interrupted writes,
a corrupt tracking store, Ctrl-C and a full disk. Each ends in one line, never a traceback."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.config.params import ParamsError, load_params
from harness.config.validate import check_data, validate_params
from prh.data import DataError, load_karpathy, photo_paths
from prh.io import ContractError, atomic_dir, load_embeddings, save_embeddings
from tests.test_data import karpathy_doc, write
from tests.test_params import write as params_file

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name,why", [("../../outside/secret.jpg", "'..' segment"),
                                      ("images/../../x.jpg", "'..' segment"),
                                      ("/etc/hostname", "absolute path"),
                                      ("C:/x.jpg", "absolute path"), ("", "empty")])
def test_a_file_name_leaving_the_image_folder_is_refused_when_read(tmp_path, name, why):
    doc = karpathy_doc()
    doc["images"][2]["filename"] = name
    with pytest.raises(DataError, match=rf"images\[2\] \(imgid 12\): file name .* {why}"):
        load_karpathy(write(tmp_path, doc))


def test_a_symlink_out_of_the_image_folder_is_refused_one_inside_is_followed(tmp_path):
    corpus = load_karpathy(write(tmp_path, karpathy_doc()))
    folder, outside = tmp_path / "images", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "secret.jpg").write_bytes(b"x")
    for p in corpus.photos[1:]:
        (folder / p.filename).write_bytes(b"x")
    (folder / corpus.photos[0].filename).symlink_to(folder / corpus.photos[1].filename)
    assert len(photo_paths(corpus.photos, folder)) == len(corpus.photos)  # a link inside
    linked = tmp_path / "linked"  # the image folder itself a link: confined to its target
    linked.symlink_to(folder)
    assert len(photo_paths(corpus.photos, linked)) == len(corpus.photos)
    (folder / corpus.photos[0].filename).unlink()
    (folder / corpus.photos[0].filename).symlink_to(outside / "secret.jpg")
    with pytest.raises(DataError, match=rf"imgid {corpus.photos[0].id}.*a symlink to "
                                        rf"{outside / 'secret.jpg'}, outside {folder}"):
        photo_paths(corpus.photos, folder)


def test_only_this_repositorys_dvc_cache_is_trusted_as_a_link_target(tmp_path, monkeypatch):
    """A link into another project's `.dvc/cache` is refused (it used to be followed: any
    folder named cache under any .dvc); one into this repository's cache, as `dvc cache dir`
    names it (a relative `cache.dir` in .dvc/config too), is followed."""
    from harness.data.dvccache import dvc_cache_dir

    corpus = load_karpathy(write(tmp_path, karpathy_doc()))
    repo, other = tmp_path / "repo", tmp_path / "other"
    folder = repo / "data/images"
    folder.mkdir(parents=True)
    (repo / ".dvc").mkdir()
    for p in corpus.photos[1:]:
        (folder / p.filename).write_bytes(b"x")
    (other / ".dvc/cache/files/md5/ab").mkdir(parents=True)
    (other / ".dvc/cache/files/md5/ab/cd").write_bytes(b"x")
    (folder / corpus.photos[0].filename).symlink_to(other / ".dvc/cache/files/md5/ab/cd")
    monkeypatch.chdir(repo)
    assert dvc_cache_dir() == (repo / ".dvc/cache").resolve()
    with pytest.raises(DataError, match=r"a symlink to .*other/.dvc/cache/files/md5/ab/cd, "
                                        r"outside .*this repository's DVC cache"):
        photo_paths(corpus.photos, folder, dvc_cache_dir())
    (repo / ".dvc/config").write_text("[cache]\n    dir = ../../other/.dvc/cache\n")
    assert dvc_cache_dir() == (other / ".dvc/cache").resolve()
    assert len(photo_paths(corpus.photos, folder, dvc_cache_dir())) == len(corpus.photos)


def test_a_link_loop_or_a_name_too_long_is_one_line_naming_the_record(tmp_path):
    corpus = load_karpathy(write(tmp_path, karpathy_doc()))
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / corpus.photos[0].filename).symlink_to(folder / corpus.photos[0].filename)
    with pytest.raises(DataError, match=rf"imgid {corpus.photos[0].id} .*cannot be resolved"):
        photo_paths(corpus.photos, folder)
    (folder / corpus.photos[0].filename).unlink()
    long = [dataclasses.replace(corpus.photos[0], filename="x" * 5000 + ".jpg")]
    with pytest.raises(DataError, match=rf"imgid {corpus.photos[0].id}: file name 'x{{60}}\.\.\."
                                        r"x{16}\.jpg' has a part over 255 bytes"):
        photo_paths(long, folder)


def bomb_png(path: Path, side: int = 20000) -> None:
    """A valid PNG header of side x side pixels (no pixel data needed: only the header is read
    before the check refuses it)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    path.write_bytes(b"\x89PNG\r\n\x1a\n"
                     + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
                     + chunk(b"IEND", b""))


def test_every_photo_header_is_checked_before_any_stage_and_a_bomb_is_one_line(tmp_path):
    """harness run --check reads each photo's header: a non-image, a GIF, an empty file and a
    20000 x 20000 PNG (a decompression bomb) are named with their records in one error; the
    stage that decodes photos says one line for a bomb too, no traceback."""
    from PIL import Image

    from prh.data import check_image_files, check_image_headers
    from prh.image import ImageError, load_image

    corpus = load_karpathy(write(tmp_path, karpathy_doc()))
    folder = tmp_path / "images"
    folder.mkdir()
    for p in corpus.photos:
        Image.new("RGB", (8, 8)).save(folder / p.filename, format="JPEG")
    paths = photo_paths(corpus.photos, folder)
    check_image_headers(corpus.photos, paths, str(folder))  # all good: nothing raised
    bomb_png(paths[0])
    paths[1].write_bytes(b"not an image")
    Image.new("RGB", (8, 8)).save(paths[2], format="GIF")
    paths[3].write_bytes(b"")
    with pytest.raises(DataError) as err:
        check_image_headers(corpus.photos, paths, str(folder))
    message = str(err.value)
    assert "4 photo(s) cannot be used" in message
    assert f"imgid {corpus.photos[0].id}, " in message
    assert ("over 89,478,485 pixels, PIL's decompression-bomb bound (Image size (400000000"
            in message)
    assert "not an image PIL can open" in message and "a GIF file" in message
    assert "empty (0 bytes)" in message and "\n" not in message
    with pytest.raises(DataError, match=r"does not decode .*decompression bomb"):
        check_image_files(corpus, folder)
    with pytest.raises(ImageError, match=r"cannot read the image"):
        load_image(paths[0], 8)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_a_photo_cut_while_copying_is_refused_by_its_header_check(tmp_path, fmt):
    """The end a JPEG or PNG ends with is missing from a file cut short, even by one byte:
    `--check`'s header pass names it; the whole file passes, and so does one with bytes after
    its end (a little padding, or a motion photo's 5 KB of video)."""
    import numpy as np
    from PIL import Image

    from prh.data import header_problem

    path = tmp_path / "photo.jpg"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (200, 300, 3), dtype=np.uint8)).save(path, format=fmt)
    whole = path.read_bytes()
    assert header_problem(path) == ""
    path.write_bytes(whole + b"\x00" * 100)  # padding after the end marker
    assert header_problem(path) == ""
    path.write_bytes(whole + b"\x01" * 5000)  # a motion photo's video after the end
    assert header_problem(path) == ""
    for cut in (len(whole) * 2 // 3, len(whole) - 1):
        path.write_bytes(whole[:cut])
        assert header_problem(path) == (f"truncated: the {fmt} data stops before its end "
                                        "marker (the file was cut, while copying?)")
    if fmt == "JPEG":  # an EXIF thumbnail's own end marker, before the scan, does not count
        thumb = tmp_path / "thumb.jpg"
        Image.new("RGB", (8, 8)).save(thumb, format="JPEG")
        exif = Image.Exif()
        Image.fromarray(rng.integers(0, 255, (200, 300, 3), dtype=np.uint8)).save(
            path, format="JPEG", exif=exif.tobytes() + thumb.read_bytes())
        whole = path.read_bytes()
        assert header_problem(path) == ""
        path.write_bytes(whole[:len(whole) // 2])
        assert "truncated" in header_problem(path)


def test_a_set_smaller_than_the_profile_assumes_is_refused_right_after_reading(tmp_path):
    """The Flickr30k profile's default pair-free pool (14,500 a side) on a miniature of two
    train photos: refused by check_data, which prepare, image and `harness run` call on the
    caption file they just read, before any image is embedded."""
    params = load_params(params_file(tmp_path, lambda r: r.update(profile="flickr30k")))
    corpus = load_karpathy(write(tmp_path, karpathy_doc()))
    with pytest.raises(ParamsError, match=r"flickr30k.eval.pairfree_pool = 14500: each "
                                          r"pair-free pool is at most half the train photos "
                                          rf"of {corpus.path}, 1"):
        check_data(params, corpus)


@pytest.mark.parametrize("edit,needle", [
    (lambda r: r["world"]["train"].update(lr=float("inf")), "world.train.lr = inf: not a finite"),
    (lambda r: r["world"]["train"].update(epochs=10**9), "world.train.epochs = 1,000,000,000"),
    (lambda r: r["world"]["eval"].update(n_resamples=10**12), "world.eval.n_resamples"),
    (lambda r: r["world"]["data"].update(vocab_size=10**12), "world.data.vocab_size"),
    (lambda r: r["world"]["theory"].update(seed=-1), "world.theory.seed = -1: a seed"),
    (lambda r: r["world"]["data"]["world"].update(seed=-1), "world.data.world.seed = -1"),
    (lambda r: r["audit"]["margin"].update(r_at_1=float("inf")), "must be a finite number"),
])
def test_values_valid_in_type_but_not_in_range_are_refused_up_front(tmp_path, edit, needle):
    with pytest.raises(ParamsError, match=None) as err:
        validate_params(load_params(params_file(tmp_path, edit)))
    assert needle in str(err.value)


def test_a_key_written_twice_is_refused_not_silently_the_last(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    path = tmp_path / "params.yaml"
    path.write_text(text + "\nprofile: flickr30k\n")
    with pytest.raises(ParamsError, match=r"key 'profile' is written twice \(lines \d+ and"):
        load_params(path)


@pytest.mark.parametrize("content", [b"\x00\x01\x02binary", b"\xff\xfe\xfa"])
def test_a_binary_params_file_or_a_folder_is_one_line(tmp_path, content):
    path = tmp_path / "params.yaml"
    path.write_bytes(content)
    with pytest.raises(ParamsError, match="give a YAML file"):
        load_params(path)
    with pytest.raises(ParamsError, match="not a file"):
        load_params(tmp_path)


def test_truncated_embeddings_are_a_contract_error_naming_the_file(tmp_path):
    path = tmp_path / "val.npz"
    save_embeddings(path, ["a", "b"], np.ones((2, 3)))
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ContractError, match=rf"{path}: unreadable embeddings"):
        load_embeddings(path)


def test_an_unreadable_checkpoint_is_set_aside_and_training_starts_over(tmp_path, capsys):
    import torch

    from prh.checkpoint import resume

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"PK\x03\x04truncated")
    net, sigreg = torch.nn.Linear(2, 2), torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    assert resume(path, "id", net, sigreg, opt) == (0, 0, [])
    assert not path.exists() and (tmp_path / "checkpoint.pt.unreadable").is_file()
    assert "set aside" in capsys.readouterr().err


def test_a_killed_write_leaves_a_temp_folder_the_next_write_removes(tmp_path):
    target = tmp_path / "good-s0"
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "half").write_text("x")
        os.rename(tmp, tmp_path / ".good-s0.abcd1234.tmp")  # what a kill -9 leaves
        tmp.mkdir()
        raise RuntimeError
    assert (tmp_path / ".good-s0.abcd1234.tmp").is_dir()
    with atomic_dir(target) as tmp:
        (tmp / "whole").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good-s0"]


def harness(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd,
                          capture_output=True, text=True, **kw)


def test_a_corrupt_tracking_db_is_one_line_before_training(tmp_path):
    from harness.tracking.mlflow_runs import check_server

    db = tmp_path / "mlflow.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\x13" * 300)
    with pytest.raises(ContractError, match=rf"{db}: not a readable MLflow database"):
        check_server(f"sqlite:///{db}")


def test_a_store_killed_mid_commit_is_rolled_back_not_refused(tmp_path):
    """SIGKILL during an MLflow commit leaves a hot journal beside mlflow.db (CI met it: the
    resumed recap_train was refused as 'not a readable MLflow database'); the check rolls it
    back, as SQLite's next writer would, and the resumed run logs to the same store."""
    import sqlite3

    from harness.tracking.mlflow_runs import check_server

    db = tmp_path / "mlflow.db"
    check_server(f"sqlite:///{db}")  # MLflow's schema and the experiment
    writer = textwrap.dedent(f"""
        import os, signal, sqlite3
        db = sqlite3.connect({str(db)!r})
        db.execute("create table filler(x)")
        db.executemany("insert into filler values (?)", [(i,) for i in range(20000)])
        db.commit()
        db.execute("pragma cache_size=1")  # spill the update's pages into the file
        db.execute("update filler set x = x + 1")
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    assert subprocess.run([sys.executable, "-c", writer]).returncode == -signal.SIGKILL
    assert (tmp_path / "mlflow.db-journal").stat().st_size > 0  # the hot journal
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # what the check met
        sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute("select 1 from runs").fetchall()
    check_server(f"sqlite:///{db}")
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("select count(*) from filler where x = 0").fetchone() == (1,)


def test_harness_run_from_a_subfolder_of_the_repository_is_refused(tmp_path):
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    sub = tmp_path / "runs"
    sub.mkdir()
    out = harness("run", "--check", cwd=sub)
    assert out.returncode == 2 and f"no dvc.yaml here; run `harness run` from the repository " \
        f"root, {tmp_path}" in out.stderr
    assert "Traceback" not in out.stderr and not (sub / ".dvc").exists()


def test_a_file_size_limit_is_one_line_and_exit_1(tmp_path):
    """RLIMIT_FSIZE as a full disk: the world stage's write stops with EFBIG (CPython ignores
    SIGXFSZ); one line, exit 1, no half-written output."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    out = harness("world", "--params", str(ROOT / "params.yaml"), "--inputs", str(tmp_path),
                  "--out", str(tmp_path / "raw"), cwd=tmp_path, preexec_fn=limit)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "a file-size limit" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "raw").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".raw.")] == []


def test_ctrl_c_exits_130_with_a_line(tmp_path):
    import signal
    import time

    # the stage says when it runs: a signal sent during the imports (seconds on a busy
    # machine) would test the imports' handlers, not the command's
    (tmp_path / "slow_stage.py").write_text("import pathlib, time\n\ndef main(argv):\n"
                                            "    pathlib.Path('running').touch()\n"
                                            "    time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", "import sys\n"
                             "from harness import cli\n"
                             "cli.COMMANDS['slow'] = ('slow_stage:main', '')\n"
                             "sys.exit(cli.main(['slow']))"],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"},
                            # a shell's background job (nohup, &) ignores SIGINT, and so would
                            # the child: give it the terminal's default, as a user's shell does
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (tmp_path / "running").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err



# Mutations a sweep of every knob may leave valid, each for a stated reason.
STILL_VALID = {
    ("image.weights", "string"): "a path, looked for by `harness run --check` where the profile "
                                 "reads it (flickr30k), unused by the world's own encoder",
    ("eval.fit_sizes", "empty"): "no fit-size curve",
    ("eval.gallery_sizes", "empty"): "the whole test split as the only pool",
    ("probe.arms", "empty"): "the probe stage off",
    ("probe.text_sources", "empty"): "the text-source probe off",
    ("plan.pilot_seeds", "empty"): "no pilot (the plan's sds are params.yaml's)",
    ("plan.pilot_seeds", "all -1"): "the default is empty, so every element of it is too",
    ("plan.claims", "empty"): "every claim the profile judges from sampled runs",
    ("plan.claims", "all -1"): "the default is empty, so every element of it is too",
}


def knob_mutations(raw: dict):
    """(section, key, kind, edit) for every knob of the world profile: deleted, a string,
    null, and for numbers -1 and 10**12, for lists empty and all -1."""
    from harness.config.validate import knob_keys

    for section, keys in knob_keys().items():
        for key in keys:
            dotted = f"{section}.{key}"
            *parents, last = dotted.split(".")
            value = raw["world"]
            for part in parents:
                value = value[part]
            value = value[last]
            kinds: dict = {"deleted": None, "string": "x", "null": None}
            if isinstance(value, str):
                kinds.pop("string")
            if isinstance(value, int | float) and not isinstance(value, bool):
                kinds.update({"-1": -1, "1e12": 10**12 if isinstance(value, int) else 1.0e12})
            if isinstance(value, list):
                kinds.update({"empty": [], "all -1": [-1] * len(value)})
            for kind, new in kinds.items():
                def edit(r, parents=parents, last=last, kind=kind, new=new):
                    block = r["world"]
                    for part in parents:
                        block = block[part]
                    if kind == "deleted":
                        del block[last]
                    else:
                        block[last] = new
                yield section, key, kind, edit


def test_every_single_mutation_of_every_knob_is_refused_naming_its_key(tmp_path):
    """The fault campaign's params sweep: every knob of the world profile deleted, mistyped,
    null, negative, absurdly large or emptied, one at a time. Each is refused by the check
    `harness run` makes before any stage (validate_params) with a ParamsError naming the key
    and its section,
    but for the few STILL_VALID (each a valid setting); nothing else escapes."""
    import copy

    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    path = tmp_path / "params.yaml"
    refused, escaped, unnamed = 0, [], []
    for section, key, kind, edit in knob_mutations(raw):
        dotted = f"{section}.{key}"
        changed = copy.deepcopy(raw)
        edit(changed)
        path.write_text(yaml.dump(changed, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                                  sort_keys=False))
        try:
            validate_params(load_params(path))
        except ParamsError as e:
            refused += 1
            if section not in str(e) or key.rsplit(".", 1)[-1] not in str(e):
                unnamed.append(f"{dotted} {kind}: {e}")
            continue
        if (dotted, kind) not in STILL_VALID:
            escaped.append(f"{dotted} {kind}")
    assert escaped == [] and unnamed == []
    assert refused >= 400  # every knob, three to five ways each


@pytest.mark.parametrize("content", [b'{"schema": "prh.metrics/2", "run": {"arm": "go',
                                     b"\xff\xfe{"], ids=["truncated", "binary"])
@pytest.mark.parametrize("command", ["aggregate", "diff"])
def test_a_truncated_or_binary_run_file_is_one_line_exit_2(tmp_path, content, command):
    """A run file cut by a full disk on another machine, or overwritten with bytes: aggregate
    (and so audit and report after it) and diff stop with one line naming it, exit 2."""
    runs = tmp_path / "align"
    runs.mkdir()
    (runs / "good-s0.json").write_bytes(content)
    args = {"aggregate": ["--params", str(ROOT / "params.yaml"), "--align-dir", str(runs),
                          "--prepared", str(tmp_path / "prepared"), "--out",
                          str(tmp_path / "results.json"), "--metrics", str(tmp_path / "m")],
            "diff": [str(runs), str(runs)]}[command]
    out = harness(command, *args, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "good-s0.json: not valid JSON" in out.stderr
    assert not (tmp_path / "results.json").exists()


@pytest.mark.slow  # a real training killed and resumed (the pipeline section of .ci/run)
def test_a_training_killed_9_resumes_its_own_mlflow_run_with_every_epoch(tmp_path):
    """`harness train` killed with SIGKILL after its second checkpoint, then run again: one
    MLflow run for the seed, FINISHED (none left RUNNING), tagged as two attempts, holding
    every epoch of curve.json once, at its value, and no temp file left in the outputs."""
    import json
    import signal
    import sqlite3
    import time
    from collections import Counter

    import yaml

    sys.path.insert(0, str(ROOT / "tests"))
    import tiny_world

    repo = tiny_world.copy_project(tmp_path / "repo", epochs=5)
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["world"]["train"]["speed"]["checkpoint_every"] = 1
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    tiny_world.build_upstream(repo)
    cmd, env = tiny_world.train_cmd("good", 0), tiny_world.env()
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    ckpt = None
    while time.monotonic() < deadline and proc.poll() is None:
        ckpt = next((repo / "runs/.work").glob("good-s0-*/checkpoint.pt"), None)
        if ckpt is not None:
            import torch

            try:
                if torch.load(ckpt, map_location="cpu", weights_only=False)["epoch"] >= 2:
                    break
            except Exception:  # noqa: BLE001 (being replaced under us: try again)
                pass
        time.sleep(0.2)
    assert proc.poll() is None, "training ended before it could be killed: raise epochs"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (repo / "runs/text/good-s0").exists()
    with sqlite3.connect(repo / "mlflow.db") as db:
        assert [r[0] for r in db.execute("select status from runs")] == ["RUNNING"]
    again = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "continuing MLflow run" in again.stderr
    folder = repo / "runs/text/good-s0"
    run_id = json.loads((folder / "run.json").read_text())["mlflow_run_id"]
    curve = json.loads((folder / "curve.json").read_text())
    with sqlite3.connect(repo / "mlflow.db") as db:
        runs = db.execute("select run_uuid, status from runs").fetchall()
        attempts = db.execute("select value from tags where run_uuid = ? and key = 'attempts'",
                              (run_id,)).fetchone()
        rows = db.execute("select key, step, value, timestamp from metrics where run_uuid = ? "
                          "and key not like 'system/%'", (run_id,)).fetchall()
    assert runs == [(run_id, "FINISHED")] and attempts == ("2",)
    seen = Counter((key, step) for key, step, _, _ in rows)
    assert [k for k, n in seen.items() if n > 1] == []  # the resumed run skips logged epochs
    last = {(key, step): value for key, step, value, _ in rows}
    expected = {(k, row["epoch"]): float(v) for row in curve for k, v in row.items()}
    assert len(curve) == 5 and set(last) == set(expected)
    assert [last[k] for k in sorted(expected)] == pytest.approx(
        [expected[k] for k in sorted(expected)])
    assert [p.name for p in (repo / "runs/text").iterdir()] == ["good-s0"]


def skip_without_tmpfs(disk: Path) -> None:
    """Skip where a private tmpfs cannot be mounted on `disk` (no unshare, or refused)."""
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "mount", "-t", "tmpfs", "tmpfs", str(disk)],
            capture_output=True).returncode != 0:
        pytest.skip("no tmpfs mount here (unshare -rm mount -t tmpfs refused)")


@pytest.mark.parametrize("options,message", [
    ("size=256k", "the disk is full (No space left on device); make room and rerun"),
    ("ro", "the file system is read-only (Read-only file system); remount it read-write")])
def test_a_full_or_read_only_disk_is_one_line_exit_1_and_leaves_nothing(tmp_path, options,
                                                                          message):
    """A real full disk (a 256 kB tmpfs) and a read-only one, in a private mount namespace so
    nothing outlives the test, as the world stage's output folder: ENOSPC or EROFS ends it
    with one line, exit 1, and the disk is left empty (no output, no temp). Skipped where
    tmpfs cannot be mounted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    skip_without_tmpfs(disk)
    script = (f'mount -t tmpfs -o {options} tmpfs {disk} && '
              f'{sys.executable} -m harness.cli world --params {ROOT / "params.yaml"} '
              f'--inputs {tmp_path} --out {disk}/raw; echo "rc=$?" >&2; ls -A {disk} >&2')
    out = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = out.stderr.strip().splitlines()
    assert lines[-1] == "rc=1", out.stderr[-2000:]  # and `ls -A` printed nothing after it
    assert len(lines) == 2 and message in lines[0] and "Traceback" not in out.stderr
    assert ".tmp." not in lines[0]  # an atomic write's temp file is named by its output


def test_a_tracking_store_that_cannot_be_written_is_refused_before_training_and_not_left(
        tmp_path):
    """A SQLite store whose file cannot grow (a 64 kB file-size limit, as a full disk does to
    MLflow's schema migration): the check every training makes first says one line and leaves
    no half-created mlflow.db; a disk with less than 16 MiB free is refused before MLflow runs."""
    import resource
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    code = ("from harness.tracking.mlflow_runs import check_server\n"
            "from prh.io import ContractError\n"
            "try:\n    check_server()\nexcept ContractError as e:\n    print(e)\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, preexec_fn=limit,
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.startswith(f"{tmp_path / 'mlflow.db'}: the tracking store cannot be "
                                 "created ("), out.stdout + out.stderr[-2000:]
    assert len(out.stdout.strip().splitlines()) == 1 and out.stderr == ""
    assert not (tmp_path / "mlflow.db").exists()
    disk = tmp_path / "disk"
    disk.mkdir()
    skip_without_tmpfs(disk)
    script = (f"mount -t tmpfs -o size=1m tmpfs {disk} && MLFLOW_TRACKING_URI=sqlite:///{disk}"
              f"/mlflow.db {sys.executable} -c '{code}'; ls -A {disk}")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == (f"{disk}/mlflow.db: its disk has 1,048,576 bytes free, less "
                                  "than the 16 MiB a tracking store needs; make room there or "
                                  "point MLFLOW_TRACKING_URI elsewhere"), out.stdout + out.stderr


@pytest.mark.parametrize("holder", ["lock", "rwlock"])
def test_a_second_harness_run_while_dvc_works_is_one_line(tmp_path, holder):
    """Another DVC process in the workspace (here: this test, holding DVC's repository lock or
    a stage output in its rwlock, as `dvc repro` does): `harness run` stops with one line
    naming it, exit 2, before any stage; DVC would refuse too, with exit 255 and more lines."""
    import json

    import zc.lockfile

    (tmp_path / ".dvc/tmp").mkdir(parents=True)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    held = None
    if holder == "lock":
        held = zc.lockfile.LockFile(str(tmp_path / ".dvc/tmp/lock"))
    else:
        (tmp_path / ".dvc/tmp/rwlock").write_text(json.dumps({"write": {
            str(tmp_path / "runs/image"): {"pid": os.getpid(), "cmd": "dvc repro"}}, "read": {}}))
    try:
        out = harness("run", cwd=tmp_path)
    finally:
        if held is not None:
            held.close()
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert ("another DVC command holds" if holder == "lock" else
            f"in use by PID {os.getpid()} (dvc repro)") in out.stderr
    assert not (tmp_path / "data").exists()
