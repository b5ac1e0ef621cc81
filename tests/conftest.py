"""Shared fixtures: every test run gets its own model cache, never the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sessions_fixtures import regress_sessions, web_root

__all__ = [
    "regress_sessions",
    "web_root",
]  # real sessions shared by the regress, report and web tests


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One model cache and one (empty) calibration folder for the whole test run, never the
    user's, and no first-run calibration unless a test asks for one."""
    cache = tmp_path_factory.mktemp("aaco-cache")
    calibration = tmp_path_factory.mktemp("aaco-calibration")
    keys = ("AACO_CACHE_DIR", "AACO_CALIBRATION_DIR", "AACO_AUTO_CALIBRATE")
    old = {k: os.environ.get(k) for k in keys}
    os.environ["AACO_CACHE_DIR"] = str(cache)
    # no test sees this machine's stored calibration unless it makes one itself
    os.environ["AACO_CALIBRATION_DIR"] = str(calibration)
    # nor measures one behind its back: a first-run calibration would cost seconds in the
    # first test that runs a session, be refused on a busy machine and change later tests'
    # verdicts through the shared folder; the tests of that feature turn it on themselves
    os.environ["AACO_AUTO_CALIBRATE"] = "0"
    os.environ.pop("AACO_SESSIONS", None)
    yield cache
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
