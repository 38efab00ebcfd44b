# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test tooling for `make bench`: where a run's time went, task by task.

Enabled only by extensions/molecule/lab/bench.py (ANSIBLE_CALLBACK_PLUGINS, ANSIBLE_CALLBACKS_ENABLED). At the end of the run it
prints the slowest tasks: the wall seconds from the task's start to the next task's (what the run waited), the hosts
that ran it, and the tasks' count, so that a benchmark's table can be explained from its logs.
"""

from __future__ import annotations

import time
import typing as t

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: lab_task_times
type: aggregate
short_description: The slowest tasks of a run, for make bench (test tooling)
description:
  - Prints, when the run ends, the tasks that took the most wall time (task start to the next task's start).
requirements:
  - enabled in configuration
"""

SHOWN = 25


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "lab_task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.started = time.monotonic()
        self.current: t.Optional[t.Tuple[str, float]] = None
        self.walls: t.Dict[str, float] = {}
        self.runs: t.Dict[str, int] = {}
        self.count = 0

    def _close(self) -> None:
        if self.current is not None:
            name, begun = self.current
            self.walls[name] = self.walls.get(name, 0.0) + time.monotonic() - begun
            self.current = None

    def _open(self, task: t.Any) -> None:
        self._close()
        where = "/".join((task.get_path() or "?").split("/")[-3:])
        name = "%s (%s)" % (task.get_name(), where)
        self.current = (name, time.monotonic())
        self.count += 1

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        self._open(task)

    def v2_playbook_on_handler_task_start(self, task: t.Any) -> None:
        self._open(task)

    def _ran(self, result: t.Any) -> None:
        if self.current is not None:
            self.runs[self.current[0]] = self.runs.get(self.current[0], 0) + 1

    def v2_runner_on_ok(self, result: t.Any) -> None:
        self._ran(result)

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        self._ran(result)

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        self._close()
        total = time.monotonic() - self.started
        self._display.display("LAB TASK TIMES: %d task starts, %.1f s in all; the slowest (wall s, host runs, task):" % (self.count, total))
        for name, wall in sorted(self.walls.items(), key=lambda item: -item[1])[:SHOWN]:
            self._display.display("  %7.1f %4d  %s" % (wall, self.runs.get(name, 0), name))
