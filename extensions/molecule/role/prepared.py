# -*- coding: utf-8 -*-
"""LAB TOOLING: the prepared images of `make test ROLE=<role>` (extensions/molecule/role), never used by a role.

A prepared image is a lab node of the scenario's GPU profile and stack after site.yml's provisioning up to the role
under test, kept as overlay layers: each layer is what one provisioning step wrote (`labctl down --save`), and a node
boots with the layers of the steps before it over its stack's image (`labctl up --layer`). The steps are site.yml's own,
read from playbooks/tasks/site_provision.yml (its import_role entries, in order: a role, or the part of it site.yml runs
at that point). `make test ROLE=R` converges R alone on the layers of every step before R's last one: for
sglang_service, whose units and configurations come before jit_cache's warm-up and whose start comes after it, the
image holds its configurations and the warm cache, and the role's run starts the services.

Layer k lies in /var/cache/inferops-lab/prepared/<stack>-<profile>/<k>-<digest>; the digest covers the step, the lab's
images (their recipes), and every file of the collection a node's state after steps 1..k depends on: the roles those
steps run (and inferops, their dependency), the plugins, the playbooks, the lab inventory's settings and this
scenario's converge. An edit of a role makes new layers from its first step on; the ones before are reused. A missing
layer is made on the spot: a node booted on the layers before it, the step converged (converge.yml), the node saved.

  prepared.py up --role R --node N --profile P --address A --stack S --groups G1,G2
      boot N on R's prepared image (making the missing layers first)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import typing as t

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
LABCTL = os.path.join(ROOT, "extensions", "molecule", "lab", "labctl.py")
IMAGES = os.environ.get("INFEROPS_LAB_IMAGES", "/var/cache/inferops-lab/images")
PREPARED = os.environ.get("INFEROPS_LAB_PREPARED", os.path.join(os.path.dirname(IMAGES), "prepared"))
KEY = os.path.join(ROOT, ".build", "lab", "ssh", "id_ed25519")
# what every layer depends on besides its roles (the roles' code is added per step)
SHARED = ["plugins", "playbooks", "meta", "galaxy.yml", os.path.join("inventories", "lab", "group_vars"),
          os.path.join("extensions", "molecule", "role", "converge.yml")]


def log(text: str) -> None:
    print("prepared: " + text, file=sys.stderr, flush=True)


def steps() -> t.List[t.Dict[str, str]]:
    """site.yml's provisioning steps, in order: [{role, tasks_from}]."""
    with open(os.path.join(ROOT, "playbooks", "tasks", "site_provision.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    found = []
    for task in tasks:
        spec = task.get("ansible.builtin.import_role")
        if spec:
            found.append({"role": spec["name"].rsplit(".", 1)[-1], "tasks_from": spec.get("tasks_from", "main")})
    return found


def digest_paths(digest: t.Any, paths: t.Iterable[str]) -> None:
    for rel in paths:
        full = os.path.join(ROOT, rel)
        files = [full] if os.path.isfile(full) else sorted(
            os.path.join(dirpath, name) for dirpath, dirnames, names in os.walk(full)
            for name in names if "__pycache__" not in dirpath and not name.endswith(".pyc"))
        for path in files:
            digest.update(os.path.relpath(path, ROOT).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())


def layer_digests(stack: str, profile: str, chain: t.List[t.Dict[str, str]]) -> t.List[str]:
    """One digest per step of chain: the step and everything the node's state after it depends on."""
    base = hashlib.sha256(("%s %s\n" % (stack, profile)).encode())
    for recipe in ("base.recipe", stack + ".recipe"):
        with open(os.path.join(IMAGES, recipe), "rb") as handle:
            base.update(handle.read())
    digest_paths(base, SHARED + [os.path.join("roles", "inferops")])
    digests, roles = [], []
    for step in chain:
        roles.append(step["role"])
        digest = base.copy()
        digest.update(json.dumps(chain[:len(roles)], sort_keys=True).encode())
        digest_paths(digest, [os.path.join("roles", role) for role in sorted(set(roles))])
        digests.append(digest.hexdigest()[:16])
    return digests


def labctl(*args: str) -> None:
    subprocess.run([sys.executable, LABCTL] + list(args), check=True)


def boot(args: argparse.Namespace, layers: t.List[str]) -> None:
    """Boot the node over its stack's image and these layers (the first step's first; labctl takes the topmost first)."""
    labctl("up", args.node, "--profile", args.profile, "--address", args.address, "--stack", args.stack,
           *(["--layer", ":".join(reversed(layers))] if layers else []))


def inventory(directory: str, node: str, address: str, groups: t.List[str]) -> str:
    """A one-node inventory with the lab's settings, as molecule writes the scenario's."""
    host = {"ansible_host": address, "ansible_user": "root", "ansible_ssh_private_key_file": KEY,
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no"}
    data = {"all": {"hosts": {node: host}, "children": {group: {"hosts": {node: None}} for group in groups}}}
    path = os.path.join(directory, "hosts.yml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(data, handle)
    os.symlink(os.path.join(ROOT, "inventories", "lab", "group_vars"), os.path.join(directory, "group_vars"))
    return path


def make_layer(args: argparse.Namespace, below: t.List[str], step: t.Dict[str, str], dest: str) -> None:
    """Boot the node on the layers below, converge one step, keep what it wrote as dest."""
    started = time.monotonic()
    log("making the layer of step %s (%s, tasks/%s.yml) on %d layer(s): %s" % (
        os.path.basename(dest), step["role"], step["tasks_from"], len(below), dest))
    boot(args, below)
    saved = False
    try:
        with tempfile.TemporaryDirectory() as directory:
            hosts = inventory(directory, args.node, args.address, args.groups.split(","))
            env = dict(os.environ, INFEROPS_ROLE_STEP=json.dumps(step))
            log_path = os.path.join(PREPARED, "last-layer.log")
            with open(log_path, "w", encoding="utf-8") as out:
                rc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", hosts,
                                     os.path.join(HERE, "converge.yml")], check=False, env=env, stdout=out,
                                    stderr=subprocess.STDOUT,
                                    cwd=ROOT).returncode
            if rc != 0:
                with open(log_path, encoding="utf-8") as handle:
                    sys.stderr.write("".join(handle.readlines()[-60:]))
                raise SystemExit("prepared: the step %s (%s) failed on the prepared node, rc %d (log: %s)" % (
                    os.path.basename(dest), step["role"], rc, log_path))
        labctl("down", args.node, "--save", dest + ".new")
        saved = True
        os.rename(dest + ".new", dest)
    finally:
        if not saved:
            labctl("down", args.node)
    log("layer %s made in %.0f s" % (os.path.basename(dest), time.monotonic() - started))


def up(args: argparse.Namespace) -> int:
    chain = steps()
    positions = [index for index, step in enumerate(chain) if step["role"] == args.role]
    if args.role != "inferops" and not positions:
        raise SystemExit("prepared: %s is not a role of site.yml's provisioning (playbooks/tasks/site_provision.yml)" % args.role)
    # inferops runs as every role's dependency: its loop has no step before it
    last = positions[-1] if positions else 0
    directory = os.path.join(PREPARED, "%s-%s" % (args.stack, args.profile))
    os.makedirs(directory, exist_ok=True)
    digests = layer_digests(args.stack, args.profile, chain[:last])
    layers: t.List[str] = []
    for index, (step, digest) in enumerate(zip(chain[:last], digests), start=1):
        dest = os.path.join(directory, "%d-%s" % (index, digest))
        if not os.path.isdir(dest):
            for old in os.listdir(directory):
                if old.startswith("%d-" % index):
                    shutil.rmtree(os.path.join(directory, old), ignore_errors=True)
            make_layer(args, layers, step, dest)
        layers.append(dest)
    log("%s on %d prepared layer(s): %s" % (args.node, len(layers), ", ".join(
        "%s (%s)" % (os.path.basename(layer), step["role"] + ("" if step["tasks_from"] == "main" else ":" + step["tasks_from"]))
        for layer, step in zip(layers, chain))))
    boot(args, layers)
    return 0


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    node_up = sub.add_parser("up", help="boot a node on a role's prepared image")
    node_up.add_argument("--role", required=True)
    node_up.add_argument("--node", required=True)
    node_up.add_argument("--profile", required=True)
    node_up.add_argument("--address", required=True)
    node_up.add_argument("--stack", required=True)
    node_up.add_argument("--groups", required=True)
    args = parser.parse_args(argv)
    return up(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
