"""Files at a git revision or a DVC experiment, read through DVC: what `harness diff rev:REV`
and the audit gate's `--baseline rev:REV` read (DVC-tracked outputs from the DVC cache,
git-tracked ones from git)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from prh.io import ContractError


class DiffError(ContractError):
    """Two run sets cannot be compared as asked; the message names the runs and the fix."""


EXP_REFS = "refs/exps/"
# an experiment's ref: refs/exps/ + its baseline commit split 2 / 38 + its name; DVC's own refs
# under refs/exps/ (stash, celery/..., exec/..., apply/..., temp/...) have other shapes
EXP_REF = re.compile(r"^refs/exps/[0-9a-f]{2}/[0-9a-f]{38}/(?P<name>[^/]+)$")


def resolve_rev(rev: str) -> str | None:
    """The commit `rev` names: a git revision, else a DVC experiment's name (`dvc exp run -n
    NAME`, queued or not, once it has run: DVC commits it under EXP_REFS); None when it is
    neither. A name two baselines share is refused with the candidates."""
    commit = git_out("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if commit is not None:
        return commit
    refs = git_out("for-each-ref", "--format=%(refname) %(objectname)", EXP_REFS) or ""
    found = [(ref, commit) for ref, commit in (line.rsplit(" ", 1) for line in refs.splitlines())
             if (m := EXP_REF.match(ref)) and m["name"] == rev]
    if len(found) > 1:
        raise DiffError(f"rev:{rev}: {len(found)} DVC experiments have this name "
                        f"({', '.join(ref for ref, _ in found)}); give its commit instead")
    return found[0][1] if found else None


class Files:
    """Read access to a folder in the working tree, or at a git revision through DVC."""

    def __init__(self, rev: str | None):
        self.rev = rev
        self.fs = None
        if rev is not None:
            from dvc.api import DVCFileSystem

            root = git_out("rev-parse", "--show-toplevel")
            commit = resolve_rev(rev) if root is not None else None
            if root is None or commit is None:
                raise DiffError(f"rev:{rev}: neither a commit nor a DVC experiment of the git "
                                f"repository here ({Path.cwd()}); name a commit, branch, tag or "
                                "experiment (`dvc exp list`), or run from the repository")
            self.fs = DVCFileSystem(root, rev=commit)

    def names(self, folder: str) -> list[str]:
        if self.fs is None:
            path = Path(folder)
            return sorted(p.name for p in path.iterdir()) if path.is_dir() else []
        if not self.fs.isdir(folder):
            return []
        return sorted(Path(p).name for p in self.fs.ls(folder, detail=False))

    def read(self, path: str) -> bytes | None:
        """The file's bytes (None when absent); in the working tree, a link that leads out of
        the file's own folder is refused, so a run folder's reader opens nothing outside it."""
        if self.fs is None:
            p = Path(path)
            if p.is_symlink() and p.resolve().parent != p.parent.resolve():
                raise DiffError(f"{path}: a link to {p.resolve()}, outside its run folder; "
                                "readers open nothing outside it: replace the link with the "
                                "file (rerun its align stage)")
            return p.read_bytes() if p.exists() else None
        return self.fs.cat_file(path) if self.fs.exists(path) else None

    def where(self, path: str) -> str:
        return path if self.rev is None else f"{path}@{self.rev}"


def git_out(*args: str) -> str | None:
    """stdout of a git command in the current folder, or None when it fails."""
    proc = subprocess.run(["git", *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


