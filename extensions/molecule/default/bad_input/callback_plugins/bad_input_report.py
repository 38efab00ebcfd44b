# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test tooling for the bad-input matrix: each host's first failure (task, message, seconds since the run began), as JSON.

Enabled only by extensions/molecule/default/bad_input/matrix.py (ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED); writes the
file named by BAD_INPUT_REPORT when the run ends.
"""

from __future__ import annotations

import json
import os
import time
import typing as t

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: bad_input_report
type: aggregate
short_description: Each host's first failure, for the bad-input matrix (test tooling)
description:
  - Writes, when the run ends, a JSON object host -> {task, msg, seconds} to the file named by BAD_INPUT_REPORT.
requirements:
  - enabled in configuration
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bad_input_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.started = time.monotonic()
        self.failed: t.Dict[str, t.Dict[str, t.Any]] = {}

    def _record(self, result: t.Any, message: str) -> None:
        host = result._host.get_name()
        if host not in self.failed:
            self.failed[host] = {"task": result._task.get_name(), "path": result._task.get_path() or "", "msg": message,
                                 "seconds": round(time.monotonic() - self.started, 1)}

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        if ignore_errors:
            return
        outcome = result._result
        message = str(outcome.get("msg", ""))
        for item in outcome.get("results", []) or []:
            if isinstance(item, dict) and item.get("failed"):
                message += " " + str(item.get("msg", ""))
        self._record(result, message)

    def v2_runner_on_unreachable(self, result: t.Any) -> None:
        self._record(result, "UNREACHABLE: " + str(result._result.get("msg", "")))

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        with open(os.environ["BAD_INPUT_REPORT"], "w") as handle:
            json.dump(self.failed, handle, indent=2, sort_keys=True)
