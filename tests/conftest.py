"""Shared fixtures: the repository root, the schema, and a tiny saved GPT-NeoX."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from lmsat.config import load_yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def default_config() -> dict:
    return copy.deepcopy(load_yaml(ROOT / "config" / "config.yaml"))
