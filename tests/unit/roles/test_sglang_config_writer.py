# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/sglang_service/files/inferops-sglang-config: a unit's configuration with its API key, made at its start."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import typing as t

import pytest
import yaml

WRITER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "sglang_service", "files", "inferops-sglang-config")
CONFIG = "# Ansible managed\nmodel-path: /models/m\nhost: 0.0.0.0\nport: 30000\n"


def write(tmp_path: t.Any, key: t.Optional[str]) -> t.Tuple[subprocess.CompletedProcess, str]:
    source, target = tmp_path / "sglang-ar.yaml", tmp_path / "run" / "sglang.yaml"
    source.write_text(CONFIG)
    target.parent.mkdir()
    env = {"PATH": os.environ.get("PATH", "")}
    if key is not None:
        env["INFEROPS_SGLANG_API_KEY"] = key
    done = subprocess.run([sys.executable, WRITER, str(source), str(target)], env=env, capture_output=True, text=True, check=False)
    return done, str(target)


@pytest.mark.parametrize("key", ["sk-plain", "a: b # c", "it's \"quoted\" \\ back", "ключ-ünïcode", "{not: a map}", "- list"])
def test_the_copy_holds_the_configuration_and_the_key_as_sglang_reads_it(tmp_path: t.Any, key: str) -> None:
    done, target = write(tmp_path, key)
    assert done.returncode == 0, done.stderr
    with open(target, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    assert config == {"model-path": "/models/m", "host": "0.0.0.0", "port": 30000, "api-key": key}
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert not os.path.exists(target + ".partial")


@pytest.mark.parametrize("key", [None, "", "  "])
def test_no_key_in_the_environment_is_refused_without_a_copy(tmp_path: t.Any, key: t.Optional[str]) -> None:
    done, target = write(tmp_path, key)
    assert done.returncode == 1 and "INFEROPS_SGLANG_API_KEY is not in this unit's environment" in done.stderr
    assert not os.path.exists(target)
