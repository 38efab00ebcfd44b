# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TEST EQUIPMENT (tests/device only): an import stub for Hugging Face datasets, which the H200 harness does not carry (its
pyarrow alone is over the device tool's carry limit). SGLang's attention test kit reaches it through its test utilities
(sglang.test.test_utils imports SGLang's benchmark datasets) when the EAGLE draft runner mode configures its runner; no
case loads a dataset. Every name is a placeholder that raises when called."""

from __future__ import annotations

import typing as t

__version__ = "0+inferops.test.stub"


def __getattr__(name: str) -> t.Callable[..., t.NoReturn]:
    if name.startswith("__"):
        raise AttributeError(name)

    def unavailable(*args: t.Any, **kwargs: t.Any) -> t.NoReturn:
        raise RuntimeError("TEST STUB: datasets.%s (datasets is not installed in the H200 harness)" % name)

    return unavailable
