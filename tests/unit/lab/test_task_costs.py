# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's task-cost records (extensions/molecule/lab/callback_plugins/lab_task_costs.py): a real ansible-playbook run on the
controller, one task that burns CPU in its module and one that sleeps; the burn is charged to its own task."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import typing as t

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Burn
      ansible.builtin.command: "{python} -c 'import time; all(iter(lambda: time.process_time() < 1.5, False))'"
      changed_when: false
    - name: Sleep
      ansible.builtin.command: sleep 1
      changed_when: false
"""


ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run_recorded(tmp_path: pathlib.Path, playbook: str) -> t.List[t.Dict[str, t.Any]]:
    """ansible-playbook on localhost with the recorder on (records under tmp_path), as no recorded run's child; its
    records and those of any run it started."""
    env = dict(os.environ, INFEROPS_LAB_TASK_COSTS=str(tmp_path), MOLECULE_SCENARIO_NAME="unit",
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "extensions", "molecule", "lab", "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="lab_task_costs")
    env.pop("INFEROPS_LAB_TASK_COSTS_RUN", None)
    subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable,
                    playbook], check=True, env=env, capture_output=True)
    return [json.loads(line) for name in os.listdir(str(tmp_path)) if name.startswith("unit-")
            for line in open(os.path.join(str(tmp_path), name))]


def summary(tmp_path: pathlib.Path) -> str:
    return subprocess.run([sys.executable, os.path.join(ROOT, "tools", "task_costs.py"), str(tmp_path)], check=True,
                          capture_output=True, text=True).stdout


def test_each_task_is_charged_its_own_cpu(tmp_path: pathlib.Path) -> None:
    playbook = os.path.join(str(tmp_path), "play.yml")
    with open(playbook, "w") as handle:
        handle.write(PLAYBOOK.format(python=sys.executable))
    records = run_recorded(tmp_path, playbook)
    tasks = {record["task"]: record for record in records}
    assert set(tasks) == {"Burn", "Sleep"}
    # every task costs its module's start (about 0.2-0.4 CPU-seconds, more on a cold machine); the burn is 1.5 CPU-seconds
    # of its own process's time whatever the CPU's speed (a fixed count of additions took 0.9 to 1.9 s on machines of
    # this kind), well above that
    assert tasks["Burn"]["controller"] > 1.2, records
    assert tasks["Sleep"]["controller"] < tasks["Burn"]["controller"] / 2, records
    assert tasks["Sleep"]["wall"] >= 1.0, records
    out = summary(tmp_path)
    lines = out.splitlines()
    first = next(number for number, line in enumerate(lines) if "costliest" in line) + 1
    assert "unit " in out and "Burn" in lines[first], out


def test_a_run_started_by_a_task_is_counted_once(tmp_path: pathlib.Path) -> None:
    """The bad-input matrix's way: a task runs ansible-playbook; its tasks are recorded as nested and left out of the
    scenario's total, which the outer task already holds."""
    inner = os.path.join(str(tmp_path), "inner.yml")
    with open(inner, "w") as handle:
        handle.write(PLAYBOOK.format(python=sys.executable))
    outer = os.path.join(str(tmp_path), "outer.yml")
    with open(outer, "w") as handle:
        handle.write(f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Run another playbook
      ansible.builtin.command: "{ANSIBLE_PLAYBOOK} -i localhost, -c local -e ansible_python_interpreter={sys.executable} {inner}"
      changed_when: false
""")
    records = run_recorded(tmp_path, outer)
    nested = {record["task"]: record["nested"] for record in records}
    assert nested == {"Run another playbook": False, "Burn": True, "Sleep": True}, records
    outer_cpu = next(record["controller"] for record in records if record["task"] == "Run another playbook")
    burn_cpu = next(record["controller"] for record in records if record["task"] == "Burn")
    assert outer_cpu > burn_cpu, records
    out = summary(tmp_path)
    total = float(out.splitlines()[0].split("ansible runs, ")[1].split()[0])
    assert abs(total - outer_cpu) < 1.0, out
