# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers: the real H200 captures and the canned output of the lab GPU profiles."""

from __future__ import annotations

import os
import typing as t

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def read_fixture(*parts: str) -> str:
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read()


def real_h200_sections() -> t.List[str]:
    """The sections of the real capture, split at its '---' lines (see fixtures/real-h200/README.md)."""
    return read_fixture("real-h200", "h200-nvidia-smi-misc.txt").split("\n---\n")


class SmiOutput(t.NamedTuple):
    rc: int
    out: str


def profile_output(profile: str, call: str) -> SmiOutput:
    """Canned output of one nvidia-smi call ('query', 'banner', 'topo') for a lab GPU profile."""
    return SmiOutput(int(read_fixture("nvidia-smi", profile, call + ".rc")), read_fixture("nvidia-smi", profile, call + ".txt"))


@pytest.fixture
def real_h200() -> t.Dict[str, str]:
    sections = real_h200_sections()
    return {"query": sections[0], "query_noheader": sections[1], "banner": sections[3], "topo": sections[4]}


@pytest.fixture
def canned() -> t.Callable[[str, str], SmiOutput]:
    return profile_output


@pytest.fixture
def fixture_text() -> t.Callable[..., str]:
    return read_fixture
