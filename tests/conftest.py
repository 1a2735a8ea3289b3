"""Shared fixtures and helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
COMPAS_CSV = SHARED / "data" / "compas-two-years.csv"

settings.register_profile("ci", deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def require(condition: bool, what: str) -> None:
    """Skip locally when a resource is missing, but FAIL under CI=true."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"required for CI but missing: {what}")
    pytest.skip(f"missing: {what}")
