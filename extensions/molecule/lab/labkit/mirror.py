# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TOOLING: the lab mirror (a wheelhouse and a signed apt repository) and the HTTP build store, served to the
nodes from the bridge address."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import typing as t

from labkit.common import (
    GATEWAY,
    HERE,
    IMAGES,
    ROOT,
    STATE,
    ensure_bridge,
    log,
    recipe_hash,
    record_measure,
    run,
    server_pid,
    stamp_matches,
    stop_server,
    write_stamp,
)

sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))
import toolkit

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


# A FlashInfer release for the flashinfer role's upgrade strategy to install (0.6.18 -> 0.6.18.post1, same detection), and
# the kernel set of the cubin stack's FlashInfer (flashinfer_cubin: true installs it from here by hash; 447 MB).
MIRROR_EXTRA_WHEELS = ["flashinfer-python==0.6.18.post1", "flashinfer-cubin==0.6.12"]


def mirror_wheels() -> str:
    """CUDA 13.0 wheels and an upgrade FlashInfer for the nodes' pip (a flat --find-links directory, as an air-gapped
    wheelhouse): downloaded once per machine (beside the images), linked into this clone's mirror."""
    directory = os.path.join(MIRROR, "wheels")
    pins = cuda_toolkit_pins() + MIRROR_EXTRA_WHEELS
    recipe = recipe_hash([], pins)
    if stamp_matches(os.path.join(directory, ".recipe"), recipe):
        return directory
    machine = os.path.join(IMAGES, "mirror-wheels")
    if not stamp_matches(os.path.join(machine, ".recipe"), recipe):
        shutil.rmtree(machine, ignore_errors=True)
        os.makedirs(machine)
        log("downloading the CUDA 13.0 wheels for the lab mirror (once per machine, into %s)" % machine)
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--only-binary=:all:", "--dest", machine] + pins)
        write_stamp(os.path.join(machine, ".recipe"), recipe)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for name in os.listdir(machine):
        if name.endswith(".whl"):
            try:
                os.link(os.path.join(machine, name), os.path.join(directory, name))
            except OSError:  # another file system
                shutil.copy(os.path.join(machine, name), os.path.join(directory, name))
    write_stamp(os.path.join(directory, ".recipe"), recipe)
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
