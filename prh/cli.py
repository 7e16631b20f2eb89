"""`prh` command line: one sub-command per method tool. Each is a function `f(argv) -> int`
named "module:function" and imported lazily, so `prh --help` stays fast and each module owns
its own argument parsing."""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "world": ("prh.world:cli", "generate the embedded `world` data set"),
    "embed": ("prh.embed:cli", "write image embeddings (world encoder or DINOv2) with row ids"),
    "align": ("prh.align:cli", "fit Procrustes on fit rows, score test rows, write metrics JSON"),
    "theory": ("prh.theory:cli", "finite worlds: good/bad-view threshold grid, kernel-gap bound"),
}


def dispatch(prog: str, commands: dict[str, tuple[str, str]], argv: list[str] | None) -> int:
    """Run `commands[argv[0]]` with the remaining arguments; print usage on -h or no command."""
    args = sys.argv[1:] if argv is None else argv
    rows = "\n".join(f"  {name:<14} {text}" for name, (_, text) in commands.items())
    usage = f"usage: {prog} COMMAND [ARGS]\n\ncommands:\n{rows}\n"
    if not args or args[0] in {"-h", "--help"}:
        print(usage)
        return 0
    if args[0] not in commands:
        print(f"{prog}: unknown command {args[0]!r}\n\n{usage}", file=sys.stderr)
        return 2
    module_name, func_name = commands[args[0]][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(args[1:]) or 0)


def main(argv: list[str] | None = None) -> int:
    return dispatch("prh", COMMANDS, argv)


if __name__ == "__main__":
    raise SystemExit(main())
