# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module's main() with arguments and return what it printed, for the module tests beside this file."""

from __future__ import annotations

import json
import typing as t

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(main: t.Callable[[], None], capsys: pytest.CaptureFixture[str], params: t.Dict[str, t.Any],
               check_mode: bool = False, diff: bool = False) -> t.Dict[str, t.Any]:
    """exit_json/fail_json output as a dict (fail_json's has failed: true); diff: as with --diff."""
    args = dict(params)
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        main()
    return json.loads(capsys.readouterr().out)
