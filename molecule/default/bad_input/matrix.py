# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bad-input matrix: every case in cases.yml, in ONE `ansible-playbook playbooks/site.yml` run.

Each case becomes an inventory host of its own that points at a lab node (site-pro6000, converged, or the
spare site-mixed) and carries the case's variables, so one run checks them all in parallel
(site_serial=100%, site_max_fail_percentage=100: each host fails on its own). For every case:
  - the run failed for that host,
  - the failure message matches every `expect` pattern (the variable and the fix),
  - it failed within --max-seconds of the play's start;
and for every node: a snapshot (files under /etc/inferops, the units, profile.d, the toolkits and where
/usr/local/cuda leads, the venv's packages, the caches, the services' state and main PIDs) is identical
before and after the run. A listener on port 31000 is started first, for the "port taken" case.

Usage (molecule's side_effect runs it): matrix.py --inventory MOLECULE_INVENTORY --out DIR
Exit 0 when every case holds; prints a table either way and writes DIR/bad-input.json.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import time
import typing as t

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
LAB_VARS = os.path.join(ROOT, "inventories", "lab", "group_vars", "sglang_nodes.yml")
SQUATTER_PORT = 31000

# What must not change on a node when a run is refused (read over SSH, in one command).
SNAPSHOT = r"""
set -u
echo '# files'
find /etc/inferops /etc/systemd/system /etc/profile.d /var/lib/inferops /etc/apt/sources.list.d -xdev -type f 2>/dev/null \
  | sort | xargs -r sha256sum
echo '# toolkits'
ls -l --time-style=+%s /usr/local | grep cuda
readlink -f /usr/local/cuda
update-alternatives --query cuda 2>/dev/null | grep -E '^(Status|Value):'
echo '# venv packages'
ls /opt/sglang/venv/lib/python3*/site-packages | sort | sha256sum
echo '# caches'
find /var/lib/sglang -xdev \( -type f -o -type d \) -printf '%p %s %m %u\n' 2>/dev/null | sort | sha256sum
echo '# services'
systemctl show sglang-ar.service sglang-spec.service -p Id,ActiveState,SubState,MainPID,NRestarts,UnitFileState,ExecMainStartTimestampMonotonic
echo '# users'
getent passwd sglang
test -e /var/lib/sglang/INJECTED && echo INJECTED
"""


def load_inventory(path: str) -> t.Dict[str, t.Dict[str, t.Any]]:
    with open(path) as handle:
        inventory = yaml.safe_load(handle)
    return inventory["all"]["hosts"]


def ssh(node: t.Mapping[str, t.Any], command: str) -> str:
    argv = ["ssh", "-i", node["ansible_private_key_file"], "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "%s@%s" % (node["ansible_user"], node["ansible_host"]), command]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def case_vars(case: t.Mapping[str, t.Any], lab: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    variables = dict(case.get("vars") or {})
    for key, var in (("ar", "sglang_service_ar"), ("spec", "sglang_service_spec")):
        if key in case:
            variables[var] = dict(lab[var], **case[key])
    return variables


def write_inventory(cases: t.List[t.Dict[str, t.Any]], nodes: t.Mapping[str, t.Dict[str, t.Any]], out: str) -> str:
    with open(LAB_VARS) as handle:
        lab = yaml.safe_load(handle)
    hosts = {}
    for number, case in enumerate(cases, start=1):
        node = nodes[case.get("node", "site-pro6000")]
        connection = {key: value for key, value in node.items() if key.startswith("ansible_")}
        hosts["case-%02d" % number] = dict(connection, **case_vars(case, lab))
    inventory_dir = os.path.join(out, "bad-input-inventory")
    os.makedirs(inventory_dir, exist_ok=True)
    link = os.path.join(inventory_dir, "group_vars")
    if not os.path.lexists(link):
        os.symlink(os.path.dirname(LAB_VARS), link)
    path = os.path.join(inventory_dir, "hosts.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"all": {"children": {"sglang_nodes": {"hosts": hosts}}}}, handle, sort_keys=False)
    return inventory_dir


def failures(report: t.Dict[str, t.Any]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """host -> {msg, seconds} of its first failed task, from the json callback's report."""
    result: t.Dict[str, t.Dict[str, t.Any]] = {}
    for play in report.get("plays", []):
        started = play["play"]["duration"]["start"]
        for task in play.get("tasks", []):
            for host, outcome in task.get("hosts", {}).items():
                if host in result or not outcome.get("failed"):
                    continue
                message = str(outcome.get("msg", ""))
                for item in outcome.get("results", []) or []:
                    if item.get("failed"):
                        message += " " + str(item.get("msg", ""))
                ended = task.get("task", {}).get("duration", {}).get("end") or started
                result[host] = {"task": task["task"]["name"], "msg": message, "seconds": seconds_between(started, ended)}
    return result


def seconds_between(start: str, end: str) -> float:
    def parse(stamp: str) -> float:
        return time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:].rstrip("Z"))

    return round(parse(end) - parse(start), 1)


def files_section(snapshot: str) -> str:
    return snapshot.split("# toolkits", maxsplit=1)[0]


HEALTH = "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:30000/health\", timeout=5).status)'"


def rollback_case(case: t.Mapping[str, t.Any], inventory: str, node: t.Mapping[str, t.Any], out: str, number: int) -> t.Dict[str, t.Any]:
    """One change that passes the input checks but breaks the service: site.yml must fail and roll the node back."""
    with open(LAB_VARS) as handle:
        extra = case_vars(case, yaml.safe_load(handle))
    extra_file = os.path.join(out, "rollback-%d.json" % number)
    with open(extra_file, "w") as handle:
        json.dump(extra, handle)
    before = ssh(node, SNAPSHOT)
    started = time.monotonic()
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                           os.path.join(ROOT, "playbooks", "site.yml"), "--limit", "site-pro6000", "-e", "@" + extra_file],
                          capture_output=True, text=True, env=env, check=False)
    seconds = round(time.monotonic() - started, 1)
    output = done.stdout + done.stderr
    with open(os.path.join(out, "rollback-%d.log" % number), "w") as handle:
        handle.write(output)
    after = ssh(node, SNAPSHOT)
    problems = ["the run succeeded"] if done.returncode == 0 else []
    problems += ["output lacks %r" % pattern for pattern in case["expect"] if not re.search(pattern, output)]
    if files_section(before) != files_section(after):
        problems.append("files differ from before the run:\n" + "".join(difflib.unified_diff(
            files_section(before).splitlines(True), files_section(after).splitlines(True), "before", "after")))
    if "ActiveState=active" not in after.split("# services")[1].split("Id=sglang-spec")[0]:
        problems.append("sglang-ar is not active after the rollback")
    try:
        healthy = ssh(node, HEALTH).strip() == "200"
    except subprocess.CalledProcessError:
        healthy = False
    if not healthy:
        problems.append("sglang-ar does not answer /health with 200 after the rollback")
    return {"name": case["name"], "seconds": seconds, "problems": problems, "log": "rollback-%d.log" % number}


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inventory", required=True, help="molecule's inventory file (the lab nodes' connection settings)")
    parser.add_argument("--out", required=True, help="where the case inventory, the run's report and the result go")
    parser.add_argument("--cases", default=os.path.join(HERE, "cases.yml"))
    parser.add_argument("--max-seconds", type=float, default=60.0, help="a refusal must come this soon after the play starts")
    args = parser.parse_args(argv)
    with open(args.cases) as handle:
        matrix = yaml.safe_load(handle)
    cases = matrix["cases"]
    nodes = load_inventory(args.inventory)
    targets = sorted({case.get("node", "site-pro6000") for case in cases})
    inventory = write_inventory(cases, nodes, args.out)

    squatter = nodes["site-pro6000"]
    ssh(squatter, "systemd-run --unit lab-port-squatter --quiet python3 -m http.server %d --bind 127.0.0.1" % SQUATTER_PORT)
    try:
        time.sleep(1)
        before = {name: ssh(nodes[name], SNAPSHOT) for name in targets}
        started = time.monotonic()
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                               os.path.join(ROOT, "playbooks", "site.yml"), "--forks", "8",
                               "-e", "site_hosts=sglang_nodes site_serial=100% site_max_fail_percentage=100"],
                              capture_output=True, text=True, env=env, check=False)
        wall = round(time.monotonic() - started, 1)
        after = {name: ssh(nodes[name], SNAPSHOT) for name in targets}
    finally:
        ssh(squatter, "systemctl stop lab-port-squatter.service || true")
    with open(os.path.join(args.out, "bad-input-run.json"), "w") as handle:
        handle.write(done.stdout)
    report = json.loads(done.stdout[done.stdout.index("{"):])
    failed = failures(report)

    rows, bad = [], 0
    for number, case in enumerate(cases, start=1):
        host = "case-%02d" % number
        outcome = failed.get(host)
        problems = []
        if outcome is None:
            problems.append("NOT REFUSED")
        else:
            problems += ["message lacks %r" % pattern for pattern in case["expect"] if not re.search(pattern, outcome["msg"])]
            if outcome["seconds"] > args.max_seconds:
                problems.append("refused after %.1f s" % outcome["seconds"])
        bad += bool(problems)
        rows.append({"case": host, "name": case["name"], "node": case.get("node", "site-pro6000"), "refused": outcome is not None,
                     "seconds": outcome["seconds"] if outcome else None, "task": outcome["task"] if outcome else None,
                     "message": outcome["msg"] if outcome else None, "problems": problems})
    changed = {name: "".join(difflib.unified_diff(before[name].splitlines(True), after[name].splitlines(True), "before", "after"))
               for name in targets if before[name] != after[name]}

    print("%-8s %-58s %-6s %s" % ("CASE", "INPUT", "SECS", "RESULT"))
    for row in rows:
        print("%-8s %-58s %-6s %s" % (row["case"], row["name"][:58], row["seconds"],
                                      "; ".join(row["problems"]) or "refused, message names the variable and the fix"))
    print("%d case(s) in one ansible-playbook run of %.1f s: %d refused as expected, %d not; nodes %s: %s"
          % (len(cases), wall, len(cases) - bad, bad, ", ".join(targets), "changed!" if changed else "unchanged"))
    for name, diff in changed.items():
        print("== %s changed during the run:\n%s" % (name, diff))

    rollbacks = [rollback_case(case, args.inventory, nodes["site-pro6000"], args.out, number)
                 for number, case in enumerate(matrix.get("rollback", []), start=1)]
    for row in rollbacks:
        print("%-8s %-58s %-6s %s" % ("rollback", row["name"][:58], row["seconds"],
                                      "; ".join(row["problems"]) or "failed, rolled back: files as before, sglang-ar healthy"))
    rolled_bad = sum(bool(row["problems"]) for row in rollbacks)
    print("%d change(s) that break the service: %d rolled back with the node healthy, %d not" % (len(rollbacks), len(rollbacks) - rolled_bad, rolled_bad))
    with open(os.path.join(args.out, "bad-input.json"), "w") as handle:
        json.dump({"cases": rows, "wall_seconds": wall, "nodes_changed": changed, "rollbacks": rollbacks}, handle, indent=2)
    return 1 if bad or changed or rolled_bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
