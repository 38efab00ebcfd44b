# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TEST EQUIPMENT (never installed by a role): a cache of the code that a lab node's Python compiles from zip files.

Every Ansible module run sends the module and its module_utils as a zip that the node's Python imports with zipimport,
which compiles each source file from the zip (it has nowhere to keep a .pyc): the same few hundred kilobytes of Python
compiled again for each of the thousands of module runs of a test run, on cores every lab node shares. labctl writes a
.pth beside this file into each node's system site-packages, so that the node's /usr/bin/python3 calls install() at
start-up; install() wraps zipimport's compile step: code compiled from the same bytes, by the same Python (cache tag,
magic number, optimisation level), is read from the machine's directory instead of compiled again. What runs is the code
that Python compiled from that source: only the file name that tracebacks show is set to the zip it came from this
time. The SGLang venv does not read the system's site-packages: nothing of SGLang, FlashInfer or torch goes through it.

Off (every source compiled, as a fleet node does): INFEROPS_LAB_MODULE_CODE_CACHE_OFF set, or the file
/etc/inferops-lab/module-code-cache-off (make bench: the production cost), or no cache directory.
An entry is loaded only when root or the running user wrote it (the directory is shared by every user of the node).
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys
import types
import typing as t
import zipimport

DIRECTORY = os.environ.get("INFEROPS_LAB_MODULE_CODE_CACHE", "/var/cache/lab-module-code")
OFF_FILE = "/etc/inferops-lab/module-code-cache-off"
# what this process did: entries read, sources compiled, entries written
stats = {"hits": 0, "compiled": 0, "stored": 0}
# code already handed out in this process, by source key (zipimport may compile one file twice)
_SEEN: t.Dict[str, types.CodeType] = {}


def renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """code and every code object nested in it, with filename as the file they came from."""
    consts = tuple(renamed(const, filename) if isinstance(const, types.CodeType) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def key(source: bytes) -> str:
    """What the compiled code depends on: the source's bytes and the Python that compiles it."""
    digest = hashlib.sha256(source)
    python = (str(sys.implementation.cache_tag).encode(), importlib.util.MAGIC_NUMBER, sys.flags.optimize)
    digest.update(b"\0%s\0%s\0%d" % python)
    return digest.hexdigest()


def load(path: str) -> t.Optional[types.CodeType]:
    """The entry at path, when root or this user wrote it; else None."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_uid not in (0, os.getuid()):
                return None
            code = marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None


def store(path: str, code: types.CodeType) -> None:
    """code at path, whole or not at all; a directory this user cannot write is left as it is."""
    partial = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(partial, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(partial, path)
        stats["stored"] += 1
    except OSError:
        try:
            os.unlink(partial)
        except OSError:
            pass


def install() -> bool:
    """Wrap zipimport's compile step (once per process); False when the cache is off."""
    if os.environ.get("INFEROPS_LAB_MODULE_CODE_CACHE_OFF") or os.path.exists(OFF_FILE) or not os.path.isdir(DIRECTORY):
        return False
    original = getattr(zipimport, "_compile_source", None)
    if original is None or getattr(original, "lab_module_code_cache", False):
        return original is not None

    def compile_source(pathname: str, source: bytes) -> types.CodeType:
        wanted = key(source)
        code = _SEEN.get(wanted)
        if code is None:
            path = os.path.join(DIRECTORY, wanted + ".code")
            code = load(path)
            if code is None:
                code = original(pathname, source)
                stats["compiled"] += 1
                store(path, code)
            else:
                stats["hits"] += 1
            _SEEN[wanted] = code
        return code if code.co_filename == pathname else renamed(code, pathname)

    compile_source.lab_module_code_cache = True  # type: ignore[attr-defined]
    zipimport._compile_source = compile_source  # type: ignore[attr-defined]  # pylint: disable=protected-access
    return True
