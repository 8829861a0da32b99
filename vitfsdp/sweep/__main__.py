"""``python -m vitfsdp.sweep``: :func:`vitfsdp.sweep.main_cli`."""

import sys

from vitfsdp.sweep import main_cli

sys.exit(main_cli(sys.argv[1:]))
