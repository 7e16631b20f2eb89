"""Faults a user meets: file names leaving the image folder, sizes the data cannot hold,
duplicate or non-finite params, unreadable checkpoints and embeddings, interrupted writes,
a corrupt tracking store, Ctrl-C and a full disk. Each ends in one line, never a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
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

    (tmp_path / "slow_stage.py").write_text("import time\n\ndef main(argv):\n"
                                            "    time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", "import sys\n"
                             "from harness import cli\n"
                             "cli.COMMANDS['slow'] = ('slow_stage:main', '')\n"
                             "sys.exit(cli.main(['slow']))"],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"})
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err

