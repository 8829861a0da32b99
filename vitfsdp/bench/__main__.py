"""``python -m vitfsdp.bench [overhead|wrappers] ARGS...``: dispatch to a benchmark's ``main``.

    python -m vitfsdp.bench --models vit_huge_patch14_224 --batch 32   # throughput
    python -m vitfsdp.bench overhead ...                              # vitfsdp.bench.overhead
    python -m vitfsdp.bench wrappers ...                              # vitfsdp.bench.wrappers

Subcommand modules are imported only when asked for, so one never pays for (or breaks on)
another's imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

#: Subcommand → module with ``main(argv) -> int``; no subcommand = ``throughput``.
SUBCOMMANDS = {"overhead": "vitfsdp.bench.overhead", "throughput": "vitfsdp.bench.throughput",
               "wrappers": "vitfsdp.bench.wrappers"}
DEFAULT = "throughput"
#: Subcommand → the module whose ``parse_args(argv)`` answers ``--help`` without the
#: benchmark's imports (torch, timm: seconds).
HELP = {"throughput": "vitfsdp.bench.options"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand named by ``argv[0]`` (or :data:`DEFAULT` when ``argv[0]`` is not
    one) with the remaining arguments; returns its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    name = argv.pop(0) if argv and argv[0] in SUBCOMMANDS else DEFAULT
    if name in HELP and {"-h", "--help"} & set(argv):
        importlib.import_module(HELP[name]).parse_args(argv)  # prints the help, exits 0
    return importlib.import_module(SUBCOMMANDS[name]).main(argv)


if __name__ == "__main__":
    sys.exit(main())
