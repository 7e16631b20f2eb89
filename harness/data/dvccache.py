"""The one place outside a data folder that a link in it may lead to: this repository's own DVC
cache (`dvc add` with `cache.type: symlink` links a tracked folder's files there). Read from
DVC's repository config, as `dvc cache dir` reports it: `cache.dir` in `.dvc/config.local`,
else in `.dvc/config` (a relative path is relative to `.dvc/`), else `.dvc/cache`. DVC's
global and system configs are not read: a cache named only there is not trusted."""

from __future__ import annotations

import configparser
from pathlib import Path


def repo_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above `start` (the working folder) holding `.dvc/`."""
    here = (start or Path.cwd()).resolve()
    return next((p for p in (here, *here.parents) if (p / ".dvc").is_dir()), None)


def dvc_cache_dir(start: Path | None = None) -> Path | None:
    """This repository's DVC cache folder, resolved; None outside a DVC repository."""
    root = repo_root(start)
    if root is None:
        return None
    found = None
    for name in ("config", "config.local"):  # the local config wins
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        try:
            parser.read(root / ".dvc" / name)
        except configparser.Error:
            continue  # DVC itself refuses a config it cannot parse
        if parser.has_option("cache", "dir"):
            found = parser.get("cache", "dir").strip().strip("'\"")
    cache = Path(found) if found else Path("cache")
    return (root / ".dvc" / cache).resolve() if not cache.is_absolute() else cache.resolve()
