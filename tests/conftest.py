"""Shared fixtures: every test run gets its own model cache, never the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One model cache for the whole test run, never the user's."""
    cache = tmp_path_factory.mktemp("aaco-cache")
    old = os.environ.get("AACO_CACHE_DIR")
    os.environ["AACO_CACHE_DIR"] = str(cache)
    os.environ.pop("AACO_SESSIONS", None)
    yield cache
    if old is None:
        os.environ.pop("AACO_CACHE_DIR", None)
    else:
        os.environ["AACO_CACHE_DIR"] = old
