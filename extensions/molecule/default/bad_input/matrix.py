# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bad-input matrix: every case in cases.yml, in ONE `ansible-playbook playbooks/site.yml` run; and (with the
rollbacks, nothing beside them) the rollout's own settings (cases.yml's rollout: site.yml's and remediate.yml's play
variables), a run each, refused on the controller.

Each case becomes an inventory host of its own that points at a lab node (site-pro6000, converged, or the
spare site-mixed) and carries the case's variables, so one run checks them all in parallel
(site_serial=100%, site_max_fail_percentage=100: each host fails on its own). For every case:
  - the run failed for that host,
  - the failure message matches every `expect` pattern (the variable and the fix), and the run's whole output
    holds none of the case's `hide` strings (a secret's value),
  - it failed in an input check or a node probe (a tasks/validate.yml, or a tasks/probe.yml and what it includes), and
    a case marked `alone`, run by itself, within --max-seconds;
and for every node: a snapshot (files under /etc/inferops, the units, profile.d, the toolkits and where
/usr/local/cuda leads, the venv's packages, the caches, the services' state and main PIDs) is identical
before and after the run. A listener on port 31000 is started first, for the "port taken" case.

Usage (molecule's side_effect runs it): matrix.py --inventory MOLECULE_INVENTORY --out DIR [--part refusals|rollbacks]
The refusals only read the nodes (molecule runs them beside the remediation of another node); the cases marked
`alone` (timed) and the rollbacks (site-pro6000's service goes down and back up) are a part of their own, run with
nothing beside them.
Exit 0 when every case holds; prints a table either way and writes DIR/bad-input-refusals.json and
DIR/bad-input-rollbacks.json.
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
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
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
# listed whole (not a digest), so that a change names the path that changed. Not Ansible's own scratch directories
# under the service user's .ansible/tmp: every module run as that user makes one there to work in (its working
# directory, ansible.module_utils.basic's _set_cwd, where root's is not readable) and removes it at its exit; one whose
# module did not exit normally stays behind, whichever run's module that was.
find /var/lib/sglang -xdev -path '/var/lib/sglang/.ansible/tmp/ansible-moduletmp-*' -prune -o \( -type f -o -type d \) \
  -printf '%p %s %m %u\n' 2>/dev/null | sort
echo '# services'
systemctl show sglang-ar.service sglang-spec.service -p Id,ActiveState,SubState,MainPID,NRestarts,UnitFileState,ExecMainStartTimestampMonotonic
echo '# users'
getent passwd sglang || true
if test -e /var/lib/sglang/INJECTED; then echo INJECTED; fi
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
        # lab_node: which node's cgroup the lab's task-cost records (extensions/molecule/lab/callback_plugins) read for this case
        hosts["case-%02d" % number] = dict(connection, lab_node=case.get("node", "site-pro6000"), **case_vars(case, lab))
    inventory_dir = os.path.join(out, "bad-input-inventory")
    os.makedirs(inventory_dir, exist_ok=True)
    link = os.path.join(inventory_dir, "group_vars")
    if not os.path.lexists(link):
        os.symlink(os.path.dirname(LAB_VARS), link)
    path = os.path.join(inventory_dir, "hosts.yml")
    with open(path, "w") as handle:
        yaml.safe_dump({"all": {"children": {"sglang_nodes": {"hosts": hosts}}}}, handle, sort_keys=False)
    return inventory_dir


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
    rc, output, seconds = run_site(inventory, ["--limit", "site-pro6000", "-e", "@" + extra_file, "--tags", case["tags"]],
                                   os.path.join(out, "rollback-%d.log" % number))
    after = ssh(node, SNAPSHOT)
    problems = ["the run succeeded"] if rc == 0 else []
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


def run_site(inventory: str, args: t.List[str], log: str, report: t.Optional[str] = None,
             playbook: str = "site.yml") -> t.Tuple[int, str, float]:
    """ansible-playbook playbooks/<playbook> with args; returns (rc, output, wall seconds). report: each host's first failure."""
    # LAB: 49 inventory names of the same two nodes, on a machine that runs other scenarios' nodes too: an SSH
    # handshake can take longer than Ansible's default 10 s there (a production node's sshd is not that loaded)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_TIMEOUT=os.environ.get("ANSIBLE_TIMEOUT", "60"))
    if report:
        # beside the callbacks molecule's configuration enables (the lab's task costs)
        plugins = [os.path.join(HERE, "callback_plugins")] + [path for path in os.environ.get("ANSIBLE_CALLBACK_PLUGINS", "").split(":") if path]
        enabled = ["bad_input_report"] + [name for name in os.environ.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",") if name]
        env.update(BAD_INPUT_REPORT=report, ANSIBLE_CALLBACK_PLUGINS=":".join(plugins), ANSIBLE_CALLBACKS_ENABLED=",".join(enabled))
    started = time.monotonic()
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                           os.path.join(ROOT, "playbooks", playbook)] + args, capture_output=True, text=True, env=env, check=False)
    output = done.stdout + done.stderr
    with open(log, "w") as handle:
        handle.write(output)
    return done.returncode, output, round(time.monotonic() - started, 1)


def check_refusal(case: t.Mapping[str, t.Any], outcome: t.Optional[t.Mapping[str, t.Any]]) -> t.List[str]:
    if outcome is None:
        return ["NOT REFUSED"]
    problems = ["message lacks %r" % pattern for pattern in case["expect"] if not re.search(pattern, outcome["msg"])]
    # an input check (tasks/validate.yml), a node probe (tasks/probe.yml and the tasks/probe_*.yml it includes), or Ansible's own check of the role's
    # argument spec at that entry point (types, choices), the task Ansible puts first in it
    checked_by = re.search(r"/tasks/(validate|probe|probe_[a-z]+)\.yml", outcome["path"])
    if not checked_by and "Validating arguments against arg spec 'validate'" not in outcome["task"]:
        problems.append("refused by %s (%s), not by an input check or a probe (tasks/validate.yml, tasks/probe*.yml or the validate entry point's spec)"
                        % (outcome["path"] or "?", outcome["task"]))
    return problems


def refusals(args: argparse.Namespace, cases: t.List[t.Dict[str, t.Any]], nodes: t.Dict[str, t.Dict[str, t.Any]]) -> int:
    """Every case in one site.yml run; the nodes' snapshots before and after must be identical."""
    targets = sorted({case.get("node", "site-pro6000") for case in cases})
    inventory = write_inventory(cases, nodes, args.out)
    report = os.path.join(args.out, "bad-input-failures.json")
    squatter = nodes["site-pro6000"]
    ssh(squatter, "systemd-run --unit lab-port-squatter --quiet python3 -m http.server %d --bind 127.0.0.1" % SQUATTER_PORT)
    try:
        time.sleep(1)
        before = {name: ssh(nodes[name], SNAPSHOT) for name in targets}
        _rc, output, wall = run_site(inventory, ["--forks", "8", "-e", "site_serial=100% site_max_fail_percentage=100"],
                                     os.path.join(args.out, "bad-input-run.log"), report)
        if not os.path.exists(report):
            print("ansible-playbook wrote no report:\n%s" % output[-3000:])
            return 1
        with open(report) as handle:
            failed = json.load(handle)
        after = {name: ssh(nodes[name], SNAPSHOT) for name in targets}
    finally:
        ssh(squatter, "systemctl stop lab-port-squatter.service || true")

    rows, bad = [], 0
    for number, case in enumerate(cases, start=1):
        host = "case-%02d" % number
        outcome = failed.get(host)
        problems = check_refusal(case, outcome)
        problems += ["the run's output shows %r" % text for text in case.get("hide", []) if text in output]
        bad += bool(problems)
        rows.append({"case": host, "name": case["name"], "node": case.get("node", "site-pro6000"), "refused": outcome is not None,
                     "task": outcome["task"] if outcome else None, "message": outcome["msg"] if outcome else None, "problems": problems})
    changed = {name: "".join(difflib.unified_diff(before[name].splitlines(True), after[name].splitlines(True), "before", "after"))
               for name in targets if before[name] != after[name]}

    print("%-8s %-56s %s" % ("CASE", "INPUT", "RESULT"))
    for row in rows:
        print("%-8s %-56s %s" % (row["case"], row["name"][:56],
                                 "; ".join(row["problems"]) or "refused by its input check, message names the variable and the fix"))
        if row["problems"]:
            # what the run said instead, so that a failure can be read from make test's output alone
            print("%-8s %s: %s" % ("", row["task"], (row["message"] or "(no failure)")[:600]))
    print("%d case(s) in one ansible-playbook run of %.1f s: %d refused as expected, %d not; nodes %s: %s" % (
        len(cases), wall, len(cases) - bad, bad, ", ".join(targets), "CHANGED" if changed else "unchanged (files, toolkits, venv, caches, services)"))
    for name, diff in changed.items():
        print("== %s changed during the run:\n%s" % (name, diff))
    with open(os.path.join(args.out, "bad-input-refusals.json"), "w") as handle:
        json.dump({"cases": rows, "batch_seconds": wall, "nodes_changed": changed}, handle, indent=2)
    return 1 if bad or changed else 0


def rollout_refusals(args: argparse.Namespace, cases: t.List[t.Dict[str, t.Any]], nodes: t.Dict[str, t.Dict[str, t.Any]]) -> int:
    """The rollout's own settings (site.yml's and remediate.yml's play variables), each in a run of its own: refused on
    the controller before any node is read, naming the variable and the values that work; the node unchanged."""
    node = nodes["site-pro6000"]
    rows, bad = [], 0
    for number, case in enumerate(cases, start=1):
        extra = os.path.join(args.out, "rollout-%d.json" % number)
        with open(extra, "w") as handle:
            json.dump(dict(case["vars"], **{case["playbook"].split(".")[0] + "_hosts": "site-pro6000"}), handle)
        before = ssh(node, SNAPSHOT)
        rc, output, seconds = run_site(args.inventory, ["-e", "@" + extra], os.path.join(args.out, "rollout-%d.log" % number),
                                       playbook=case["playbook"])
        after = ssh(node, SNAPSHOT)
        problems = ["the run succeeded"] if rc == 0 else []
        problems += ["output lacks %r" % pattern for pattern in case["expect"] if not re.search(pattern, output)]
        if "PLAY [Read every node" in output:
            problems.append("a node was read before the refusal")
        if before != after:
            problems.append("the node changed during the run")
        bad += bool(problems)
        rows.append({"name": case["name"], "playbook": case["playbook"], "seconds": seconds, "problems": problems})
        print("%-8s %-56s %5.1f s %s" % ("rollout", case["name"][:56], seconds,
                                         "; ".join(problems) or "refused on the controller, node unchanged"))
    print("%d rollout setting(s) refused as expected, %d not" % (len(rows) - bad, bad))
    with open(os.path.join(args.out, "bad-input-rollout.json"), "w") as handle:
        json.dump({"rollout": rows}, handle, indent=2)
    return 1 if bad else 0


def alone_and_rollbacks(args: argparse.Namespace, matrix: t.Mapping[str, t.Any], nodes: t.Dict[str, t.Dict[str, t.Any]]) -> int:
    """The cases marked alone, each in a run of its own (timed: what one refusal costs an operator), then each change
    that breaks the service, each in a run of its own that must roll the node back."""
    cases = matrix["cases"]
    inventory = write_inventory(cases, nodes, args.out)
    rows, bad = [], 0
    for number, case in enumerate(cases, start=1):
        if not case.get("alone"):
            continue
        host = "case-%02d" % number
        node = nodes[case.get("node", "site-pro6000")]
        before = ssh(node, SNAPSHOT)
        report = os.path.join(args.out, "alone-%s.json" % host)
        rc, _output, seconds = run_site(inventory, ["--limit", host], os.path.join(args.out, "alone-%s.log" % host), report)
        after = ssh(node, SNAPSHOT)
        failed: t.Dict[str, t.Any] = {}
        if os.path.exists(report):
            with open(report) as handle:
                failed = json.load(handle)
        problems = check_refusal(case, failed.get(host))
        if rc == 0 or seconds > args.max_seconds:
            problems.append("run alone: rc %d after %.1f s (at most %.0f s)" % (rc, seconds, args.max_seconds))
        if before != after:
            problems.append("the node changed during the run")
        bad += bool(problems)
        rows.append({"case": host, "name": case["name"], "seconds": seconds, "problems": problems})
        print("%-8s %-56s %5.1f s %s" % (host, case["name"][:56], seconds, "; ".join(problems) or "refused alone, node unchanged"))

    rollbacks = [rollback_case(case, args.inventory, nodes["site-pro6000"], args.out, number)
                 for number, case in enumerate(matrix.get("rollback", []), start=1)]
    for row in rollbacks:
        print("%-8s %-56s %-5s %s" % ("rollback", row["name"][:56], row["seconds"],
                                      "; ".join(row["problems"]) or "failed, rolled back: files as before, sglang-ar healthy"))
    rolled_bad = sum(bool(row["problems"]) for row in rollbacks)
    print("%d case(s) run alone, %d as expected; %d change(s) that break the service: %d rolled back with the node healthy, %d not"
          % (len(rows), len(rows) - bad, len(rollbacks), len(rollbacks) - rolled_bad, rolled_bad))
    with open(os.path.join(args.out, "bad-input-rollbacks.json"), "w") as handle:
        json.dump({"alone": rows, "rollbacks": rollbacks}, handle, indent=2)
    return 1 if bad or rolled_bad else 0


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inventory", required=True, help="molecule's inventory file (the lab nodes' connection settings)")
    parser.add_argument("--out", required=True, help="where the case inventory, the run's report and the result go")
    parser.add_argument("--cases", default=os.path.join(HERE, "cases.yml"))
    parser.add_argument("--part", choices=["all", "refusals", "rollbacks"], default="all",
                        help="refusals: every case in one run (the nodes only read); rollbacks: the cases marked alone, then "
                             "the changes that break the service (site-pro6000's service goes down and back up)")
    # What one refusal costs an operator, the whole ansible-playbook run included: about 12 s on this 2-core machine with
    # one lab node busy beside it, 28-31 s with the four of extensions/molecule/stack_matrix beside it in make test (the refusal
    # imports SGLang on the node: CPU). A flag found only when the service starts costs the rollback path, 70-100 s here.
    parser.add_argument("--max-seconds", type=float, default=60.0, help="a case run alone must be refused this soon")
    args = parser.parse_args(argv)
    with open(args.cases) as handle:
        matrix = yaml.safe_load(handle)
    nodes = load_inventory(args.inventory)
    rc = 0
    if args.part in ("all", "refusals"):
        rc |= refusals(args, matrix["cases"], nodes)
    if args.part in ("all", "rollbacks"):
        # with nothing beside them: run with the refusals, beside remediation.yml (which reads site-pro6000), the first
        # one's snapshots of site-pro6000 differed although the run never left the controller (no node play started)
        rc |= rollout_refusals(args, matrix.get("rollout", []), nodes)
        rc |= alone_and_rollbacks(args, matrix, nodes)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
