"""The Hydra configs, installed as the package data ``vitfsdp.conf`` (see pyproject.toml).

This file only makes the folder a package, so that wheels and editable installs alike find
it with ``importlib.resources``; Hydra reads the YAML files and skips this one.
"""
