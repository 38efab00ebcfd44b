# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TOOLING: what every part of the lab uses: its paths and settings, running commands, stamps, mounts, locks,
the SSH key, measurements, the bridge and the small servers' pid files."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import typing as t

# extensions/molecule/lab (this package lives in extensions/molecule/lab/labkit)
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


STATE = os.environ.get("INFEROPS_LAB_STATE", os.path.join(ROOT, ".build", "lab"))
# The lab's images (the debootstrap base, each stack's layer) and their wheelhouse are the machine's, not the clone's:
# built once per machine, reused by every clone (each layer is rebuilt when its recipe changes). Two clones' labs cannot
# run at once anyway (one bridge, one address plan).
IMAGES = os.environ.get("INFEROPS_LAB_IMAGES", "/var/cache/inferops-lab/images")
PROFILES = os.path.join(HERE, "gpu", "profiles")

SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("INFEROPS_LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "python3-apt", "iproute2", "ca-certificates",
    "sudo", "openssh-server", "g++", "procps", "less",
    # cuda_toolkit's apt method installs it where missing (deb822_repository needs it); in the image, because lab nodes
    # reach the lab's mirror only, not Debian's archive
    "python3-debian",
]
BRIDGE = "iflab0"
NETWORK = ipaddress.ip_network("10.213.0.0/24")
GATEWAY = "10.213.0.1"
PREFIX = "inferops-lab-"
SGLANG_VENV = os.environ.get("INFEROPS_LAB_SGLANG_VENV", "/opt/sglang/venv")
CUDA_128 = "/usr/local/cuda-12.8"
# NVIDIA's real 12.8 pieces on PyPI: ptxas, nvvm and crt headers; the runtime; CCCL headers.
CUDA_128_WHEELS = ["nvidia-cuda-nvcc-cu12==12.8.93", "nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cuda-cccl-cu12==12.8.90"]
VENV_REQUIREMENTS = os.path.join(HERE, "sglang-venv-requirements.txt")
# The SGLang venvs a node can boot with: the incident's releases, and the ones a fleet installed today runs.
STACKS = {
    "incident": (VENV_REQUIREMENTS, "SGLang 0.5.21, FlashInfer 0.6.18"),
    "current": (os.path.join(HERE, "sglang-venv-requirements-current.txt"), "SGLang 0.5.23, FlashInfer 0.7.2"),
    # the release pair with a public trtllm-gen kernel set (flashinfer-cubin 0.6.12): the air-gapped B200/B300 stack
    "cubin": (os.path.join(HERE, "sglang-venv-requirements-cubin.txt"), "SGLang 0.5.15.post1, FlashInfer 0.6.12"),
}
# Bump when build_stack_image()'s steps change: the image is rebuilt when this or any file it copies changes.
IMAGE_STEPS_VERSION = "6"


def log(message: str) -> None:
    print("[lab] " + message, flush=True)


def run(command: t.List[str], check: bool = True, quiet: bool = False, **kwargs: t.Any) -> subprocess.CompletedProcess:
    if not quiet:
        log("$ " + " ".join(command))
    return subprocess.run(command, check=check, **kwargs)


def output(command: t.List[str]) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def require_root() -> None:
    if os.geteuid() != 0:
        sys.exit("labctl: the lab needs root (mounts, network namespaces, systemd-nspawn)")


def recipe_hash(paths: t.Iterable[str], extra: t.Iterable[str] = ()) -> str:
    """Hash of the files that make a layer, so a changed recipe rebuilds it."""
    digest = hashlib.sha256()
    for top in sorted(paths):
        for directory, dirs, files in os.walk(top) if os.path.isdir(top) else [(os.path.dirname(top), [], [os.path.basename(top)])]:
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, ROOT).encode())
                with open(path, "rb") as handle:
                    digest.update(handle.read())
    for item in extra:
        digest.update(item.encode())
    return digest.hexdigest()[:16]


def stamp_value(path: str) -> str:
    """What a layer's stamp file records ("" when there is none)."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def stamp_matches(path: str, value: str) -> bool:
    return stamp_value(path) == value


def write_stamp(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value + "\n")


# --- mounts -------------------------------------------------------------------------------------------

def mounts_under(path: str) -> t.List[str]:
    """Mount points at or below path, deepest first."""
    found = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            point = line.split()[4].replace("\\040", " ")
            if point == path or point.startswith(path.rstrip("/") + "/"):
                found.append(point)
    return sorted(set(found), key=len, reverse=True)


def unmount_all(path: str) -> None:
    for point in mounts_under(path):
        run(["umount", "-l", point], check=False)


def mount_overlay(lowers: t.List[str], upper: str, work: str, merged: str) -> None:
    for directory in (upper, work, merged):
        os.makedirs(directory, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         "lowerdir=%s,upperdir=%s,workdir=%s" % (":".join(lowers), upper, work), merged])


def ssh_key() -> str:
    key = os.path.join(STATE, "ssh", "id_ed25519")
    if not os.path.exists(key):
        os.makedirs(os.path.dirname(key), exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "inferops-lab", "-f", key])
    return key


def server_pid(name: str, *marks: bytes) -> t.Optional[int]:
    """The pid in STATE/<name>.pid, if that process still runs and its command line holds every mark."""
    try:
        with open(os.path.join(STATE, name + ".pid")) as handle:
            pid = int(handle.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            cmdline = handle.read()
    except (OSError, ValueError):
        return None
    return pid if all(mark in cmdline for mark in marks) else None


def stop_server(name: str, pid: t.Optional[int], what: str) -> None:
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        log("%s stopped" % what)
    try:
        os.remove(os.path.join(STATE, name + ".pid"))
    except OSError:
        pass


@contextlib.contextmanager
def lab_lock() -> t.Iterator[None]:
    """One labctl at a time changes the lab's shared pieces (layers, bridge, mirror, the node list).

    Scenarios run side by side (make molecule): without it, one scenario's last `down` removes the bridge and
    mirror while another's `up` is adding a node to them, and two `up`s race to create the bridge.
    """
    os.makedirs(STATE, exist_ok=True)
    with open(os.path.join(STATE, "labctl.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- measurements -----------------------------------------------------------------------------------------

def record_measure(name: str, seconds: float) -> None:
    path = os.path.join(STATE, "measurements.json")
    data: t.Dict[str, t.Any] = {}
    if os.path.exists(path):
        with open(path) as handle:
            data = json.load(handle)
    data[name] = round(seconds, 1)
    with open(path, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
    log("%s: %.1f s" % (name, seconds))


def veth_name(address: str) -> str:
    return "vlab%d" % int(address.rsplit(".", maxsplit=1)[-1])


def ensure_bridge() -> None:
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", "%s/%d" % (GATEWAY, NETWORK.prefixlen), "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"], quiet=True)


def remove_bridge() -> None:
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode == 0:
        run(["ip", "link", "del", BRIDGE])
