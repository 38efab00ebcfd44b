# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a fetched build into the controller's build store, one writer at a time.

Run by the jit_cache role on the controller (ansible.builtin.script, the controller's Python):
    inferops_store_put.py INCOMING ARTIFACT SHA256
Checks INCOMING against SHA256 (the export's own checksum), then, holding a lock on the store's .lock file, puts
ARTIFACT and ARTIFACT.sha256 in place, each by a rename (a reader sees the old file or the new one, never half of
one). Two writers of one fingerprint (two plays, AWX slices sharing a volume) follow each other: the archive and
the checksum left in the store are always one writer's pair. Prints what it did as JSON.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile
import typing as t


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def put(path: str, data_from: t.Optional[str], text: t.Optional[str]) -> None:
    """Write a file beside its final name, then rename it there (0644)."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".put-")
    try:
        with os.fdopen(handle, "wb") as out:
            if data_from is not None:
                with open(data_from, "rb") as source:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        out.write(block)
            else:
                out.write((text or "").encode())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def main(argv: t.List[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: inferops_store_put.py INCOMING ARTIFACT SHA256\n")
        return 2
    incoming, artifact, expected = argv
    actual = sha256_file(incoming)
    if actual != expected:
        print(json.dumps({"error": "the fetched build's sha256 is %s, the export said %s: not put in the store" % (actual, expected)}))
        return 1
    with open(os.path.join(os.path.dirname(artifact), ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        put(artifact, incoming, None)
        put(artifact + ".sha256", None, expected + "\n")
    print(json.dumps({"artifact": artifact, "sha256": expected}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
