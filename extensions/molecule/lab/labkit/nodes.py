# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TOOLING: lab nodes: systemd-nspawn containers in their own network namespaces, booted from the layers,
reached over SSH; the fleet from an inventory."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import typing as t

from labkit.common import (
    BRIDGE,
    GATEWAY,
    HERE,
    IMAGES,
    NETWORK,
    PREFIX,
    PROFILES,
    STACKS,
    STATE,
    ensure_bridge,
    log,
    mount_overlay,
    mounts_under,
    output,
    record_measure,
    remove_bridge,
    require_root,
    run,
    ssh_key,
    stamp_value,
    unmount_all,
    veth_name,
    write_stamp,
)
from labkit.images import build
from labkit.mirror import serve_mirror, stop_mirror, stop_store

# --- nodes ------------------------------------------------------------------------------------------------


class Node:
    def __init__(self, name: str) -> None:
        if not name.replace("-", "").isalnum() or len(name) > 40:
            raise SystemExit("labctl: node name %r: use letters, digits and '-' (at most 40)" % name)
        self.name = name
        self.dir = os.path.join(STATE, "nodes", name)
        self.netns = PREFIX + name
        self.merged = os.path.join(self.dir, "merged")
        self.pidfile = os.path.join(self.dir, "nspawn.pid")
        self.logfile = os.path.join(self.dir, "nspawn.log")
        # the unified (cgroup v2) one counts the node's CPU (cpu.stat), for make bench
        self.cgroup = "/sys/fs/cgroup/unified/" + PREFIX + name
        self.cgroups = ["/sys/fs/cgroup/systemd/" + PREFIX + name, self.cgroup]

    def config(self) -> t.Dict[str, t.Any]:
        with open(os.path.join(self.dir, "node.json")) as handle:
            return json.load(handle)

    def started_pid(self) -> t.Optional[int]:
        try:
            with open(self.pidfile) as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):
            return None

    def started_alive(self) -> bool:
        """The process we started still exists (between fork and exec its cmdline can read empty)."""
        pid = self.started_pid()
        try:
            with open("/proc/%d/stat" % pid) as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, TypeError, IndexError):
            return False

    def nspawn_pid(self) -> t.Optional[int]:
        pid = self.started_pid()
        if pid is None:
            return None
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                cmdline = handle.read().split(b"\0")
        except OSError:
            return None
        # Only a process we started: systemd-nspawn for this very node.
        # (right after the start it may still be the sh wrapper that execs systemd-nspawn)
        if any(part.endswith(b"systemd-nspawn") for part in cmdline) and ("--machine=" + self.name).encode() in cmdline:
            return pid
        return None

    def leader_pid(self) -> t.Optional[int]:
        pid = self.nspawn_pid()
        if pid is None:
            return None
        for task in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/children" % (pid, task)) as handle:
                    children = handle.read().split()
            except OSError:
                continue
            if children:
                return int(children[0])
        return None


def setup_network(node: Node, address: str) -> None:
    ensure_bridge()
    if node.netns not in output(["ip", "netns", "list"]).split():
        run(["ip", "netns", "add", node.netns])
    host_side = veth_name(address)
    if subprocess.run(["ip", "link", "show", host_side], capture_output=True, check=False).returncode != 0:
        run(["ip", "link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", node.netns])
    run(["ip", "link", "set", host_side, "master", BRIDGE, "up"])
    inside = ["ip", "netns", "exec", node.netns]
    run(inside + ["ip", "link", "set", "lo", "up"])
    run(inside + ["ip", "addr", "replace", "%s/%d" % (address, NETWORK.prefixlen), "dev", "eth0"])
    run(inside + ["ip", "link", "set", "eth0", "up"])
    run(inside + ["ip", "route", "replace", "default", "via", GATEWAY])


def write_node_files(node: Node, profile: str, address: str) -> None:
    merged = node.merged
    os.makedirs(merged + "/etc/inferops-lab", exist_ok=True)
    shutil.copy(os.path.join(PROFILES, profile + ".json"), merged + "/etc/inferops-lab/gpu-profile.json")
    with open(merged + "/etc/hostname", "w") as handle:
        handle.write(node.name + "\n")
    with open(merged + "/etc/hosts", "w") as handle:
        handle.write("127.0.0.1 localhost\n127.0.1.1 %s\n%s %s\n" % (node.name, address, node.name))
    os.makedirs(merged + "/root/.ssh", mode=0o700, exist_ok=True)
    with open(ssh_key() + ".pub") as source, open(merged + "/root/.ssh/authorized_keys", "w") as handle:
        handle.write(source.read())
    os.chmod(merged + "/root/.ssh/authorized_keys", 0o600)
    # LAB TEST EQUIPMENT: the compile cache in front of nvcc (FLASHINFER_NVCC_LAUNCHER in inventories/lab).
    os.makedirs(merged + "/usr/lib/inferops-lab", exist_ok=True)
    for name, mode in (("lab_nvcc_cache.py", 0o644), ("lab-nvcc-cache", 0o755)):
        shutil.copy(os.path.join(HERE, "nvcc_cache", name), merged + "/usr/lib/inferops-lab/" + name)
        os.chmod(merged + "/usr/lib/inferops-lab/" + name, mode)
    os.makedirs(merged + "/var/cache/lab-nvcc-cache", exist_ok=True)
    install_module_code_cache(merged)


# LAB TEST EQUIPMENT: the code the nodes' Python compiles from Ansible's module zips, kept for the next module run
# (module_code_cache/lab_module_code_cache.py); per checkout, so that a fresh clone measures its own compiles.
MODULE_CODE_CACHE = os.path.join(STATE, "module-code-cache")
MODULE_CODE_PTH = "inferops-lab-module-code-cache.pth"


def install_module_code_cache(root: str) -> t.List[str]:
    """The module code cache and the .pth that loads it, in the system site-packages of each Python 3 under root (its
    /usr/local/lib/python3.X/dist-packages, which Debian's python3 reads and a venv does not); the directories written."""
    written = []
    for version in sorted(os.listdir(os.path.join(root, "usr", "lib"))):
        if not version.startswith("python3.") or not os.path.isdir(os.path.join(root, "usr", "lib", version)):
            continue
        site = os.path.join(root, "usr", "local", "lib", version, "dist-packages")
        os.makedirs(site, exist_ok=True)
        shutil.copy(os.path.join(HERE, "module_code_cache", "lab_module_code_cache.py"), site)
        with open(os.path.join(site, MODULE_CODE_PTH), "w") as handle:
            handle.write("import lab_module_code_cache; lab_module_code_cache.install()\n")
        written.append(site)
    os.makedirs(root + "/var/cache/lab-module-code", exist_ok=True)
    # off for every node this labctl boots (a measurement of what the cache saves), as make bench turns it off in its nodes
    off = os.path.join(root, "etc", "inferops-lab", "module-code-cache-off")
    if os.environ.get("INFEROPS_LAB_MODULE_CODE_CACHE_OFF"):
        os.makedirs(os.path.dirname(off), exist_ok=True)
        with open(off, "w") as handle:
            handle.write("INFEROPS_LAB_MODULE_CODE_CACHE_OFF was set when labctl booted this node\n")
    elif os.path.exists(off):
        os.unlink(off)
    return written


def module_code_cache_dir() -> str:
    """The module code cache on the host, written by every user of every node (LAB TEST EQUIPMENT, module_code_cache/)."""
    os.makedirs(MODULE_CODE_CACHE, exist_ok=True)
    os.chmod(MODULE_CODE_CACHE, 0o1777)
    return MODULE_CODE_CACHE


# The lab's compile cache lives on the machine, not in the checkout: every node, scenario and clone on this machine shares
# it, so each distinct compile runs once per machine (a fresh clone's `make test` compiles only what changed). Its key is
# the real nvcc's release, flags, source and headers (nvcc_cache/lab_nvcc_cache.py); an empty directory here measures a
# machine that never compiled.
NVCC_CACHE = os.environ.get("INFEROPS_LAB_NVCC_CACHE", "/var/cache/inferops-lab/nvcc-cache")
# At most this many real compiles at once on the machine, all nodes together (default: its cores).
COMPILE_JOBS = int(os.environ.get("INFEROPS_LAB_COMPILE_JOBS") or os.cpu_count() or 1)


def nvcc_cache_dir() -> str:
    """The lab's compile cache on the host, shared by every node (LAB TEST EQUIPMENT, see nvcc_cache/)."""
    path = NVCC_CACHE
    os.makedirs(path, exist_ok=True)
    # written by each node's service user, whose uid differs from node to node (also when someone else made the directory)
    os.chmod(path, 0o1777)
    # the machine's compile job limit, shared by every node of every scenario (the cache's job slots): its cores
    if stamp_value(os.path.join(path, "jobs")) != str(COMPILE_JOBS):
        write_stamp(os.path.join(path, "jobs"), str(COMPILE_JOBS))
        os.chmod(os.path.join(path, "jobs"), 0o644)
    return path


def boot(node: Node) -> None:
    """Start systemd-nspawn --boot in its own cgroups, detached; it outlives this command."""
    for cgroup in node.cgroups:
        os.makedirs(cgroup, exist_ok=True)
    wrapper = "; ".join("echo $$ > %s/cgroup.procs" % cgroup for cgroup in node.cgroups) + "; exec \"$@\""
    nspawn = [
        "systemd-nspawn", "--quiet", "--boot", "--directory=" + node.merged, "--machine=" + node.name,
        "--register=no", "--keep-unit", "--network-namespace-path=/run/netns/" + node.netns,
        "--link-journal=no", "--resolv-conf=off", "--timezone=off", "--console=read-only",
        "--bind=%s:/var/cache/lab-nvcc-cache" % nvcc_cache_dir(),
        "--bind=%s:/var/cache/lab-module-code" % module_code_cache_dir(),
    ]
    env = dict(os.environ, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="1")
    with open(node.logfile, "ab") as logfile:
        process = subprocess.Popen(["sh", "-c", wrapper, "nspawn"] + nspawn, stdin=subprocess.DEVNULL,
                                   stdout=logfile, stderr=logfile, start_new_session=True, env=env)
    with open(node.pidfile, "w") as handle:
        handle.write("%d\n" % process.pid)


def node_exec(node: Node, command: t.List[str], check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    leader = node.leader_pid()
    if leader is None:
        raise SystemExit("labctl: node %s is not running" % node.name)
    return subprocess.run(["nsenter", "-t", str(leader), "-a", "--"] + command, check=check,
                          capture_output=capture, text=True)


def wait_running(node: Node, address: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        if not node.started_alive():
            raise SystemExit("labctl: %s: systemd-nspawn exited; see %s" % (node.name, node.logfile))
        if node.leader_pid() is not None:
            done = node_exec(node, ["systemctl", "is-system-running"], check=False, capture=True)
            state = done.stdout.strip()
            if state in ("running", "degraded"):
                break
        time.sleep(0.3)
    else:
        raise SystemExit("labctl: %s did not finish booting in %d s (state %r); see %s" % (node.name, timeout, state, node.logfile))
    if state == "degraded":
        failed = node_exec(node, ["systemctl", "--failed", "--no-legend"], check=False, capture=True).stdout
        log("%s booted degraded: %s" % (node.name, " ".join(failed.split())))
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, 22), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("labctl: %s: no SSH on %s:22 after %d s" % (node.name, address, timeout))


def up(name: str, profile: str, address: str, stack: str = "incident", layer: t.Optional[str] = None) -> None:
    require_root()
    layers = [os.path.abspath(path) for path in layer.split(":")] if layer else []
    for path in layers:
        if not os.path.isdir(path):
            raise SystemExit("labctl: --layer %s: no such directory (one that `down --save` left)" % path)
    if not os.path.exists(os.path.join(PROFILES, profile + ".json")):
        raise SystemExit("labctl: unknown GPU profile %r; profiles: %s" % (profile, ", ".join(list_profiles())))
    if ipaddress.ip_address(address) not in NETWORK or address == GATEWAY:
        raise SystemExit("labctl: address %s: pick one in %s other than %s" % (address, NETWORK, GATEWAY))
    base, image = build(stack)
    node = Node(name)
    if node.nspawn_pid() is not None:
        log("%s is already running" % name)
        return
    started = time.monotonic()
    os.makedirs(node.dir, exist_ok=True)
    with open(os.path.join(node.dir, "node.json"), "w") as handle:
        json.dump({"name": name, "profile": profile, "address": address, "stack": stack, "layer": layer}, handle)
    if not mounts_under(node.merged):
        # prepared layers (what nodes of the same stack left, `down --save`; the topmost first) lie over the stack's image
        mount_overlay(layers + [image, base], os.path.join(node.dir, "upper"), os.path.join(node.dir, "work"), node.merged)
    write_node_files(node, profile, address)
    setup_network(node, address)
    serve_mirror()
    boot(node)
    wait_running(node, address)
    record_measure("node_boot_s", time.monotonic() - started)
    log("%s is up: GPU profile %s (SIMULATED), %s, ssh root@%s -i %s; its Python keeps the code it compiles from Ansible's "
        "module zips in %s (LAB TEST EQUIPMENT)" % (name, profile, STACKS[stack][1], address, ssh_key(), MODULE_CODE_CACHE))


def down(name: str, save: t.Optional[str] = None) -> None:
    """Stop the node and remove every mount, namespace, link, cgroup and file it had; with save, what the node wrote (its
    overlay's upper directory, whiteouts included) is moved to that directory first, for `up --layer`."""
    require_root()
    node = Node(name)
    pid = node.nspawn_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while node.started_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        if node.started_alive():
            log("%s: systemd-nspawn ignored SIGTERM for 20 s; killing it" % name)
            os.kill(pid, signal.SIGKILL)
            while node.started_alive():
                time.sleep(0.2)
    unmount_all(node.dir)
    if save is not None:
        upper = os.path.join(node.dir, "upper")
        if not os.path.isdir(upper):
            raise SystemExit("labctl: down --save: %s has no overlay to save" % name)
        shutil.rmtree(save, ignore_errors=True)
        os.makedirs(os.path.dirname(os.path.abspath(save)), exist_ok=True)
        shutil.move(upper, save)
        log("%s: what it wrote is kept in %s" % (name, save))
    address = None
    if os.path.exists(os.path.join(node.dir, "node.json")):
        address = node.config()["address"]
    if address:
        run(["ip", "link", "del", veth_name(address)], check=False, capture_output=True)
    if node.netns in output(["ip", "netns", "list"]).split():
        run(["ip", "netns", "del", node.netns])
    record_node_cpu(node)
    for cgroup in node.cgroups:
        remove_cgroup(cgroup)
    shutil.rmtree(node.dir, ignore_errors=True)
    log("%s is down" % name)
    if not [other for other in known_nodes() if other != name]:
        # the last node: nothing of the lab stays on the host
        stop_mirror()
        stop_store()
        remove_bridge()


def record_node_cpu(node: Node) -> None:
    """The CPU time of everything that ran in the node (its cgroup's usage) when it goes down, one line per node in
    STATE/node-cpu.jsonl: make test prints them beside its lanes, so a run's CPU can be told apart by node."""
    try:
        with open(os.path.join(node.cgroup, "cpu.stat")) as handle:
            usage = int(dict(line.split() for line in handle if line.strip())["usage_usec"])
        started = os.path.getmtime(os.path.join(node.dir, "node.json"))
    except (OSError, KeyError, ValueError):
        return
    with open(os.path.join(STATE, "node-cpu.jsonl"), "a") as handle:
        handle.write(json.dumps({"node": node.name, "cpu_s": round(usage / 1e6, 1), "up_s": round(time.time() - started)}) + "\n")


def remove_cgroup(path: str) -> None:
    if not os.path.isdir(path):
        return
    for directory, dirs, _files in sorted(os.walk(path), key=lambda entry: len(entry[0]), reverse=True):
        for sub in dirs:
            try:
                os.rmdir(os.path.join(directory, sub))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError as exc:
        log("could not remove cgroup %s: %s" % (path, exc))


def known_nodes() -> t.List[str]:
    nodes = set()
    directory = os.path.join(STATE, "nodes")
    if os.path.isdir(directory):
        nodes.update(os.listdir(directory))
    for netns in output(["ip", "netns", "list"]).split():
        if netns.startswith(PREFIX):
            nodes.add(netns[len(PREFIX):])
    return sorted(nodes)


def list_profiles() -> t.List[str]:
    return sorted(name[:-5] for name in os.listdir(PROFILES) if name.endswith(".json"))


def inventory_nodes(inventory: str) -> t.List[t.Dict[str, str]]:
    data = json.loads(output(["ansible-inventory", "-i", inventory, "--list"]))
    hostvars = data.get("_meta", {}).get("hostvars", {})
    nodes = []
    for host, variables in sorted(hostvars.items()):
        if "lab_gpu_profile" in variables:
            nodes.append({"name": host, "profile": variables["lab_gpu_profile"], "address": variables["ansible_host"]})
    if not nodes:
        raise SystemExit("labctl: no host in %s has lab_gpu_profile" % inventory)
    return nodes


def fleet_up(inventory: str) -> None:
    announce()
    for node in inventory_nodes(inventory):
        up(node["name"], node["profile"], node["address"])
    disk_report()


def fleet_down() -> None:
    require_root()
    for name in known_nodes():
        down(name)
    stop_mirror()
    stop_store()
    remove_bridge()


def announce() -> None:
    with open(os.path.join(HERE, "LAB-NODE.txt")) as handle:
        for line in handle:
            log(line.rstrip())


def disk_report() -> None:
    sizes = {}
    for layer in ["base"] + sorted(STACKS) + ["wheels"]:
        path = os.path.join(IMAGES, layer)
        if os.path.isdir(path):
            sizes[layer] = output(["du", "-sh", path]).split()[0]
    for name in known_nodes():
        upper = os.path.join(STATE, "nodes", name, "upper")
        if os.path.isdir(upper):
            sizes["node " + name] = output(["du", "-sh", upper]).split()[0]
    log("disk: " + ", ".join("%s %s" % item for item in sizes.items()))


def status() -> None:
    for name in known_nodes():
        node = Node(name)
        config = node.config() if os.path.exists(os.path.join(node.dir, "node.json")) else {}
        state = "stopped"
        if node.nspawn_pid() is not None and node.leader_pid() is not None:
            state = node_exec(node, ["systemctl", "is-system-running"], check=False, capture=True).stdout.strip()
        print("%-20s %-10s %-16s %s" % (name, state, config.get("address", "-"), config.get("profile", "-")))
