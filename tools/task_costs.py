# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make test's summary: where the lab runs' CPU went, from the task-cost records (extensions/molecule/lab/callback_plugins/
lab_task_costs.py, one JSON line per task under DIR): per scenario its controller and lab-node CPU seconds, then the
tasks that cost the most (controller + nodes, summed over every run of the task), with their wall seconds and runs."""
import collections
import glob
import json
import os
import sys
import typing as t


def main() -> int:
    directory = sys.argv[1] if len(sys.argv) > 1 else ".build/task-costs"
    shown = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    scenarios: t.DefaultDict[str, t.List[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    tasks: t.DefaultDict[t.Tuple[str, str, bool], t.List[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        scenario = os.path.basename(path).rsplit("-", 1)[0]
        scenarios[scenario][2] += 1
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                if not row.get("nested"):
                    # a nested run's CPU is already in the task of the run that started it
                    scenarios[scenario][0] += row["controller"]
                    scenarios[scenario][1] += row["nodes"]
                entry = tasks[(row["task"], row["where"], bool(row.get("nested")))]
                entry[0] += row["controller"]
                entry[1] += row["nodes"]
                entry[2] += row["wall"]
                entry[3] += 1
    if not tasks:
        print("task costs: none recorded in %s" % directory)
        return 0
    total = sum(controller for controller, _nodes, _runs in scenarios.values())
    print("task costs (%s): the controller's CPU in ansible runs, %.0f core-seconds; by scenario, with the lab nodes' CPU"
          " in its tasks' time (runs side by side on the same nodes count it in each):" % (directory, total))
    for name, (controller, nodes, runs) in sorted(scenarios.items(), key=lambda item: -(item[1][0] + item[1][1])):
        print("  %-22s controller %6.0f  nodes %6.0f  (%d ansible runs)" % (name, controller, nodes, int(runs)))
    print("  the costliest tasks (core-s = controller + nodes; wall s; runs; * = in a run that another run's task waited for, and"
          " counted in that task too):")
    for (task, where, nested), (controller, nodes, wall, runs) in sorted(tasks.items(), key=lambda item: -(item[1][0] + item[1][1]))[:shown]:
        values = (controller + nodes, controller, nodes, wall, int(runs), "*" if nested else " ", task[:70], where)
        print("  %7.1f = %6.1f + %6.1f  %7.1f s %4d %s%s (%s)" % values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
