"""dvc.yaml follows the code: each stage lists every module its command runs (the import
closure of harness/stages/STAGE.py, lazy imports included) and the data files they read, so
editing any of them makes `dvc status` name exactly the stages that run it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from stage_deps import DVC_FILES, ROOT, stage_files, stage_module
from tiny_world import copy_code, sh

from harness.config.params import load_params
from harness.records.armtrain import arm_train_doc
from prh.config import ARMS
from prh.io import write_json

BIN = Path(sys.executable).parent
SEEDS = (0, 1)  # the scratch repository's seeds: two keep its dvc status quick
MATRIX = [f"{a}-{s}" for a in ("good", "bad", "ntp") for s in SEEDS]


def dvc_stages(doc: dict) -> dict[str, set[str]]:
    """dvc.yaml stage name -> its deps (templated paths as written)."""
    return {name: set(stage.get("deps", [])) for name, stage in doc["stages"].items()}


def missing_deps(doc: dict) -> dict[str, set[str]]:
    """Per stage, the files its command runs or reads that dvc.yaml does not list."""
    out = {}
    for name, deps in dvc_stages(doc).items():
        missing = stage_files(stage_module(name)) - deps
        if missing:
            out[name] = missing
    return out


def read_dvc_yaml(name: str = "dvc.yaml") -> dict:
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", DVC_FILES)
def test_every_stage_runs_its_own_module(name):
    for stage_name, stage in read_dvc_yaml(name)["stages"].items():
        assert stage["cmd"].split()[:2] == ["harness", stage_name], stage_name
        assert (ROOT / stage_module(stage_name)).is_file(), stage_name


@pytest.mark.parametrize("name", DVC_FILES)
def test_dvc_yaml_lists_each_stage_import_closure_and_data_files(name):
    assert missing_deps(read_dvc_yaml(name)) == {}


def test_a_deleted_dependency_line_is_caught():
    doc = read_dvc_yaml()
    doc["stages"]["aggregate"]["deps"].remove("harness/stats/estimators.py")
    doc["stages"]["report"]["deps"].remove("reports/templates")
    assert missing_deps(doc) == {"aggregate": {"harness/stats/estimators.py"},
                                 "report": {"reports/templates"}}


def test_lazy_and_relative_imports_count():
    files = stage_files(stage_module("align"))
    assert "harness/stats/estimators.py" in files  # imported inside main()
    assert "prh/align.py" in files  # `from prh.align import ...` inside main()
    assert "harness/records/runfile.py" in files  # imported at the top
    assert "prh/theory.py" not in files
    assert "harness/audit/claims.yaml" in stage_files(stage_module("audit"))


def expand(stage: str) -> set[str]:
    if stage == "config":
        return {f"config@{arm}" for arm in ARMS}
    return {f"{stage}@{m}" for m in MATRIX} if stage in ("train", "align") else {stage}


def stale(repo: Path) -> set[str]:
    """The stages `dvc status` names."""
    return {line.rstrip(":") for line in sh(repo, "dvc", "status").stdout.splitlines()
            if line.endswith(":") and not line.startswith((" ", "\t"))}


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """A scratch repository with this checkout's code, placeholder data and outputs, and
    every stage recorded in dvc.lock as it is (`dvc commit -f`): `dvc status` is clean."""
    repo = copy_code(tmp_path_factory.mktemp("deps"))
    text = (repo / "params.yaml").read_text()  # comments kept: a test below edits by them
    (repo / "params.yaml").write_text(re.sub(r"^seeds: .*$", f"seeds: {list(SEEDS)}", text,
                                             count=1, flags=re.M))
    placeholders = ["data/world/raw/dataset.json", "data/world/raw/images/000000.png",
                    "data/world/prepared/summary.json",
                    "runs/image/val.npz", "runs/results.json", "runs/theory.json",
                    "runs/plan.json", "runs/plan.md", "runs/looks.json",
                    "runs/probe.json",
                    "runs/contamination.json", "reports/audit.json", "reports/audit.html",
                    "reports/audit.pdf", "reports/checklist.json",
                    "runs/metrics/aggregate/good.json"]
    for m in MATRIX:
        arm, seed = m.split("-")
        placeholders += [f"runs/text/{arm}-s{seed}/run.json", f"runs/align/{arm}-s{seed}.json",
                         f"runs/align/{arm}-s{seed}.npz", f"runs/metrics/{arm}-s{seed}.json",
                         f"runs/plots/{arm}-s{seed}/epochs.json",
                         f"runs/plots/{arm}-s{seed}/fit_size.json"]
    for rel in placeholders:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("{}\n")
    params = load_params(repo / "params.yaml")
    for arm in ARMS:  # as the config stage writes them, so that rerunning it changes nothing
        write_json(repo / "runs" / "config" / f"{arm}.json", arm_train_doc(params, arm))
    sh(repo, "git", "init", "-q")
    sh(repo, "git", "add", "prh", "harness", "reports/templates", "dvc.yaml", "params.yaml",
       ".dvc")
    sh(repo, "git", "commit", "-qm", "code")
    sh(repo, "dvc", "commit", "-f", "-q")
    assert stale(repo) == set()
    return repo


@pytest.mark.parametrize("edited", ["prh/theory.py", "harness/stats/estimators.py",
                                    "harness/report/render.py", "prh/views.py",
                                    "harness/audit/claims.yaml", "reports/templates/_summary.j2"])
def test_editing_a_file_makes_dvc_status_name_exactly_the_stages_that_run_it(committed, edited):
    path = committed / edited
    original = path.read_bytes()
    expected = set()
    for name in read_dvc_yaml()["stages"]:
        deps = stage_files(stage_module(name))
        if edited in deps or any(edited.startswith(f"{d}/") for d in deps):
            expected |= expand(name)
    try:
        path.write_bytes(original + b"\n# edited\n")
        assert stale(committed) == expected
    finally:
        path.write_bytes(original)
    assert expected, edited


@pytest.mark.parametrize("key, value, probe", [("pairfree_inputs", "first-caption", False),
                                                 ("n_resamples", "2000", True)])
def test_an_eval_knob_reruns_the_probe_only_when_the_probe_reads_it(committed, key, value, probe):
    """The probe reads eval's k, ci_level, n_resamples and bootstrap_seed (its paired
    intervals) and lists only those: the pair-free inputs rerun the alignments, not its short
    trainings; n_resamples reruns both."""
    import re

    from harness.stages.probe import PROBE_EVAL_KEYS

    source = (ROOT / "harness/stages/probe.py").read_text()
    read = set(re.findall(r"\b(?:ev|eval_config\(\))\.(\w+)", source))
    listed = [p.split(".")[-1] for p in read_dvc_yaml()["stages"]["probe"]["params"]
              if ".eval." in p]
    assert read == set(listed) and listed == list(PROBE_EVAL_KEYS), (read, listed)
    path = committed / "params.yaml"
    original = path.read_text()
    edited, n = re.subn(rf"^    {key}: \S+", f"    {key}: {value}", original, count=1,
                        flags=re.M)  # the first: the world profile's eval section
    assert n == 1 and edited != original, key
    try:
        path.write_text(edited)
        after = stale(committed)
        assert {f"align@{m}" for m in MATRIX} <= after and ("probe" in after) == probe, after
    finally:
        path.write_text(original)
    assert stale(committed) == set()


@pytest.mark.slow  # dvc repro of the trainings: .ci/run's pipeline section
def test_a_sigreg_knob_reruns_the_jepa_arms_and_leaves_next_token(committed):
    """train@ARM and align@ARM read the train section through runs/config/ARM.json, which
    holds only what the arm reads: after `world.train.lamb` changes and the config stages rerun,
    DVC names the good and bad trainings and none of next-token's."""
    path = committed / "params.yaml"
    original = path.read_text()
    assert "    lamb: 0.02 " in original
    try:
        path.write_text(original.replace("    lamb: 0.02 ", "    lamb: 0.05 ", 1))
        assert {f"config@{arm}" for arm in ARMS} <= stale(committed)
        sh(committed, "dvc", "repro", "-q", *(f"config@{arm}" for arm in ARMS))
        after = stale(committed)
        jepa = {f"{stage}@{m}" for stage in ("train", "align") for m in MATRIX
                if not m.startswith("ntp")}
        assert jepa <= after
        assert not {s for s in after if "@ntp" in s}, sorted(after)
    finally:
        path.write_text(original)
        sh(committed, "dvc", "repro", "-q", *(f"config@{arm}" for arm in ARMS))
    assert not {s for s in stale(committed) if s.startswith(("config@", "train@", "align@"))}
