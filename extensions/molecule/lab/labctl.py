# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab fleet: simulated Blackwell nodes with real systemd, for molecule and `make lab`.

LAB TOOLING -- test equipment, never used by a role. Each node is a Debian root
filesystem booted with `systemd-nspawn --boot` (systemd as PID 1) in its own network
namespace, reached over SSH like a production node. Layers:

  base      debootstrap bookworm (built once per machine, in /var/cache/inferops-lab/images/base)
  incident  the state the incident began in (built once per recipe, cached):
            /usr/local/cuda-12.8 (NVIDIA's real 12.8 ptxas, headers and runtime from
            PyPI, and a SIMULATED nvcc front end that only reports `release 12.8`),
            /usr/local/cuda -> 12.8 through update-alternatives, the SGLang venv with
            torch (CPU build), the real SGLang 0.5.21 and FlashInfer 0.6.18 (an affected
            release), the SIMULATED nvidia-smi, torch reporting the profile's GPUs inside
            that venv only, import stand-ins for SGLang's GPU-only binaries, and the
            SIMULATED SGLang server entry point (SGLang's own code decides; model simulated)
  current   the same with the current stack in the venv (SGLang 0.5.23, FlashInfer 0.7.2: a fleet
            installed today), built when a node asks for it (`up --stack current`)
  node      one overlay per node over base and one of those; only what the node changes is written

Usage: python3 extensions/molecule/lab/labctl.py {build,up,down,fleet-up,fleet-down,status,exec,machine-state} ...
Everything is root-only and stays under .build/lab (the images and compile cache: /var/cache/inferops-lab), network
namespaces named inferops-lab-*, the bridge iflab0 and cgroups named inferops-lab-*.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import typing as t

from labkit.common import IMAGES, NETWORK, ROOT, STACKS, lab_lock, require_root
from labkit.images import build, build_lock, build_stacks
from labkit.mirror import build_apt_repo, mirror_wheels, serve_store, stop_store
from labkit.nodes import NVCC_CACHE, Node, disk_report, down, fleet_down, fleet_up, list_profiles, node_exec, status, up


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(prog="labctl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build_parser = sub.add_parser("build", help="build (or reuse) the cached base layer and a stack's layer")
    build_parser.add_argument("--stack", choices=sorted(STACKS), action="append",
                              help="a stack's layer to build (repeat for several, built side by side); default: incident")
    node_up = sub.add_parser("up", help="boot one node")
    node_up.add_argument("name")
    node_up.add_argument("--profile", required=True, help="GPU profile: " + ", ".join(list_profiles()))
    node_up.add_argument("--address", required=True, help="address in %s" % NETWORK)
    node_up.add_argument("--stack", choices=sorted(STACKS), default="incident",
                         help="the SGLang venv: " + "; ".join("%s: %s" % (key, what) for key, (_path, what) in STACKS.items()))
    node_up.add_argument("--layer", help="directories nodes left with `down --save`, topmost first, colon-separated: the node "
                         "boots with them over its stack's image (a prepared image: extensions/molecule/role)")
    node_down = sub.add_parser("down", help="stop one node and remove what it made")
    node_down.add_argument("name")
    node_down.add_argument("--save", help="keep what the node wrote (its overlay's upper directory) as DIR, for `up --layer`")
    fleet = sub.add_parser("fleet-up", help="boot every inventory host that has lab_gpu_profile")
    fleet.add_argument("--inventory", default=os.path.join(ROOT, "inventories", "lab"))
    sub.add_parser("fleet-down", help="stop every lab node, remove the bridge")
    sub.add_parser("status", help="list lab nodes")
    mirror = sub.add_parser("mirror", help="fill the lab mirror (CUDA 13.0 wheels; --apt: the signed apt repository too)")
    mirror.add_argument("--apt", action="store_true")
    store = sub.add_parser("store-server", help="serve DIR as the lab's HTTP build store (GET and PUT), until the last node is down")
    store.add_argument("--dir", required=True)
    store.add_argument("--stop", action="store_true", help="stop it instead")
    execute = sub.add_parser("exec", help="run a command inside a node (nsenter)")
    execute.add_argument("name")
    execute.add_argument("cmd", nargs=argparse.REMAINDER)
    sub.add_parser("machine-state", help="say whether this machine's lab caches (images, compile cache) are empty or filled")
    compiles = sub.add_parser("compiles", help="the compile cache's calls since a time: hits, compiles and their CPU")
    compiles.add_argument("--since", type=float, default=0.0, help="seconds since the epoch")
    args = parser.parse_args(argv)
    if args.command == "machine-state":
        print(machine_state())
        return 0
    if args.command == "compiles":
        print(compile_report(args.since))
        return 0
    if args.command in ("status", "exec"):
        return run_command(args)
    if args.command == "up":
        # the image first, outside lab_lock (minutes when it is built)
        with build_lock(args.stack):
            build(args.stack)
    with lab_lock():
        return run_command(args)


def machine_state() -> str:
    """fresh: no lab image and an empty compile cache (what a new machine has); warm: both filled; else what is there."""
    images = [name for name in ["base"] + sorted(STACKS) if os.path.isfile(os.path.join(IMAGES, name + ".recipe"))]
    manifests = os.path.join(NVCC_CACHE, "manifests")
    entries = len(os.listdir(manifests)) if os.path.isdir(manifests) else 0
    what = "lab images: %s (%s); compile cache: %d entries (%s)" % (", ".join(images) or "none", IMAGES, entries, NVCC_CACHE)
    if not images and not entries:
        return "fresh machine (%s)" % what
    if len(images) == 1 + len(STACKS) and entries:
        return "warm machine (%s)" % what
    return "partly warm machine (%s)" % what


def compile_report(since: float) -> str:
    """What the lab's compile cache did since a time (its log: one line per nvcc call): the hits, the real compiles,
    their CPU (nvcc and what it ran) and their wait for one of the machine's job slots."""
    calls = []
    try:
        with open(os.path.join(NVCC_CACHE, "log.jsonl")) as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("time", 0) >= since:
                    calls.append(entry)
    except OSError:
        pass
    compiled = [entry for entry in calls if entry.get("result") in ("miss", "off")]
    hits = sum(1 for entry in calls if entry.get("result") == "hit")
    measured = [entry for entry in compiled if "cpu" in entry]
    cpu = sum(entry["cpu"] for entry in measured)
    waited = sum(entry.get("slot_wait", 0) for entry in measured)
    hosts = len({entry.get("host") for entry in compiled})
    text = "%d compiled (on %d nodes), %d hits" % (len(compiled), hosts, hits)
    if measured:
        text += "; the compiles' CPU (nvcc and what it ran): %.1f core-seconds%s; waits for a job slot: %d s in all" % (
            cpu, "" if len(measured) == len(compiled) else " (%d of them measured)" % len(measured), waited)
    return text + " (%s)" % os.path.join(NVCC_CACHE, "log.jsonl")


def run_command(args: argparse.Namespace) -> int:
    if args.command == "build":
        stacks = sorted(set(args.stack or ["incident"]))
        with contextlib.ExitStack() as locks:
            for stack in stacks:
                locks.enter_context(build_lock(stack))
            build_stacks(stacks)
        disk_report()
    elif args.command == "up":
        up(args.name, args.profile, args.address, args.stack, layer=args.layer)
    elif args.command == "down":
        down(args.name, save=args.save)
    elif args.command == "fleet-up":
        fleet_up(args.inventory)
    elif args.command == "fleet-down":
        fleet_down()
    elif args.command == "status":
        status()
    elif args.command == "mirror":
        require_root()
        mirror_wheels()
        if args.apt:
            build_apt_repo()
    elif args.command == "store-server":
        require_root()
        if args.stop:
            stop_store()
        else:
            serve_store(os.path.abspath(args.dir))
    elif args.command == "exec":
        return node_exec(Node(args.name), [c for c in args.cmd if c != "--"] or ["bash"], check=False).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
