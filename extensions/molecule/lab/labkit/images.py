# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TOOLING: the lab's cached layers: the debootstrap base and each stack's image (the incident state, the
current stack)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import os
import shutil
import sys
import time
import typing as t

from labkit.common import (
    BASE_PACKAGES,
    CUDA_128,
    CUDA_128_WHEELS,
    DEBIAN_MIRROR,
    HERE,
    IMAGE_STEPS_VERSION,
    IMAGES,
    ROOT,
    SGLANG_VENV,
    STACKS,
    STATE,
    SUITE,
    log,
    mount_overlay,
    output,
    recipe_hash,
    record_measure,
    require_root,
    run,
    ssh_key,
    stamp_matches,
    stamp_value,
    unmount_all,
    write_stamp,
)
from labkit.mirror import mirror_wheels

sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
import toolkit  # the collection's own wheel layout code (module_utils/toolkit.py), reused by the lab

# --- layer 1: base --------------------------------------------------------------------------------------


def build_base() -> str:
    base = os.path.join(IMAGES, "base")
    stamp = os.path.join(IMAGES, "base.recipe")
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
    wheels = os.path.join(IMAGES, "wheels")
    stamp = os.path.join(IMAGES, "wheels.recipe")
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
    layer = os.path.join(IMAGES, stack)
    stamp = os.path.join(IMAGES, stack + ".recipe")
    inputs = [os.path.join(HERE, part) for part in ("cuda128", "gpu", "torch_gpus", "gpu_only", "sglang_standin", "models",
                                                    "LAB-NODE.txt")]
    inputs.append(os.path.join(ROOT, "plugins", "module_utils", "toolkit.py"))
    recipe = recipe_hash(inputs + [STACKS[stack][0]],
                         [IMAGE_STEPS_VERSION, SGLANG_VENV, stamp_value(os.path.join(IMAGES, "base.recipe"))])
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
        # SIMULATED driver library for the stand-in's process: the driver API of the node's cuda.h, every call failing
        # with no device (gpu/libcuda_sim.py)
        os.makedirs(merged + "/usr/lib/inferops-lab", exist_ok=True)
        preprocessed = output(["chroot", merged, "gcc", "-E", "-P", CUDA_128 + "/include/cuda.h"])
        sys.path.insert(0, os.path.join(HERE, "gpu"))
        import libcuda_sim  # noqa: PLC0415 -- LAB tooling beside this file

        with open(merged + "/tmp/libcuda_sim.c", "w") as handle:
            handle.write(libcuda_sim.source(preprocessed))
        chroot(merged, ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", "/usr/lib/inferops-lab/libcuda.so.1",
                        "/tmp/libcuda_sim.c"])
        os.unlink(merged + "/tmp/libcuda_sim.c")
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
    os.makedirs(IMAGES, exist_ok=True)
    base = build_base()
    image = build_stack_image(base, fetch_wheels(), stack)
    ssh_key()
    return base, image


def build_stacks(stacks: t.List[str]) -> None:
    """The base layer and the wheelhouse once, then the stacks' layers side by side (each one pip install, mostly one
    core and the disk)."""
    require_root()
    os.makedirs(STATE, exist_ok=True)
    os.makedirs(IMAGES, exist_ok=True)
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
    os.makedirs(IMAGES, exist_ok=True)
    with open(os.path.join(IMAGES, "build-%s.lock" % stack), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
