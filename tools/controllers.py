# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make test's other controllers: the ansible-core releases (requirements/controllers.txt) that need a newer Python
than this machine's (Debian 12: 3.11; ansible-core 2.20 and 2.21 need 3.12 or later, 2.22 3.13). They run from a
Debian 13 (trixie, Python 3.13) root filesystem made with debootstrap from Debian's archive, entered with chroot (no
daemon, the machine's network); each release in its own venv there, from PyPI.

  tools/controllers.py build             the root filesystem (once per machine and recipe) and each release's venv
  tools/controllers.py test [RELEASE...] under each release (default: the file's; another is a trial): ansible-test
                                         sanity with that release's empty ignore file, then the unit and artifact tests
  tools/controllers.py shell RELEASE     a shell in the root filesystem with that release's venv first on PATH
  tools/controllers.py molecule SCENARIO molecule test --scenario-name SCENARIO with the newest release (the file's last)
                                         as the controller: molecule, ansible-playbook and every play's localhost tasks
                                         run there; the lab's own tool (labctl) runs on this machine (see lab_python)

The root filesystem is the machine's (/var/cache/inferops-lab/controllers, like the lab's images); the working tree is
bound into it at its own path, so .build/import's link and the tests' paths hold inside.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import typing as t

import sanity_tree  # tools/sanity_tree.py, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("INFEROPS_CONTROLLERS_CACHE", "/var/cache/inferops-lab/controllers")
SUITE = "trixie"
PYTHON = "3.13"
MIRROR = os.environ.get("INFEROPS_LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# python3-venv for the venvs, git for ansible-test, shellcheck for its shellcheck test, gcc for the build store's unit
# tests (a real ninja and gcc), gpg and its agent for the key fingerprint's unit tests (they make keys), tar and
# ca-certificates for pip; openssh-client for molecule default's controller (its SSH to the lab nodes)
PACKAGES = ["python3", "python3-venv", "git", "shellcheck", "gcc", "libc6-dev", "gpg", "gpg-agent", "tar", "ca-certificates",
            "openssh-client"]
RELEASES_FILE = os.path.join(ROOT, "requirements", "controllers.txt")
TOOLS_FILE = os.path.join(ROOT, "requirements", "controller-tools.txt")
# molecule's HOME for a run under the newest release (tools/controllers.py molecule), at the same path on both sides
CONTROLLER_HOME = os.path.join(ROOT, ".build", "controller-home")
# the machine's CA bundle: package traffic may pass a proxy whose CA only the machine's bundle holds
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# A requirement of ansible-test's own test venvs that names an archive outside PyPI (this machine and CI reach PyPI
# only), and the PyPI release installed in its place (see pypi_only): ansible-core 2.22's pylint test takes dill from a
# GitHub archive of a commit, for Python 3.15; dill's newest release on PyPI supports the 3.13 these tests run on.
PYPI_STAND_INS = {"dill": "0.4.1"}


def log(message: str) -> None:
    print("[controllers] %s" % message, flush=True)


def releases() -> t.List[str]:
    """The ansible-core releases of requirements/controllers.txt, in its order."""
    found = []
    with open(RELEASES_FILE) as handle:
        for raw in handle:
            line = raw.split("#")[0].strip()
            if line:
                if not line.startswith("ansible-core=="):
                    raise SystemExit("controllers: %s: %r is not ansible-core==RELEASE" % (RELEASES_FILE, line))
                found.append(line.split("==", 1)[1])
    return found


def rootfs() -> str:
    return os.path.join(CACHE, SUITE)


def recipe() -> str:
    return hashlib.sha256(repr([SUITE, MIRROR, PACKAGES]).encode()).hexdigest()[:16]


def run(command: t.List[str], **kwargs: t.Any) -> None:
    log("$ " + " ".join(command))
    subprocess.run(command, check=True, **kwargs)


@contextlib.contextmanager
def mounted(root: str) -> t.Iterator[None]:
    """/proc, /dev, /sys, the machine's CA bundle and resolver, and the working tree at its own path, for the time of a
    command; unmounted again (lazily: a test's process still holding a file does not keep them)."""
    points: t.List[str] = []

    def bind(source: str, target: str, *extra: str) -> None:
        inside = os.path.join(root, target.lstrip("/"))
        if os.path.ismount(inside):
            # left by an interrupted run
            subprocess.run(["umount", "-l", inside], check=False)
        if os.path.isdir(source):
            os.makedirs(inside, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            if not os.path.exists(inside):
                open(inside, "a").close()
        run(["mount", *extra, source, inside])
        points.append(inside)
        if "--rbind" in extra:
            # a slave of the machine's tree: unmounting the copy never propagates to the machine's own /dev or /sys
            # submounts (where / is a shared mount, as under systemd)
            run(["mount", "--make-rslave", inside])

    try:
        bind("proc", "/proc", "-t", "proc")
        bind("/dev", "/dev", "--rbind")
        bind("/sys", "/sys", "--rbind")
        bind(CA_BUNDLE, CA_BUNDLE, "--bind", "-o", "ro")
        bind("/etc/resolv.conf", "/etc/resolv.conf", "--bind", "-o", "ro")
        bind(ROOT, ROOT, "--bind")
        # a worktree's git directory lies outside it (the tests list the tracked files)
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=ROOT, capture_output=True,
                                text=True, check=False).stdout.strip()
        if common and not common.startswith(ROOT + os.sep):
            bind(common, common, "--bind")
        yield
    finally:
        for point in reversed(points):
            subprocess.run(["umount", "-l", point], check=False)


def lab_python(root: str) -> str:
    """The command the scenarios run the lab's tool with (INFEROPS_LAB_PYTHON; where it is unset, ansible_playbook_python):
    this machine's venv Python, run on this machine's root (labctl boots nodes with systemd-nspawn, ip and mounts of this
    machine), entered from the root filesystem through this process's root (/proc/PID/root), in the same directory."""
    path = os.path.join(root, "usr", "local", "bin", "inferops-lab-python")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\n# the lab's tool runs on the machine, outside this root filesystem (tools/controllers.py)\n"
                     "exec chroot /proc/%d/root /usr/bin/env PATH=%s/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
                     "/bin/sh -c 'cd \"$0\" && exec \"$@\"' \"$PWD\" %s/.venv/bin/python \"$@\"\n" % (os.getpid(), ROOT, ROOT))
    os.chmod(path, 0o755)
    return "/usr/local/bin/inferops-lab-python"


def mounts_under(root: str) -> t.List[str]:
    """The mount points at or below root (from /proc/self/mounts)."""
    found = []
    with open("/proc/self/mounts") as handle:
        for line in handle:
            point = line.split()[1].replace("\\040", " ")
            if point == root or point.startswith(root + os.sep):
                found.append(point)
    return found


@contextlib.contextmanager
def one_at_a_time(what: str = "build") -> t.Iterator[None]:
    """One holder of what per machine at a time (a second one waits): build (making or rebuilding the root filesystem
    and the venvs) or mounts (into the root filesystem itself: test, shell; a molecule run mounts into an overlay of its
    own, and holds neither while it runs)."""
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".lock-" + what), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def inside(root: str, script: str, release: t.Optional[str] = None, passed: t.Optional[t.Dict[str, str]] = None) -> int:
    """script (bash) in the root filesystem, with the release's venv first on PATH, and passed's variables; its exit
    status."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if release:
        path = "/opt/ansible-core-%s/bin:%s" % (release, path)
    env = {"HOME": "/root", "PATH": path, "LANG": "C.UTF-8", "PIP_CERT": CA_BUNDLE, "SSL_CERT_FILE": CA_BUNDLE,
           "REQUESTS_CA_BUNDLE": CA_BUNDLE, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_DEFAULT_TIMEOUT": "180",
           "TERM": "dumb"}
    env.update(passed or {})
    return subprocess.run(["chroot", root, "/bin/bash", "-euo", "pipefail", "-c", script], env=env, check=False).returncode


def build(wanted: t.Optional[t.List[str]] = None) -> str:
    """The root filesystem and the venv of each release of requirements/controllers.txt (and of wanted: a trial of one
    the file does not list yet)."""
    root = rootfs()
    stamp = root + ".recipe"
    if not (os.path.isdir(root) and os.path.exists(stamp) and open(stamp).read().strip() == recipe()):
        # a molecule run's overlay has the root filesystem as its lower layer
        busy = mounts_under(root) + mounts_under(root + ".staging") + mounts_under(os.path.join(CACHE, "runs"))
        if busy:
            # never remove a tree something is mounted into (the working tree is, while a test runs)
            raise SystemExit("controllers: %s is to be rebuilt, but holds mounts (%s): end the run that made them, or "
                             "unmount them (umount -l)" % (root, ", ".join(busy)))
        staging = root + ".staging"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(CACHE, exist_ok=True)
        started = time.monotonic()
        log("building the Debian %s root filesystem (debootstrap, Python %s)" % (SUITE, PYTHON))
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), SUITE, staging, MIRROR])
        run(["chroot", staging, "apt-get", "clean"])
        shutil.rmtree(root, ignore_errors=True)
        os.rename(staging, root)
        with open(stamp, "w") as handle:
            handle.write(recipe() + "\n")
        log("root filesystem: %.0f s" % (time.monotonic() - started))
    with open(TOOLS_FILE, "rb") as handle:
        tools_digest = hashlib.sha256(handle.read()).hexdigest()[:16]
    wanted_releases = list(dict.fromkeys(releases() + (wanted or [])))
    pending = []
    for release in wanted_releases:
        marker = os.path.join(root, "opt", "ansible-core-%s" % release, ".installed")
        if not (os.path.exists(marker) and open(marker).read().strip() == tools_digest):
            pending.append(release)
    if pending:
        if mounts_under(os.path.join(CACHE, "runs")):
            raise SystemExit("controllers: the venvs of ansible-core %s are to be made, but a molecule run uses the root "
                             "filesystem (%s): let it end" % (", ".join(pending), ", ".join(mounts_under(os.path.join(CACHE, "runs")))))
        # mounting into the root filesystem itself: never while a test or a shell is in it
        with one_at_a_time("mounts"), mounted(root):
            for release in pending:
                venv = "/opt/ansible-core-%s" % release
                log("ansible-core %s: its venv (Python %s)" % (release, PYTHON))
                script = ("rm -rf {venv} && python3 -m venv {venv} && {venv}/bin/pip install --quiet ansible-core=={release} "
                          "-r {tools} && echo {digest} > {venv}/.installed")
                rc = inside(root, script.format(venv=venv, release=release, tools=TOOLS_FILE, digest=tools_digest))
                if rc != 0:
                    raise SystemExit("controllers: the venv of ansible-core %s failed (rc %d)" % (release, rc))
    for release in wanted_releases:
        get_pip(root, release)
        pypi_only(root, release)
    return root


def ansible_test_files(root: str, release: str, *parts: str) -> t.List[str]:
    """The files of the release's ansible-test (in its venv in the root filesystem) that match parts (a glob), sorted."""
    venv = os.path.join(root, "opt", "ansible-core-%s" % release)
    return sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "ansible_test", *parts)))


def pypi_only(root: str, release: str) -> None:
    """ansible-test's requirement files in the release's venv with each `NAME @ URL` line (an archive outside PyPI)
    replaced by PYPI_STAND_INS's release of NAME, the URL kept in a comment; a URL it has no stand-in for stops here,
    named, rather than in the middle of a sanity run."""
    for path in ansible_test_files(root, release, "_data", "requirements", "*.txt"):
        with open(path) as handle:
            lines = handle.read().splitlines(keepends=True)
        replaced = []
        for line in lines:
            found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*@\s*(\S+)", line)
            if found:
                name, url = found.group(1), found.group(2)
                if name.lower() not in PYPI_STAND_INS:
                    raise SystemExit("controllers: ansible-core %s's ansible-test requires %s from %s (%s), which only PyPI can serve "
                                     "here: name a PyPI release of it in tools/controllers.py's PYPI_STAND_INS" % (release, name, url, path))
                replaced.append("%s==%s  # PyPI's release in place of %s\n" % (name, PYPI_STAND_INS[name.lower()], url))
            else:
                replaced.append(line)
        if replaced != lines:
            stand_ins = ", ".join("%s==%s" % item for item in sorted(PYPI_STAND_INS.items()))
            log("ansible-core %s: %s takes %s from PyPI" % (release, os.path.basename(path), stand_ins))
            with open(path + ".tmp", "w") as handle:
                handle.writelines(replaced)
            os.replace(path + ".tmp", path)


def get_pip(root: str, release: str) -> None:
    """ansible-test's pip bootstrap, from PyPI's wheel (its download host is unreachable here): tools/get_pip_offline.py
    under the name ansible-test looks for, beside the wheel of the pip it asks for."""
    versions = []
    for path in ansible_test_files(root, release, "_internal", "python_requirements.py"):
        with open(path) as handle:
            versions += re.findall(r"\bpip='([0-9.]+)'", handle.read())
    if not versions:
        raise SystemExit("controllers: ansible-test of ansible-core %s names no pip release to bootstrap" % release)
    cache = os.path.join(root, "root", ".ansible", "test", "cache")
    os.makedirs(cache, exist_ok=True)
    for version in sorted(set(versions)):
        wheel = "pip-%s-py3-none-any.whl" % version
        if not os.path.exists(os.path.join(cache, wheel)):
            run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", cache, "pip==%s" % version])
        shutil.copy(os.path.join(ROOT, "tools", "get_pip_offline.py"), os.path.join(cache, "get_pip_%s.py" % version.replace(".", "_")))


def test(wanted: t.List[str]) -> int:
    known = releases()
    for release in wanted:
        if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", release):
            raise SystemExit("controllers: %r is not an ansible-core release (X.Y.Z)" % release)
        if release not in known:
            log("ansible-core %s is not in %s (%s): a trial" % (release, RELEASES_FILE, ", ".join(known)))
    with one_at_a_time():
        root = build(wanted)
    with one_at_a_time("mounts"):
        return test_in(root, wanted or known)


def test_in(root: str, wanted: t.List[str]) -> int:
    failed = []
    for release in wanted:
        started = time.monotonic()
        tree = sanity_tree.make(os.path.join(ROOT, ".build", "sanity-%s" % release, "ansible_collections", "inferops", "blackwell"))
        log("ansible-core %s (Python %s): sanity, unit and artifact tests" % (release, PYTHON))
        with mounted(root):
            # both, whatever the first gave: one run says all that fails under the release
            rc = inside(root, f"rc=0; (cd {tree} && ansible-test sanity --venv --python {PYTHON} --color no) || rc=1; "
                        f"cd {ROOT} && PYTHONPATH={ROOT}/.build/import python -m pytest -q -p no:cacheprovider tests/unit tests/artifact "
                        "|| rc=1; exit $rc", release)
        log("ansible-core %s: rc %d in %.0f s" % (release, rc, time.monotonic() - started))
        if rc != 0:
            failed.append(release)
    if failed:
        log("FAILED under ansible-core %s" % ", ".join(failed))
        return 1
    return 0


def molecule(root: str, scenario: str) -> int:
    """molecule test of one scenario, the newest release the controller. The root filesystem is the lower layer of an
    overlay of this run's own (so that make test's sanity run beside it mounts into another tree), removed at the end."""
    release = releases()[-1]
    run_dir = os.path.join(CACHE, "runs", "molecule-%d" % os.getpid())
    merged = os.path.join(run_dir, "merged")
    for sub in ("upper", "work", "merged"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o", "lowerdir=%s,upperdir=%s/upper,workdir=%s/work" % (root, run_dir, run_dir), merged])
    try:
        # what the scenario reads from the environment (the lab's state, the collection's path, the task costs' directory)
        passed = {name: value for name, value in os.environ.items() if name.startswith(("INFEROPS_", "ANSIBLE_", "MOLECULE_"))}
        passed["INFEROPS_LAB_PYTHON"] = lab_python(merged)
        # a home at the same path on both sides, made empty: what the scenario hands the lab's tool under it (the build
        # store's directory, which labctl store-server serves) is the directory the controller wrote
        home = CONTROLLER_HOME
        shutil.rmtree(home, ignore_errors=True)
        os.makedirs(home)
        passed["HOME"] = home
        log("molecule %s with ansible-core %s (Python %s) as the controller" % (scenario, release, PYTHON))
        with mounted(merged):
            return inside(merged, "cd %s && ansible --version | head -n 1 && exec molecule test --scenario-name %s" % (ROOT, scenario),
                          release, passed)
    finally:
        subprocess.run(["umount", "-l", merged], check=False)
        left = mounts_under(run_dir)
        if left:
            # never remove a tree something is still mounted into (the working tree is bound there while a run lasts)
            log("left %s in place: it still holds mounts (%s); umount -l them, then remove it" % (run_dir, ", ".join(left)))
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


def shell(release: str) -> int:
    with one_at_a_time():
        root = build([release])
    with one_at_a_time("mounts"), mounted(root):
        return inside(root, "cd %s && exec bash -i" % ROOT, release)


def main(argv: t.List[str]) -> int:
    if os.geteuid() != 0:
        raise SystemExit("controllers: needs root (debootstrap, chroot, mount)")
    if not argv or argv[0] not in ("build", "test", "shell", "molecule"):
        print(__doc__)
        return 2
    if argv[0] == "molecule":
        if len(argv) != 2:
            raise SystemExit("controllers: molecule SCENARIO")
        with one_at_a_time():
            root = build()
        return molecule(root, argv[1])
    if argv[0] == "build":
        with one_at_a_time():
            build()
        return 0
    if argv[0] == "shell":
        return shell(argv[1])
    return test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
