"""docker/entrypoint.sh runs the pipeline only on the code the image installed: the stages run
the installed copy of prh/, harness/ and the report templates, while DVC hashes the
workspace's, so a workspace whose code differs from the image's snapshot is refused before
`dvc exp run` (the fake image of test_docker: a snapshot, a runs folder, a fake dvc)."""

from __future__ import annotations

import subprocess

from test_docker import box, entrypoint  # noqa: F401  (box is a fixture)

CODE = {"prh/io.py": "X = 1\n", "harness/cli.py": "Y = 1\n",
        "reports/templates/report.html.j2": "{{ x }}\n"}


def snapshot_with_code(src) -> None:
    for name, text in CODE.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    subprocess.run(["git", "-C", str(src), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "code"], check=True)


def runs_of_dvc(box) -> int:  # noqa: F811
    return box["log"].read_text().count("dvc exp run") if box["log"].exists() else 0


def test_edited_code_in_the_workspace_is_refused_before_dvc_runs(box):  # noqa: F811
    snapshot_with_code(box["src"])
    out = entrypoint(box, "world", gpu=False)
    assert out.returncode == 0, out.stderr
    (work,) = box["runs"].glob("workspace-*")
    (work / "README.md").write_text("notes\n")  # outside the code: no objection
    assert entrypoint(box, "world", gpu=False).returncode == 0
    assert runs_of_dvc(box) == 2

    (work / "harness" / "cli.py").write_text("Y = 2\n")  # uncommitted
    (work / "prh" / "io.py").write_text("X = 2\n")
    subprocess.run(["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "edit", "prh/io.py"], check=True)  # committed
    (work / "reports" / "templates" / "extra.j2").write_text("new\n")  # untracked
    out = entrypoint(box, "world", gpu=False)
    assert out.returncode == 2
    assert "differs from the copy the image installed and the stages run:\n" \
        "  harness/cli.py\n  prh/io.py\n  reports/templates/extra.j2\n" in out.stderr
    assert f"git -C {work} diff " in out.stderr
    assert runs_of_dvc(box) == 2  # dvc did not run

    subprocess.run(["git", "-C", str(work), "checkout", "-q", "HEAD~1", "--", "prh"], check=True)
    subprocess.run(["git", "-C", str(work), "checkout", "-q", "--", "harness"], check=True)
    (work / "reports" / "templates" / "extra.j2").unlink()
    out = entrypoint(box, "world", gpu=False)  # edits undone: runs again
    assert out.returncode == 0, out.stderr
    assert runs_of_dvc(box) == 3
