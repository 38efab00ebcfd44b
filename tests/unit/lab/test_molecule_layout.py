# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The molecule scenarios where molecule expects a collection's (extensions/molecule), by molecule's own lookup."""

from __future__ import annotations

import glob
import os

import pytest
from molecule import util

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_molecule_takes_the_scenarios_from_extensions_molecule(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("MOLECULE_GLOB", raising=False)
    util.get_effective_molecule_glob.cache_clear()
    try:
        found = util.get_effective_molecule_glob()
    finally:
        util.get_effective_molecule_glob.cache_clear()
    assert found == "extensions/molecule/**/molecule.yml"
    assert "should migrate" not in caplog.text
    scenarios = sorted(os.path.basename(os.path.dirname(path)) for path in glob.glob(os.path.join(ROOT, found), recursive=True))
    assert {"default", "zoo", "stack_matrix", "role", "example", "incident"} <= set(scenarios), scenarios
    # the base configuration every scenario shares, found by molecule where a collection keeps it
    assert util.lookup_config_file(".config/molecule/config.yml") == os.path.join(ROOT, "extensions", "molecule", "config.yml")
