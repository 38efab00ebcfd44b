# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab fleet: simulated Blackwell nodes with real systemd, for molecule and `make lab`.

LAB TOOLING -- test equipment, never used by a role. Each node is a Debian root
filesystem booted with `systemd-nspawn --boot` (systemd as PID 1) in its own network
namespace, reached over SSH like a production node. Layers:

  base      debootstrap bookworm (built once, cached in .build/lab/base)
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

Usage: python3 molecule/lab/labctl.py {build,up,down,fleet-up,fleet-down,status,exec} ...
Everything is root-only and stays under .build/lab, network namespaces named
inferops-lab-*, the bridge iflab0 and cgroups named inferops-lab-*.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))

import toolkit  # noqa: E402 -- the collection's own wheel layout code (module_utils/toolkit.py), reused by the lab

STATE = os.environ.get("INFEROPS_LAB_STATE", os.path.join(ROOT, ".build", "lab"))
PROFILES = os.path.join(HERE, "gpu", "profiles")

SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("INFEROPS_LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "python3-apt", "iproute2", "ca-certificates",
    "sudo", "openssh-server", "g++", "procps", "less",
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
}
# Bump when build_stack_image()'s steps change: the image is rebuilt when this or any file it copies changes.
IMAGE_STEPS_VERSION = "5"


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


# --- layer 1: base --------------------------------------------------------------------------------------

def build_base() -> str:
    base = os.path.join(STATE, "base")
    stamp = os.path.join(STATE, "base.recipe")
    recipe = recipe_hash([], [SUITE, DEBIAN_MIRROR] + BASE_PACKAGES)
    if os.path.isdir(base) and stamp_matches(stamp, recipe):
        return base
    staging = base + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    started = time.monotonic()
    log("building the base root filesystem (debootstrap %s, about 2 minutes)" % SUITE)
    run(["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES), SUITE, staging, DEBIAN_MIRROR])
    run(["chroot", staging, "apt-get", "clean"])
    # The lab reaches nodes as root with a key; nothing else logs in.
    with open(os.path.join(staging, "etc", "ssh", "sshd_config.d", "lab.conf"), "w") as handle:
        handle.write("PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n")
    shutil.rmtree(base, ignore_errors=True)
    os.rename(staging, base)
    write_stamp(stamp, recipe)
    record_measure("base_build_s", time.monotonic() - started)
    return base


# --- layer 2: a stack's image (the incident state, or the current stack) ----------------------------------

def venv_requirements(stack: str = "incident") -> t.List[str]:
    with open(STACKS[stack][0]) as handle:
        return [line.split("#")[0].strip() for line in handle if line.split("#")[0].strip()]


def fetch_wheels() -> str:
    """One wheelhouse on the host, read by every image build (nothing is downloaded per node)."""
    wheels = os.path.join(STATE, "wheels")
    stamp = os.path.join(STATE, "wheels.recipe")
    recipe = recipe_hash([path for path, _what in STACKS.values()], CUDA_128_WHEELS)
    if os.path.isdir(wheels) and stamp_matches(stamp, recipe):
        return wheels
    os.makedirs(wheels, exist_ok=True)
    log("downloading wheels for the SGLang venv and the 12.8 toolkit pieces (once, into %s)" % wheels)
    # one pip call per set (pip refuses two releases of one package in a call, even with --no-deps), side by side, each
    # into a directory of its own (two sets share some wheels), then moved into the one wheelhouse
    sets = [venv_requirements(stack) for stack in sorted(STACKS)] + [CUDA_128_WHEELS]

    def download(index: int) -> str:
        part = os.path.join(wheels, ".set-%d" % index)
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", "--dest", part] + sets[index])
        return part

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(sets)) as pool:
        parts = list(pool.map(download, range(len(sets))))
    for part in parts:
        for name in os.listdir(part):
            os.replace(os.path.join(part, name), os.path.join(wheels, name))
        os.rmdir(part)
    write_stamp(stamp, recipe)
    return wheels


def install_cuda_128(merged: str, wheels: str) -> None:
    """NVIDIA's real 12.8 pieces laid out as a toolkit, plus the SIMULATED nvcc front end."""
    prefix = merged + CUDA_128
    for path in toolkit.select_wheels(wheels, CUDA_128_WHEELS):
        toolkit.extract_wheel(path, prefix)
    toolkit.finish_layout(prefix, "x86_64")
    shutil.copy(os.path.join(HERE, "cuda128", "nvcc"), os.path.join(prefix, "bin", "nvcc"))
    os.chmod(os.path.join(prefix, "bin", "nvcc"), 0o755)
    with open(os.path.join(prefix, "LAB-SIMULATION.txt"), "w") as handle:
        handle.write("LAB SIMULATION: bin/nvcc is a front end that only reports release 12.8 (no 12.x nvcc exists on PyPI).\n"
                     "bin/ptxas, nvvm/, include/ and lib64/ are NVIDIA's real 12.8 files from PyPI wheels.\n")


def chroot(merged: str, command: t.List[str]) -> None:
    run(["chroot", merged] + command, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"})


def build_stack_image(base: str, wheels: str, stack: str = "incident") -> str:
    layer = os.path.join(STATE, stack)
    stamp = os.path.join(STATE, stack + ".recipe")
    inputs = [os.path.join(HERE, part) for part in ("cuda128", "gpu", "torch_gpus", "gpu_only", "sglang_standin", "models",
                                                    "LAB-NODE.txt")]
    inputs.append(os.path.join(ROOT, "plugins", "module_utils", "toolkit.py"))
    recipe = recipe_hash(inputs + [STACKS[stack][0]],
                         [IMAGE_STEPS_VERSION, SGLANG_VENV, stamp_value(os.path.join(STATE, "base.recipe"))])
    if os.path.isdir(layer) and stamp_matches(stamp, recipe):
        return layer
    started = time.monotonic()
    log("building the %s-stack image (system CUDA 12.8, SGLang venv with %s)" % (stack, STACKS[stack][1]))
    staging = layer + ".staging"
    unmount_all(staging)
    shutil.rmtree(staging, ignore_errors=True)
    upper, work, merged = (os.path.join(staging, d) for d in ("upper", "work", "merged"))
    mount_overlay([base], upper, work, merged)
    try:
        for fs, point in (("proc", "proc"), ("sysfs", "sys")):
            run(["mount", "-t", fs, fs, os.path.join(merged, point)])
        run(["mount", "--bind", "/dev", os.path.join(merged, "dev")])
        os.makedirs(os.path.join(merged, "mnt", "wheels"), exist_ok=True)
        run(["mount", "--bind", "-o", "ro", wheels, os.path.join(merged, "mnt", "wheels")])

        install_cuda_128(merged, wheels)
        chroot(merged, ["update-alternatives", "--install", "/usr/local/cuda", "cuda", CUDA_128, "128"])
        chroot(merged, ["update-alternatives", "--install", "/usr/local/cuda-12", "cuda-12", CUDA_128, "128"])

        chroot(merged, ["python3", "-m", "venv", SGLANG_VENV])
        chroot(merged, [SGLANG_VENV + "/bin/pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--find-links", "/mnt/wheels"] + venv_requirements(stack))
        site = output(["chroot", merged, SGLANG_VENV + "/bin/python", "-c",
                       "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
        # The real SGLang is installed; only its server entry point is the lab's (the model and serving simulated).
        shutil.copy(os.path.join(HERE, "sglang_standin", "inferops_lab_sglang.py"), merged + site)
        shutil.copy(os.path.join(HERE, "sglang_standin", "launch_server.py"), merged + site + "/sglang/launch_server.py")
        for name in ("torch_gpus/inferops_lab_torch_gpus", "gpu_only/inferops_lab_gpu_only"):
            shutil.copy(os.path.join(HERE, name + ".py"), merged + site)
            with open(merged + site + "/" + os.path.basename(name) + ".pth", "w") as handle:
                handle.write("import %s\n" % os.path.basename(name))

        # Lab nodes are air-gapped: their only package sources are the ones a role adds (the lab mirror).
        with open(merged + "/etc/apt/sources.list", "w") as handle:
            handle.write("# LAB: an air-gapped node; the Debian archive is not reachable from here.\n")
        os.makedirs(merged + "/usr/lib/inferops-lab", exist_ok=True)
        shutil.copy(os.path.join(HERE, "gpu", "nvidia_smi_sim.py"), merged + "/usr/lib/inferops-lab/nvidia_smi_sim.py")
        shutil.copy(os.path.join(HERE, "gpu", "nvidia-smi"), merged + "/usr/bin/nvidia-smi")
        os.chmod(merged + "/usr/bin/nvidia-smi", 0o755)
        os.makedirs(merged + "/etc/inferops-lab", exist_ok=True)
        shutil.copy(os.path.join(HERE, "LAB-NODE.txt"), merged + "/etc/inferops-lab/README")
        shutil.copy(os.path.join(HERE, "LAB-NODE.txt"), merged + "/etc/motd")
        # SIMULATED models: config.json only (the stand-in reads the attention shape; nothing is loaded).
        shutil.copytree(os.path.join(HERE, "models"), merged + "/models")
        chroot(merged, ["python3", "-m", "compileall", "-q", site + "/sglang", site + "/inferops_lab_sglang.py"])
    finally:
        unmount_all(merged)
    shutil.rmtree(work, ignore_errors=True)
    unmount_all(layer)
    shutil.rmtree(layer, ignore_errors=True)
    os.rename(upper, layer)
    shutil.rmtree(staging, ignore_errors=True)
    write_stamp(stamp, recipe)
    record_measure("%s_image_build_s" % stack, time.monotonic() - started)
    return layer


def build(stack: str = "incident") -> t.Tuple[str, str]:
    require_root()
    os.makedirs(STATE, exist_ok=True)
    base = build_base()
    image = build_stack_image(base, fetch_wheels(), stack)
    ssh_key()
    return base, image


def build_stacks(stacks: t.List[str]) -> None:
    """The base layer and the wheelhouse once, then the stacks' layers side by side (each one pip install, mostly one
    core and the disk)."""
    require_root()
    os.makedirs(STATE, exist_ok=True)
    # debootstrap (the Debian archive, then the disk) beside the downloads from PyPI: the wheelhouse and the mirror's
    # CUDA 13.0 wheels (what `mirror` would fetch next)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        layers = [pool.submit(build_base), pool.submit(fetch_wheels), pool.submit(mirror_wheels)]
        base, wheels, _mirror = [layer.result() for layer in layers]
    ssh_key()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(stacks)) as pool:
        for done in [pool.submit(build_stack_image, base, wheels, stack) for stack in stacks]:
            done.result()


@contextlib.contextmanager
def build_lock(stack: str) -> t.Iterator[None]:
    """One build of a stack's image at a time, apart from lab_lock: a scenario that boots a node of another stack builds
    its image without holding up the other scenarios' labctl calls (make test builds the base layer and the wheelhouse
    before any scenario starts)."""
    os.makedirs(STATE, exist_ok=True)
    with open(os.path.join(STATE, "build-%s.lock" % stack), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ssh_key() -> str:
    key = os.path.join(STATE, "ssh", "id_ed25519")
    if not os.path.exists(key):
        os.makedirs(os.path.dirname(key), exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "inferops-lab", "-f", key])
    return key


# --- the lab mirror: a wheelhouse and an apt repository served to the nodes from the bridge address ---------

MIRROR = os.path.join(STATE, "mirror")
MIRROR_PORT = 8088
MIRROR_URL = "http://%s:%d" % (GATEWAY, MIRROR_PORT)
STORE_PORT = 8089
APT_DISTRIBUTION = "debian12/x86_64"
APT_KEY_NAME = "lab-key.asc"
CUDA_13_DEB = ("cuda-toolkit-13-0", "13.0.2-1")


def cuda_toolkit_pins(release: str = "13.0") -> t.List[str]:
    """The pins roles/cuda_toolkit installs with its pip method: one source for the role and the lab."""
    import yaml  # noqa: PLC0415 -- labctl runs with the project venv's python, which has PyYAML

    with open(os.path.join(ROOT, "roles", "cuda_toolkit", "vars", "main.yml")) as handle:
        return list(yaml.safe_load(handle)["_cuda_toolkit_pip_releases"][release])


# A FlashInfer release for the flashinfer role's upgrade strategy to install (0.6.18 -> 0.6.18.post1, same detection).
MIRROR_EXTRA_WHEELS = ["flashinfer-python==0.6.18.post1"]


def mirror_wheels() -> str:
    """CUDA 13.0 wheels and an upgrade FlashInfer for the nodes' pip (a flat --find-links directory, as an air-gapped wheelhouse)."""
    directory = os.path.join(MIRROR, "wheels")
    pins = cuda_toolkit_pins() + MIRROR_EXTRA_WHEELS
    stamp = os.path.join(directory, ".recipe")
    recipe = recipe_hash([], pins)
    if not stamp_matches(stamp, recipe):
        os.makedirs(directory, exist_ok=True)
        log("downloading the CUDA 13.0 wheels into the lab mirror (once)")
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", "--dest", directory] + pins)
        write_stamp(stamp, recipe)
    return directory


def build_apt_repo() -> str:
    """A signed, flat apt repository (NVIDIA's layout) holding a real .deb of a real CUDA 13.0 toolkit.

    The toolkit is laid out from NVIDIA's wheels by the collection's own code; the
    package registers update-alternatives at priority 130 like NVIDIA's do. LAB: a
    stand-in for NVIDIA's repository so the role's keyring, source, pin, hold and
    alternatives logic run without NVIDIA's servers.
    """
    repo = os.path.join(MIRROR, "apt", APT_DISTRIBUTION)
    stamp = os.path.join(repo, ".recipe")
    wheels = mirror_wheels()
    pins = cuda_toolkit_pins()
    recipe = recipe_hash([os.path.join(ROOT, "plugins", "module_utils", "toolkit.py")], pins + list(CUDA_13_DEB) + ["apt-1"])
    if stamp_matches(stamp, recipe):
        return repo
    started = time.monotonic()
    log("building the lab apt repository (a real .deb of CUDA 13.0 laid out from NVIDIA's wheels)")
    work = os.path.join(STATE, "aptbuild")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(repo, ignore_errors=True)
    root = os.path.join(work, "root")
    prefix = os.path.join(root, "usr", "local", "cuda-13.0")
    for path in toolkit.select_wheels(wheels, pins):
        toolkit.extract_wheel(path, prefix)
    toolkit.finish_layout(prefix, "x86_64")
    with open(os.path.join(work, "stub.c"), "w") as handle:
        handle.write(toolkit.stub_source())
    run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", os.path.join(prefix, "lib64", "stubs", "libcuda.so"),
         os.path.join(work, "stub.c")])
    debian = os.path.join(root, "DEBIAN")
    os.makedirs(debian)
    package, version = CUDA_13_DEB
    with open(os.path.join(debian, "control"), "w") as handle:
        handle.write("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: inferops lab <lab@inferops.invalid>\n"
                     "Section: devel\nPriority: optional\nDescription: LAB: CUDA 13.0 toolkit laid out from NVIDIA's wheels\n"
                     " Built by the inferops.blackwell lab to stand in for NVIDIA's package of the same name.\n"
                     % (package, version))
    scripts = {
        "postinst": "#!/bin/sh\nset -e\nupdate-alternatives --install /usr/local/cuda cuda /usr/local/cuda-13.0 130\n"
                    "update-alternatives --install /usr/local/cuda-13 cuda-13 /usr/local/cuda-13.0 130\n",
        "prerm": "#!/bin/sh\nset -e\nif [ \"$1\" = remove ]; then\n  update-alternatives --remove cuda /usr/local/cuda-13.0\n"
                 "  update-alternatives --remove cuda-13 /usr/local/cuda-13.0\nfi\n",
    }
    for name, body in scripts.items():
        with open(os.path.join(debian, name), "w") as handle:
            handle.write(body)
        os.chmod(os.path.join(debian, name), 0o755)
    os.makedirs(repo)
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", root,
         os.path.join(repo, "%s_%s_amd64.deb" % (package, version))], stdout=subprocess.DEVNULL)
    gnupg = os.path.join(STATE, "gnupg")
    gpg = ["gpg", "--batch", "--quiet", "--homedir", gnupg]
    if not os.path.isdir(gnupg):
        os.makedirs(gnupg, mode=0o700)
        run(gpg + ["--passphrase", "", "--quick-gen-key", "inferops lab apt <lab@inferops.invalid>", "ed25519", "sign", "never"])
    with open(os.path.join(repo, APT_KEY_NAME), "w") as handle:
        run(gpg + ["--armor", "--export"], stdout=handle)
    with open(os.path.join(repo, "Packages"), "w") as handle:
        run(["apt-ftparchive", "packages", "."], cwd=repo, stdout=handle)
    with open(os.path.join(repo, "Release"), "w") as handle:
        run(["apt-ftparchive", "release", "."], cwd=repo, stdout=handle)
    run(gpg + ["--yes", "--clearsign", "-o", os.path.join(repo, "InRelease"), os.path.join(repo, "Release")])
    run(gpg + ["--yes", "--armor", "--detach-sign", "-o", os.path.join(repo, "Release.gpg"), os.path.join(repo, "Release")])
    shutil.rmtree(work, ignore_errors=True)
    write_stamp(stamp, recipe)
    record_measure("apt_repo_build_s", time.monotonic() - started)
    return repo


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


def mirror_pid() -> t.Optional[int]:
    return server_pid("mirror", b"http.server", MIRROR.encode())


def serve_mirror() -> None:
    """Serve .build/lab/mirror on the bridge address (nodes only; nothing outside the lab reaches it)."""
    if mirror_pid() is not None:
        return
    os.makedirs(MIRROR, exist_ok=True)
    with open(os.path.join(STATE, "mirror.log"), "ab") as logfile:
        process = subprocess.Popen([sys.executable, "-m", "http.server", str(MIRROR_PORT), "--bind", GATEWAY, "--directory", MIRROR],
                                   stdin=subprocess.DEVNULL, stdout=logfile, stderr=logfile, start_new_session=True)
    time.sleep(0.5)
    if process.poll() is not None:
        # another server holds the port -- most likely the mirror of another checkout's lab, which would serve the
        # nodes that checkout's files instead of this one's
        raise SystemExit("labctl: the lab mirror could not listen on %s:%d (see %s); another process holds the port "
                         "(ss -ltnp 'sport = :%d'): stop it, or run `labctl fleet-down` in the checkout that started it"
                         % (GATEWAY, MIRROR_PORT, os.path.join(STATE, "mirror.log"), MIRROR_PORT))
    with open(os.path.join(STATE, "mirror.pid"), "w") as handle:
        handle.write("%d\n" % process.pid)
    log("lab mirror at %s (pid %d)" % (MIRROR_URL, process.pid))


def stop_mirror() -> None:
    stop_server("mirror", mirror_pid(), "lab mirror")


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


def store_pid() -> t.Optional[int]:
    return server_pid("store", b"store_server.py")


def serve_store(directory: str) -> None:
    """The lab's HTTP build store (store_server.py: GET and PUT) over DIR, on the bridge address (nodes only)."""
    stop_store()
    ensure_bridge()
    with open(os.path.join(STATE, "store.log"), "ab") as logfile:
        process = subprocess.Popen([sys.executable, os.path.join(HERE, "store_server.py"), "--dir", directory, "--bind", GATEWAY,
                                    "--port", str(STORE_PORT)], stdin=subprocess.DEVNULL, stdout=logfile, stderr=logfile,
                                   start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("labctl: the lab store could not listen on %s:%d (see %s)" % (GATEWAY, STORE_PORT, os.path.join(STATE, "store.log")))
        try:
            with socket.create_connection((GATEWAY, STORE_PORT), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    with open(os.path.join(STATE, "store.pid"), "w") as handle:
        handle.write("%d\n" % process.pid)
    log("lab build store at http://%s:%d/ over %s (pid %d)" % (GATEWAY, STORE_PORT, directory, process.pid))


def stop_store() -> None:
    stop_server("store", store_pid(), "lab build store")


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


def veth_name(address: str) -> str:
    return "vlab%d" % int(address.rsplit(".", maxsplit=1)[-1])


def ensure_bridge() -> None:
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", "%s/%d" % (GATEWAY, NETWORK.prefixlen), "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"], quiet=True)


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


def nvcc_cache_dir() -> str:
    """The lab's compile cache on the host, shared by every node (LAB TEST EQUIPMENT, see nvcc_cache/)."""
    path = os.path.join(STATE, "nvcc-cache")
    if not os.path.isdir(path):
        os.makedirs(path)
        # written by each node's service user, whose uid differs from node to node
        os.chmod(path, 0o1777)
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


def up(name: str, profile: str, address: str, stack: str = "incident") -> None:
    require_root()
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
        json.dump({"name": name, "profile": profile, "address": address, "stack": stack}, handle)
    if not mounts_under(node.merged):
        mount_overlay([image, base], os.path.join(node.dir, "upper"), os.path.join(node.dir, "work"), node.merged)
    write_node_files(node, profile, address)
    setup_network(node, address)
    serve_mirror()
    boot(node)
    wait_running(node, address)
    record_measure("node_boot_s", time.monotonic() - started)
    log("%s is up: GPU profile %s (SIMULATED), %s, ssh root@%s -i %s" % (name, profile, STACKS[stack][1], address, ssh_key()))


def down(name: str) -> None:
    """Stop the node and remove every mount, namespace, link, cgroup and file it had."""
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
    address = None
    if os.path.exists(os.path.join(node.dir, "node.json")):
        address = node.config()["address"]
    if address:
        run(["ip", "link", "del", veth_name(address)], check=False, capture_output=True)
    if node.netns in output(["ip", "netns", "list"]).split():
        run(["ip", "netns", "del", node.netns])
    for cgroup in node.cgroups:
        remove_cgroup(cgroup)
    shutil.rmtree(node.dir, ignore_errors=True)
    log("%s is down" % name)
    if not [other for other in known_nodes() if other != name]:
        # the last node: nothing of the lab stays on the host
        stop_mirror()
        stop_store()
        remove_bridge()


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


def remove_bridge() -> None:
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False).returncode == 0:
        run(["ip", "link", "del", BRIDGE])


def announce() -> None:
    with open(os.path.join(HERE, "LAB-NODE.txt")) as handle:
        for line in handle:
            log(line.rstrip())


def disk_report() -> None:
    sizes = {}
    for layer in ["base"] + sorted(STACKS) + ["wheels"]:
        path = os.path.join(STATE, layer)
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
    node_down = sub.add_parser("down", help="stop one node and remove what it made")
    node_down.add_argument("name")
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
    args = parser.parse_args(argv)
    if args.command in ("status", "exec"):
        return run_command(args)
    if args.command == "up":
        # the image first, outside lab_lock (minutes when it is built)
        with build_lock(args.stack):
            build(args.stack)
    with lab_lock():
        return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    if args.command == "build":
        stacks = sorted(set(args.stack or ["incident"]))
        with contextlib.ExitStack() as locks:
            for stack in stacks:
                locks.enter_context(build_lock(stack))
            build_stacks(stacks)
        disk_report()
    elif args.command == "up":
        up(args.name, args.profile, args.address, args.stack)
    elif args.command == "down":
        down(args.name)
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
