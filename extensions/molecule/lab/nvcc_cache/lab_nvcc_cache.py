# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TEST EQUIPMENT -- a compile cache for nvcc, used as FlashInfer's FLASHINFER_NVCC_LAUNCHER on lab nodes.

Not simulation: every object it hands out was produced by the real nvcc 13.0 from the same source, the
same headers and the same flags; ninja, the link step and FlashInfer's JIT logic run as always. It exists
so the test suite pays for each distinct compile once (CI has 2 cores; a module takes minutes), the way
ccache's direct mode would -- ccache 4.7 (Debian 12) cannot cache nvcc called with
--generate-dependencies-with-compile, which FlashInfer's build files use.

Key: nvcc's --version, the flags with the toolkit root and the output paths replaced by placeholders,
and the source's sha256. An entry also records every header the real compile read (from its -MF
dependency file) with its sha256; a hit needs all of them unchanged. Two toolkits of the same release
at different paths (a CUDA_HOME change) share entries when their headers are identical.

Cache: /var/cache/lab-nvcc-cache (the lab mounts the machine's /var/cache/inferops-lab/nvcc-cache there). Without it, while
/etc/inferops-lab/nvcc-cache-off exists, or for a command line it does not understand, it runs nvcc as
given. Each call it sees appends hit, miss or off (and the node's name) to its log. Calls with the same key wait for each other
(a lock per key): scenarios run side by side, and two nodes compiling the same source compile it once.

A real compile also takes one of the machine's job slots (CACHE/jobs holds their count, the machine's cores, written by
labctl), shared by every node of every scenario: ninja on each node starts as many nvcc jobs as it likes, and at most
that many compile at once on the machine (four nodes of two ninjas each would otherwise run eight on two cores).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import typing as t

CACHE = os.environ.get("LAB_NVCC_CACHE_DIR", "/var/cache/lab-nvcc-cache")
FORMAT = 2
# While this file exists every call compiles for real (extensions/molecule/lab/damage.yml needs a build that takes long enough
# to be killed halfway).
OFF = os.environ.get("LAB_NVCC_CACHE_OFF", "/etc/inferops-lab/nvcc-cache-off")
# While this file exists every call fails: a tripwire for a test that must compile nothing at run time (loading a
# warmed module runs ninja, which calls no compiler; FLASHINFER_DISABLE_JIT cannot serve, see inferops_lab_sglang.py).
DENY = os.environ.get("LAB_NVCC_DENY", "/etc/inferops-lab/nvcc-deny")


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def option(argv: t.List[str], name: str) -> t.Optional[str]:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def dependencies(text: str) -> t.List[str]:
    """Paths listed in a make-style dependency file (after the first colon)."""
    body = text.replace("\\\n", " ")
    _target, _colon, deps = body.partition(": ")
    return [path for path in deps.split() if path]


def write_atomic(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), mode=0o777, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path))
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.chmod(temporary, 0o666)
    os.replace(temporary, path)


def log(entry: t.Dict[str, t.Any]) -> None:
    """One line per nvcc call: hit, miss or off (compiled for real, cache switched off); make bench counts them."""
    entry.update(host=socket.gethostname(), time=round(time.time(), 2))
    with open(os.path.join(CACHE, "log.jsonl"), "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def job_slots() -> int:
    try:
        with open(os.path.join(CACHE, "jobs")) as handle:
            return max(1, int(handle.read().strip()))
    except (OSError, ValueError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def job_slot() -> t.Iterator[None]:
    """One of the machine's compile slots, for the length of one real compile (a hit takes none); the kernel frees a
    slot whose holder is killed."""
    os.makedirs(os.path.join(CACHE, "slots"), mode=0o777, exist_ok=True)
    slots = job_slots()
    while True:
        usable = 0
        for number in range(slots):
            try:
                handle = open(os.path.join(CACHE, "slots", str(number)), "a")
            except OSError:  # a slot file this user cannot open: not one of its slots
                continue
            usable += 1
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        if not usable:  # no slot can be taken at all: compile unbounded rather than never
            yield
            return
        time.sleep(0.25)


def compile_now(argv: t.List[str], cost: t.Optional[t.Dict[str, float]] = None) -> int:
    """One real compile in one of the machine's slots; cost gets its wait for the slot and the CPU seconds of nvcc and
    everything it ran (cicc, ptxas, the host compiler: reaped by nvcc, so in nvcc's own children's usage)."""
    asked = time.monotonic()
    with job_slot():
        began = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        rc = subprocess.call(argv)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cost is not None:
        cost["slot_wait"] = round(began - asked, 2)
        cost["cpu"] = round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2)
    return rc


@contextlib.contextmanager
def key_lock(key: str) -> t.Iterator[None]:
    """Held while one call looks up, compiles and stores a key; the kernel releases it if the call is killed."""
    os.makedirs(os.path.join(CACHE, "locks"), mode=0o777, exist_ok=True)
    with open(os.path.join(CACHE, "locks", key), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def main(argv: t.List[str]) -> int:
    nvcc = argv[0] if argv else ""
    if os.path.exists(DENY):
        sys.stderr.write("LAB TRIPWIRE: a compile at run time was refused (%s exists): %s\n" % (DENY, " ".join(argv)))
        return 1
    out, dep, src = option(argv, "-o"), option(argv, "-MF"), option(argv, "-c")
    if not os.path.isdir(CACHE):
        return subprocess.call(argv)
    # entries, locks and slots are shared by nodes whose service users have different uids
    os.umask(0)
    if not nvcc.endswith("/nvcc") or not (out and dep and src):
        return compile_now(argv)
    if os.path.exists(OFF):
        started = time.monotonic()
        rc = compile_now(argv)
        log({"result": "off", "source": src, "rc": rc, "seconds": round(time.monotonic() - started, 2)})
        return rc
    root = os.path.dirname(os.path.dirname(nvcc))
    # the source's own directory too: FlashInfer generates each module's sources and its config header
    # (batch_decode_config.inc, ...) into a directory of the module's own, and two modules' .cu files are often the same
    # text that includes a different header beside it -- a header recorded by its absolute path would let the second
    # module hit the first one's object
    placeholders = [(out + ".d", "@DEP@"), (dep, "@DEP@"), (out, "@OUT@"), (src, "@SRC@"),
                    (os.path.dirname(src) + os.sep, "@SRCDIR@" + os.sep), (root, "@CUDA@")]

    # the longest path first: the source's directory may hold the toolkit (or the other way round)
    placeholders.sort(key=lambda pair: -len(pair[0]))

    def normal(text: str) -> str:
        for real, mark in placeholders:
            text = text.replace(real, mark)
        return text

    def real(text: str) -> str:
        for path, mark in placeholders:
            text = text.replace(mark, path)
        return text

    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    # FORMAT: entries recorded before the source directory was a placeholder are not looked up
    key = hashlib.sha256(json.dumps([FORMAT, version, [normal(arg) for arg in argv[1:]], sha256_file(src)]).encode()).hexdigest()
    with key_lock(key):
        manifest_path = os.path.join(CACHE, "manifests", key + ".json")
        started = time.monotonic()
        try:
            with open(manifest_path) as handle:
                entries = json.load(handle)
        except (OSError, ValueError):
            entries = []
        for entry in entries:
            try:
                if all(sha256_file(real(path)) == digest for path, digest in entry["deps"].items()):
                    with open(os.path.join(CACHE, "objects", entry["object"]), "rb") as handle:
                        write_atomic(out, handle.read())
                    write_atomic(dep, real(entry["depfile"]).encode())
                    log({"result": "hit", "source": src, "seconds": round(time.monotonic() - started, 2)})
                    return 0
            except OSError:
                continue
        cost: t.Dict[str, float] = {}
        rc = compile_now(argv, cost)
        if rc != 0:
            return rc
        with open(dep) as handle:
            depfile = handle.read()
        deps = {normal(path): sha256_file(path) for path in dependencies(depfile) if os.path.isfile(path)}
        object_sum = sha256_file(out)
        with open(out, "rb") as handle:
            write_atomic(os.path.join(CACHE, "objects", object_sum), handle.read())
        entries.append({"deps": deps, "object": object_sum, "depfile": normal(depfile)})
        write_atomic(manifest_path, json.dumps(entries).encode())
        log(dict(cost, result="miss", source=src, seconds=round(time.monotonic() - started, 2)))
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
