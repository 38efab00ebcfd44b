# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make bench -- what a no-op run and the drift report cost, and what the build store buys, measured on lab nodes.

LAB TOOLING. Boots N lab nodes of one GPU profile (SIMULATED GPUs; real systemd, toolkit, FlashInfer and nvcc 13.0
compiles, through the lab's compile cache), then, in one run:

  converge   playbooks/site.yml on 1 fresh node, then on the N of that fingerprint (the first one converged: its
             canary; the other N-1 in one batch: site_serial=100%)
  no-op      site.yml again on 1 node, then on the N (the converged check: one question per node, nothing changes)
  drift      a hand edit of one node's environment file, then site.yml --check on it: the drift report must name the
             file and its role (cuda_env), and nothing may be written (check mode counts what it would change)

and prints a table and writes JSON (.build/bench/bench.json), with the machine it ran on. Figures are wall seconds and
CPU seconds: the controller's (ansible-playbook, its workers, ssh) and the nodes' (their cgroups). The nodes share this
machine's cores, so a fleet's figure is stated per core-second: N nodes' no-op costs at most 1.1 x N x one node's
core-seconds (issue 33; it replaces issue 15's wall-clock ratios, which nodes sharing two cores cannot express). Exits 1
when a target is missed: one node's no-op in at most 10 s wall and 3 controller CPU-seconds, changing nothing; N nodes'
within 1.1 x N x one node's core-seconds; the drift report names the edited file with its role and writes nothing.

--store adds issue 15's build-store steps, with the lab's compile cache off on every node so that each compile is a
real one and each nvcc call is counted: a node of another fingerprint converges and builds its own, the jit_cache role
alone on a warm node compiles nothing, and remediate.yml after a wipe of one node's caches, of every node's with the
store, and without it (long: real compiles on two cores).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from labkit import common as labcommon  # noqa: E402 -- the lab's own tooling
from labkit import nodes as labnodes  # noqa: E402

ROOT = labcommon.ROOT
BENCH = os.path.normpath(os.path.join(labcommon.STATE, "..", "bench"))
NVCC_LOG = os.path.join(labnodes.NVCC_CACHE, "log.jsonl")
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
CACHES = ["/var/lib/sglang/.cache/flashinfer", "/var/lib/sglang/.cache/sglang"]
STEPS = ("converge_1", "converge_n", "noop_1", "noop_n", "drift")
STORE_STEPS = ("converge_other", "jit_cache_warm", "remediate_1", "remediate_store", "remediate_no_store")
GROUPS = {"rtx-pro-6000-x8": "rtx_pro_6000", "b300-x8": "b300"}


class Node(t.NamedTuple):
    name: str
    profile: str
    address: str


def log(message: str) -> None:
    print("[bench] " + message, flush=True)


def short(profile: str) -> str:
    """rtx-pro-6000-x8 -> pro-6000: a node name's part."""
    return profile.rsplit("-x", maxsplit=1)[0].replace("rtx-", "")


def nodes_for(count: int, profile: str, other: str) -> t.List[Node]:
    nodes = [Node("bench-%s-%d" % (short(profile), index + 1), profile, "10.213.0.%d" % (101 + index)) for index in range(count)]
    return nodes + [Node("bench-%s-1" % short(other), other, "10.213.0.150")]


def labctl_run(*args: str) -> None:
    subprocess.run([sys.executable, os.path.join(HERE, "labctl.py"), *args], check=True)


def boot(node: Node, real_compiles: bool) -> None:
    """A fresh node (a new overlay); real_compiles: the lab's compile cache off, every compile a real one. The module code
    cache is off: the controller's and the node's CPU of each module run are what a fleet node's are."""
    labctl_run("down", node.name)
    labctl_run("up", node.name, "--profile", node.profile, "--address", node.address)
    labctl_run("exec", node.name, "--", "touch", "/etc/inferops-lab/module-code-cache-off")
    if real_compiles:
        labctl_run("exec", node.name, "--", "touch", "/etc/inferops-lab/nvcc-cache-off")


def write_inventory(nodes: t.List[Node]) -> str:
    os.makedirs(BENCH, exist_ok=True)
    groups: t.Dict[str, t.Dict[str, t.Any]] = {}
    for node in nodes:
        group = groups.setdefault(GROUPS.get(node.profile, node.profile.replace("-", "_")), {"hosts": {}})
        group["hosts"][node.name] = {"ansible_host": node.address, "lab_gpu_profile": node.profile}
    inventory = {"all": {"vars": {
        "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": labcommon.ssh_key(),
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"},
        "children": {"sglang_nodes": {"children": groups}}}}
    path = os.path.join(BENCH, "hosts.yml")
    with open(path, "w") as handle:
        json.dump(inventory, handle, indent=1)  # JSON is YAML
    link = os.path.join(BENCH, "group_vars")
    if not os.path.islink(link):
        os.symlink(os.path.join(ROOT, "inventories", "lab", "group_vars"), link)
    return path


def nvcc_calls(since: float, until: float) -> t.Dict[str, int]:
    counts: t.Dict[str, int] = {}
    if not os.path.exists(NVCC_LOG):
        return counts
    with open(NVCC_LOG) as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if str(entry.get("host", "")).startswith("bench-") and since <= entry.get("time", 0) <= until:
                counts[entry["host"]] = counts.get(entry["host"], 0) + 1
    return counts


def recap(text: str) -> t.Dict[str, t.Dict[str, int]]:
    hosts = {}
    for match in re.finditer(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", text, re.M):
        hosts[match.group(1)] = {"ok": int(match.group(2)), "changed": int(match.group(3)),
                                 "unreachable": int(match.group(4)), "failed": int(match.group(5))}
    return hosts


def node_cpu(nodes: t.List[Node]) -> t.Dict[str, float]:
    """CPU seconds each node's cgroup has used (everything in the node: systemd, sshd, modules, services)."""
    used = {}
    for node in nodes:
        try:
            with open(os.path.join(labnodes.Node(node.name).cgroup, "cpu.stat")) as handle:
                used[node.name] = int(handle.readline().split()[1]) / 1e6
        except (OSError, IndexError, ValueError):
            used[node.name] = 0.0
    return used


def play(step: str, inventory: str, playbook: str, hosts: t.List[Node], *extra: str, costs: bool = False) -> t.Dict[str, t.Any]:
    """One ansible-playbook run, timed; its output kept in .build/bench/<step>.log; with costs, each task's CPU under
    .build/bench/task-costs (lab_task_costs, test tooling; tools/task_costs.py adds them up)."""
    names = [node.name for node in hosts]
    command = [PLAYBOOK, "-i", inventory, os.path.join(ROOT, "playbooks", playbook), "--limit", ",".join(names),
               "--forks", str(max(5, len(names))), *extra]
    log("%s: %s on %d node(s)" % (step, playbook, len(names)))
    # lab_task_times (test tooling) ends each step's log with its slowest tasks
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="lab_task_times")
    if costs:
        shutil.rmtree(os.path.join(BENCH, "task-costs"), ignore_errors=True)
        os.makedirs(os.path.join(BENCH, "task-costs"))
        env.update(ANSIBLE_CALLBACKS_ENABLED="lab_task_times,lab_task_costs", INFEROPS_LAB_TASK_COSTS=os.path.join(BENCH, "task-costs"))
    nodes_before, children_before = node_cpu(hosts), resource.getrusage(resource.RUSAGE_CHILDREN)
    started_wall, started = time.time(), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.monotonic() - started
    nodes_after, children_after = node_cpu(hosts), resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU: the controller (ansible-playbook, its workers, ssh) and the nodes (their cgroups), from the same cores
    controller = (children_after.ru_utime + children_after.ru_stime) - (children_before.ru_utime + children_before.ru_stime)
    on_nodes = sum(nodes_after[name] - nodes_before[name] for name in nodes_after)
    with open(os.path.join(BENCH, step + ".log"), "w") as handle:
        handle.write(" ".join(command) + "\n" + done.stdout + "\n" + done.stderr)
    output[step] = done.stdout
    if done.returncode != 0:
        raise SystemExit("bench: %s failed (rc %d); see %s" % (step, done.returncode, os.path.join(BENCH, step + ".log")))
    calls = nvcc_calls(started_wall, time.time())
    hosts_recap = recap(done.stdout)
    result = {"seconds": round(seconds, 1), "nodes": len(names), "seconds_per_node": round(seconds / len(names), 1),
              "nvcc_calls": sum(calls.values()), "nvcc_calls_per_node": {name: calls.get(name, 0) for name in names},
              "changed": sum(entry["changed"] for entry in hosts_recap.values()),
              "controller_cpu_s": round(controller, 2), "nodes_cpu_s": round(on_nodes, 2),
              "core_s": round(controller + on_nodes, 2), "tasks": sum(entry["ok"] for entry in hosts_recap.values()),
              # the shortest this step could take on this machine's cores, were they never idle
              "cpu_bound_s": round((controller + on_nodes) / (os.cpu_count() or 1), 1)}
    log("%s: %.1f s, %d nvcc call(s), %d change(s); CPU: controller %.1f s, nodes %.1f s" % (
        step, seconds, result["nvcc_calls"], result["changed"], controller, on_nodes))
    return result


# each step's output, for the targets that read it (the drift report)
output: t.Dict[str, str] = {}


def node_files(node: Node) -> str:
    """The sha256 of the edited environment file and of the converged check's record on the node."""
    done = subprocess.run([sys.executable, os.path.join(HERE, "labctl.py"), "exec", node.name, "--", "sha256sum",
                           "/etc/inferops/cuda.env", "/var/lib/inferops/converged.json"], capture_output=True, text=True, check=True)
    return done.stdout


def wipe(nodes: t.List[Node]) -> None:
    for node in nodes:
        labctl_run("exec", node.name, "--", "rm", "-rf", *CACHES)


def machine() -> t.Dict[str, t.Any]:
    model = ""
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as handle:
        memory_kib = int(handle.readline().split()[1])
    ansible = subprocess.run([PLAYBOOK, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(memory_kib / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "ansible": ansible[0] if ansible else "",
            "commit": commit.stdout.strip(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 2) if denominator else float("inf")


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4, help="nodes of the first profile (default 4)")
    parser.add_argument("--profile", default="rtx-pro-6000-x8")
    parser.add_argument("--other", default="b300-x8", help="--store: the one node of another fingerprint")
    parser.add_argument("--store", action="store_true", help="also issue 15's build-store steps, with real compiles (long)")
    parser.add_argument("--keep", action="store_true", help="leave the nodes running afterwards")
    parser.add_argument("--first", action="store_true",
                        help="only the first converge of one node (converge_1), each task's CPU in .build/bench/task-costs")
    args = parser.parse_args(argv)
    if args.nodes < 2 or args.nodes > 40:
        raise SystemExit("bench: --nodes must be between 2 and 40")
    labcommon.require_root()
    others = [name for name in labnodes.known_nodes() if not name.startswith("bench-")]
    if others:
        raise SystemExit("bench: other lab nodes are running (%s); they would share the cores being measured. "
                         "Stop them first (make lab-down)" % ", ".join(others))
    with open(os.path.join(HERE, "LAB-NODE.txt")) as handle:
        for line in handle:
            log(line.rstrip())
    nodes = nodes_for(args.nodes, args.profile, args.other)
    if not args.store:
        nodes = nodes[:-1]
    first, same = nodes[:1], nodes[:args.nodes]
    inventory = write_inventory(nodes)
    stores = {name: os.path.join(BENCH, "store-" + name) for name in ("one", "fleet")}
    for path in stores.values():
        shutil.rmtree(path, ignore_errors=True)
    results: t.Dict[str, t.Any] = {"machine": machine(), "nodes": [node._asdict() for node in nodes],
                                   "lab": "SIMULATED GPUs and SGLang; real systemd, CUDA 13.0, FlashInfer, nvcc compiles "
                                          + ("(the lab's compile cache off on every node)" if args.store else "(through the lab's compile cache)")}
    store = ["-e", "jit_cache_store_dir=" + stores["fleet"]]
    try:
        boot(first[0], args.store)
        results["converge_1"] = play("converge_1", inventory, "site.yml", first, "-e", "jit_cache_store_dir=" + stores["one"],
                                     costs=args.first)
        if args.first:
            return 0
        for node in nodes[1:]:
            boot(node, args.store)
        # N of one fingerprint: their canary (the converged first node) goes first, then the other N-1 in one batch
        # (with the default site_serial of 20%, N-1 = 3 followers would go one by one: a rollout policy)
        results["converge_n"] = play("converge_n", inventory, "site.yml", same, *store, "-e", "site_serial=100%")
        if args.store:
            # the node of another fingerprint finds nothing of its own in the store and builds
            results["converge_other"] = play("converge_other", inventory, "site.yml", nodes[-1:], *store)
        results["noop_1"] = play("noop_1", inventory, "site.yml", first, *store)
        results["noop_n"] = play("noop_n", inventory, "site.yml", same, *store, "-e", "site_serial=100%")
        labctl_run("exec", first[0].name, "--", "sh", "-c", "echo '# edited by hand' >> /etc/inferops/cuda.env")
        record_before = node_files(first[0])
        results["drift"] = play("drift", inventory, "site.yml", first, *store, "--check")
        # check mode reports what it would change and writes nothing: the edit and the record are as they were
        results["drift"]["wrote_nothing"] = node_files(first[0]) == record_before
        if args.store:
            labctl_run("exec", first[0].name, "--", "sed", "-i", "/# edited by hand/d", "/etc/inferops/cuda.env")
            results["jit_cache_warm"] = play("jit_cache_warm", inventory, "site.yml", first, "--tags", "jit_cache", *store)
            wipe(first)
            results["remediate_1"] = play("remediate_1", inventory, "remediate.yml", first, *store,
                                          "-e", "remediate_report_path=" + os.path.join(BENCH, "remediate-1.json"))
            wipe(nodes)
            results["remediate_store"] = play("remediate_store", inventory, "remediate.yml", nodes, *store,
                                              "-e", "remediate_report_path=" + os.path.join(BENCH, "remediate-store.json"))
            wipe(nodes)
            results["remediate_no_store"] = play("remediate_no_store", inventory, "remediate.yml", nodes, "-e", "jit_cache_store_dir=",
                                                 "-e", "remediate_report_path=" + os.path.join(BENCH, "remediate-no-store.json"))
    finally:
        # what was measured so far, also when a step failed
        with open(os.path.join(BENCH, "bench.json"), "w") as handle:
            json.dump(results, handle, indent=2)
        if not args.keep:
            for node in nodes:
                labctl_run("down", node.name)
    noop_1, noop_n = results["noop_1"], results["noop_n"]
    drift_line = re.search(r"cuda_env: file /etc/inferops/cuda\.env: sha256:\w+ -> sha256:\w+", output.get("drift", ""))
    targets = [
        ("no-op run of one node: wall seconds", noop_1["seconds"], "<=", 10.0),
        ("no-op run of one node: controller CPU-seconds", noop_1["controller_cpu_s"], "<=", 3.0),
        ("no-op run of N nodes: core-seconds / (N x one node's)",
         ratio(noop_n["core_s"], args.nodes * noop_1["core_s"]), "<=", 1.1),
        ("no-op runs change nothing", float(noop_1["changed"] + noop_n["changed"]), "<=", 0.0),
        ("drift report (--check) names the edited file with its role (cuda_env)", 1.0 if drift_line else 0.0, ">=", 1.0),
        ("drift report (--check) writes nothing on the node (the edit and the record as they were)",
         1.0 if results.get("drift", {}).get("wrote_nothing") else 0.0, ">=", 1.0),
        ("N nodes of one fingerprint converge with the nvcc calls of one node",
         ratio(sum(results["converge_n"]["nvcc_calls_per_node"][node.name] for node in same[1:]),
               max(results["converge_1"]["nvcc_calls"], 1)), "<=", 1.0),
    ]
    if args.store:
        targets += [
            ("the node of another fingerprint builds its own (nvcc calls)", float(results["converge_other"]["nvcc_calls"]), ">=", 1.0),
            ("remediation of N+1 nodes: without the store / with it >= 2.5x",
             ratio(results["remediate_no_store"]["seconds"], results["remediate_store"]["seconds"]), ">=", 2.5),
            ("remediation with the store: nvcc calls", float(results["remediate_store"]["nvcc_calls"]), "<=", 0.0),
            ("warm jit_cache: nvcc calls", float(results["jit_cache_warm"]["nvcc_calls"]), "<=", 0.0),
        ]
    results["targets"] = [{"what": what, "value": value, "target": "%s %s" % (op, bound),
                           "met": value <= bound if op == "<=" else value >= bound} for what, value, op, bound in targets]
    report(results, args.nodes)
    with open(os.path.join(BENCH, "bench.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    log("JSON: %s" % os.path.normpath(os.path.join(BENCH, "bench.json")))
    return 0 if all(target["met"] for target in results["targets"]) else 1


def report(results: t.Dict[str, t.Any], count: int) -> None:
    m = results["machine"]
    print("\nmake bench: %d x %s (SIMULATED GPUs)%s, on %s (%d CPUs, %s, %.0f GiB), commit %s, %s" % (
        count, results["nodes"][0]["profile"], " + 1 x %s" % results["nodes"][-1]["profile"] if len(results["nodes"]) > count else "",
        m["host"], m["cpus"], m["cpu_model"], m["memory_gib"], m["commit"], m["date"]))
    header = ("step", "nodes", "seconds", "s/node", "tasks", "nvcc", "changed", "ctl cpu s", "node cpu s", "core s")
    print("%-20s %5s %8s %7s %6s %5s %7s %9s %10s %8s" % header)
    for step in STEPS + STORE_STEPS:
        if step not in results:
            continue
        entry = results[step]
        row = (step, entry["nodes"], entry["seconds"], entry["seconds_per_node"], entry["tasks"], entry["nvcc_calls"],
               entry["changed"], entry["controller_cpu_s"], entry["nodes_cpu_s"], entry["core_s"])
        print("%-20s %5d %8.1f %7.1f %6d %5d %7d %9.2f %10.2f %8.2f" % row)
    for target in results["targets"]:
        print("%-4s %s: %s (target %s)" % ("MET" if target["met"] else "MISS", target["what"], target["value"], target["target"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
