# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test tooling for `make test`: what each task of a lab run cost in CPU, on the controller and in the lab nodes.

Enabled for molecule's runs by extensions/molecule/config.yml and active only where INFEROPS_LAB_TASK_COSTS names a
directory (the Makefile sets it). For every task it appends one JSON line to <dir>/<scenario>-<pid>.jsonl: its wall
seconds (task start to the next task's start), the controller's CPU seconds in that time (ansible-playbook and its
descendants, reaped or not) and the CPU seconds of the lab nodes of the run's inventory (each node's cgroup, as labctl
makes it). tools/task_costs.py adds them up per task and per scenario.
"""

from __future__ import annotations

import json
import os
import time
import typing as t

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: lab_task_costs
type: aggregate
short_description: Each task's wall, controller CPU and lab nodes' CPU, for make test (test tooling)
description:
  - Appends one JSON line per task to a file under the directory that INFEROPS_LAB_TASK_COSTS names.
requirements:
  - enabled in configuration
"""

CGROUPS = "/sys/fs/cgroup/unified/inferops-lab-"


TICK = os.sysconf("SC_CLK_TCK")
PARENT = "INFEROPS_LAB_TASK_COSTS_RUN"


def stat_fields(pid: int) -> t.List[str]:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...); empty when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def controller_seconds() -> float:
    """This process's CPU, its reaped children's, and that of its live (or not yet reaped) descendants with theirs: a
    worker that ran a task is reaped during a later task, so the reaped children's figure alone would lag a task. The
    descendants are found through /proc/<pid>/task/<tid>/children (a few files, not all of /proc)."""
    times = os.times()
    total = times.user + times.system + times.children_user + times.children_system
    pending = children(os.getpid())
    while pending:
        pid = pending.pop()
        fields = stat_fields(pid)
        if not fields:
            continue
        total += sum(int(value) for value in fields[11:15]) / TICK
        pending.extend(children(pid))
    return total


def children(pid: int) -> t.List[int]:
    found: t.List[int] = []
    try:
        threads = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return found
    for thread in threads:
        try:
            with open("/proc/%d/task/%s/children" % (pid, thread), encoding="ascii") as handle:
                found.extend(int(value) for value in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def ancestors() -> t.List[str]:
    """The process ids above this one, up to init."""
    found = []
    pid = os.getppid()
    while pid > 1:
        found.append(str(pid))
        fields = stat_fields(pid)
        if not fields:
            break
        pid = int(fields[1])
    return found


def node_seconds(names: t.Iterable[str]) -> t.Dict[str, float]:
    """Each named lab node's CPU seconds so far (its cgroup's usage); a node that is not up is left out."""
    seconds = {}
    for name in names:
        try:
            with open(CGROUPS + name + "/cpu.stat", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("usage_usec "):
                        seconds[name] = int(line.split()[1]) / 1e6
                        break
        except OSError:
            continue
    return seconds


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "lab_task_costs"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        directory = os.environ.get("INFEROPS_LAB_TASK_COSTS", "")
        self.path = ""
        if directory and os.path.isdir(directory):
            scenario = os.environ.get("MOLECULE_SCENARIO_NAME", "run")
            self.path = os.path.join(directory, "%s-%d.jsonl" % (scenario, os.getpid()))
        # a run that a task of another recorded run waits for (the bad-input matrix's: a descendant of that run) is
        # counted in that task's controller CPU as well; one started in the background (setsid) is not
        self.nested = os.environ.get(PARENT, "") in ancestors()
        os.environ[PARENT] = str(os.getpid())
        self.playbook = "?"
        self.nodes: t.List[str] = []
        self.current: t.Optional[t.Dict[str, t.Any]] = None

    def _sample(self) -> t.Tuple[float, float, t.Dict[str, float]]:
        return time.monotonic(), controller_seconds(), node_seconds(self.nodes)

    def _close(self, sample: t.Optional[t.Tuple[float, float, t.Dict[str, float]]] = None) -> None:
        if self.current is None or not self.path:
            self.current = None
            return
        wall, controller, nodes = sample or self._sample()
        record = dict(self.current)
        before = record.pop("_nodes")
        # a node made or removed during the task (create, destroy) counts only for the time it was up at both ends
        used = sum(nodes[name] - before[name] for name in nodes if name in before)
        record.update(wall=round(wall - record.pop("_wall"), 3), controller=round(controller - record.pop("_controller"), 3),
                      nodes=round(used, 3))
        self.current = None
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    def _open(self, task: t.Any) -> None:
        if not self.path:
            return
        # one sample ends the last task and starts this one
        sample = self._sample()
        self._close(sample)
        wall, controller, nodes = sample
        where = "/".join((task.get_path() or "?").split("/")[-3:])
        self.current = {"playbook": self.playbook, "task": task.get_name(), "where": where, "nested": self.nested, "_wall": wall,
                        "_controller": controller, "_nodes": nodes}

    def v2_playbook_on_start(self, playbook: t.Any) -> None:
        self.playbook = os.path.basename(getattr(playbook, "_file_name", "?") or "?")

    def v2_playbook_on_play_start(self, play: t.Any) -> None:
        self._close()
        # a host of the inventory is a lab node of that name, or names its node (the bad-input matrix's cases: lab_node)
        try:
            hosts = play.get_variable_manager()._inventory.hosts  # pylint: disable=protected-access
        except AttributeError:
            hosts = {}
        self.nodes = sorted({str(host.vars.get("lab_node", name)) for name, host in hosts.items()})

    def v2_playbook_on_task_start(self, task: t.Any, is_conditional: bool) -> None:
        self._open(task)

    def v2_playbook_on_handler_task_start(self, task: t.Any) -> None:
        self._open(task)

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        self._close()
