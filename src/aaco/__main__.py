"""Entry point for ``python -m aaco``."""

from __future__ import annotations

from aaco.cli import main

if __name__ == "__main__":
    main()
