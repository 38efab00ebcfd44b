# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make test's summary, at its end or when it is stopped from outside (the recipe's TERM/INT trap): what ran, for how
long, on what CPU, and where the CPU went. A log shows its tail first, so the lines come in this order: the costliest
tasks (least costly first, the costliest just above the summary), each scenario's controller and lab-node CPU, then
the summary: wall time and CPU model, the machine's CPU (and the part the hypervisor stole), the checks lane, the
images, one line per scenario (ended: rc, seconds, controller CPU; still running: since when and its log's last play
or task), the lab nodes' CPU (gone and still up) and the compiles.

Usage: test_summary.py end|stopped RC STARTED CPU_BEFORE STEAL_BEFORE MACHINE
  STARTED: the run's start (epoch seconds); CPU_BEFORE, STEAL_BEFORE: tools/cpu-seconds and tools/cpu-seconds steal
  then; MACHINE: labctl machine-state's words. Paths from the environment: BUILD, LAB_STATE, MOLECULE_LOGS, TASK_COSTS,
  and LABCTL (the command that runs labctl.py).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import subprocess
import sys
import time
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
CGROUPS = "/sys/fs/cgroup/unified"
# molecule's frame and colours around a play or task line
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
STEP = re.compile(r"^(?:PLAY|TASK) \[[^\]]*\]?")


def cpu_seconds(which: str = "busy") -> int:
    """The machine's busy (or stolen) CPU time since boot, in core-seconds: tools/cpu-seconds, which took the run's
    starting figures, so that both ends are read the same way."""
    command = [os.path.join(HERE, "cpu-seconds")] + (["steal"] if which == "steal" else [])
    return int(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()[0])


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def last_step(log: str) -> str:
    """The last play or task line of a scenario's log, without molecule's colours and frame."""
    found = ""
    try:
        with open(log, encoding="utf-8", errors="replace") as handle:
            for raw in handle:
                match = STEP.match(ANSI.sub("", raw).strip().strip("│|").strip())
                if match:
                    found = match.group(0)
    except OSError:
        return "(no log)"
    return found or "(no play yet)"


def scenarios(logs: str, started: int) -> t.List[str]:
    """One line per scenario that began: its end (lanes.txt's line) or, still running, since when and where it was."""
    ended = {}
    for line in read(os.path.join(logs, "lanes.txt")).splitlines():
        if line.strip():
            ended[line.split()[0]] = line
    lines = []
    for line in read(os.path.join(logs, "began.txt")).splitlines():
        if not line.strip():
            continue
        name, began = line.split()[0], int(line.split()[1])
        if name in ended:
            lines.append("molecule: %s" % ended.pop(name))
        else:
            lines.append("molecule: %s still running (started at +%d s), at: %s"
                         % (name, began - started, last_step(os.path.join(logs, name + ".log"))))
    lines.extend("molecule: %s" % line for line in ended.values())
    return lines


def nodes_cpu(state: str) -> str:
    """The lab nodes' CPU: those that went down (labctl's node-cpu.jsonl) and those still up (their cgroups)."""
    totals: t.Dict[str, float] = {}
    for line in read(os.path.join(state, "node-cpu.jsonl")).splitlines():
        try:
            row = json.loads(line)
            totals[row["node"]] = totals.get(row["node"], 0.0) + float(row["cpu_s"])
        except (ValueError, KeyError, TypeError):
            continue
    up: t.Dict[str, float] = {}
    for stat in glob.glob(os.path.join(CGROUPS, "inferops-lab-*", "cpu.stat")):
        for line in read(stat).splitlines():
            if line.startswith("usage_usec "):
                up[os.path.basename(os.path.dirname(stat))[len("inferops-lab-"):]] = int(line.split()[1]) / 1e6
    text = "lab nodes' CPU (everything in each node, from its cgroup): %d core-seconds in nodes gone" % sum(totals.values())
    if totals:
        text += " (%s)" % ", ".join("%s %d" % item for item in sorted(totals.items(), key=lambda item: -item[1]))
    if up:
        text += "; %d in nodes still up (%s)" % (sum(up.values()), ", ".join(
            "%s %d" % item for item in sorted(up.items(), key=lambda item: -item[1])))
    return text


def run(command: t.List[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120).stdout.rstrip()
    except (OSError, subprocess.SubprocessError) as error:
        return "(%s: %s)" % (" ".join(command[:2]), error)


def main(argv: t.List[str]) -> int:
    if len(argv) != 6 or argv[0] not in ("end", "stopped"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, rc, started, cpu_before, steal_before, machine = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    build = os.environ.get("BUILD", os.path.join(HERE, "..", ".build"))
    logs = os.environ.get("MOLECULE_LOGS", os.path.join(build, "molecule"))
    costs = os.environ.get("TASK_COSTS", os.path.join(build, "task-costs"))
    state = os.environ.get("LAB_STATE", os.path.join(build, "lab"))
    labctl = shlex.split(os.environ.get("LABCTL", "python3 extensions/molecule/lab/labctl.py"))
    wall = max(int(time.time()) - started, 1)
    cores = os.cpu_count() or 1
    cpu, steal = cpu_seconds() - cpu_before, cpu_seconds("steal") - steal_before
    model = "?"
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    tasks = run([labctl[0], os.path.join(HERE, "task_costs.py"), costs, "20"]).splitlines()
    # the costliest tasks last, just above the summary (a log's tail shows them), then the scenarios' lines above them
    rows = [line for line in tasks if re.match(r"^\s+[0-9.]+ =", line)]
    lines = [line for line in tasks if line not in rows] + rows[::-1]
    if mode == "end":
        lines.append("== make test: rc %s in %d s (%d min) on a %s, %d cores (%s)" % (rc, wall, (wall + 30) // 60, machine, cores, model))
    else:
        lines.append("== make test: stopped from outside after %d s on a %s, %d cores (%s)" % (wall, machine, cores, model))
    lines.append("   machine CPU: %d core-seconds, %d %% of %d cores; of it stolen by the hypervisor: %d"
                 % (cpu, cpu * 100 // (wall * cores), cores, steal))
    lines.append("   " + (read(os.path.join(build, "checks.time")) or "lint, sanity and unit tests (beside the lab): still running"))
    lines.append("   " + (read(os.path.join(build, "images.time")) or "lab images and mirror: not ended"))
    lines.extend("   " + line for line in scenarios(logs, started))
    lines.append("   " + nodes_cpu(state))
    lines.append("   lab compile cache: " + run(labctl + ["compiles", "--since", str(started)]))
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
