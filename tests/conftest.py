"""Session-wide test settings: the checkout cache (sentinel/checkouts.py) lives in a folder of
this session, so a test run never fills or prunes the user's ~/.cache/rl-sentinel. A test that
needs its own cache sets SENTINEL_CACHE_DIR itself (monkeypatch), which wins."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


@pytest.fixture(scope="session", autouse=True)
def _session_checkout_cache():
    if os.environ.get("SENTINEL_CACHE_DIR"):  # the caller chose one (CI, a developer): keep it
        yield
        return
    folder = tempfile.mkdtemp(prefix="sentinel-test-cache-")
    os.environ["SENTINEL_CACHE_DIR"] = folder
    try:
        yield
    finally:
        os.environ.pop("SENTINEL_CACHE_DIR", None)
        shutil.rmtree(folder, ignore_errors=True)
