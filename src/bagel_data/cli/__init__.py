"""The `bagel-data` command line: `main` holds the commands, `tools` the prepare and
inspect sub-commands."""

from .main import main

__all__ = ["main"]
