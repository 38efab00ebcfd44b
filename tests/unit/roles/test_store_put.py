# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller-side put of the build store (roles/jit_cache/files/inferops_store_put.py)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time
import typing as t

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "jit_cache", "files", "inferops_store_put.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, check=False)


def test_puts_the_archive_and_its_checksum(tmp_path: t.Any) -> None:
    incoming = tmp_path / "in.tar.gz"
    incoming.write_bytes(b"build one")
    digest = hashlib.sha256(b"build one").hexdigest()
    artifact = tmp_path / "store" / "f.tar.gz"
    artifact.parent.mkdir()
    assert run(str(incoming), str(artifact), digest).returncode == 0
    assert artifact.read_bytes() == b"build one"
    assert (tmp_path / "store" / "f.tar.gz.sha256").read_text() == digest + "\n"
    assert oct(artifact.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(tmp_path / "store")) == [".lock", "f.tar.gz", "f.tar.gz.sha256"]


def test_refuses_a_fetched_file_that_is_not_the_export(tmp_path: t.Any) -> None:
    incoming = tmp_path / "in.tar.gz"
    incoming.write_bytes(b"truncated")
    (tmp_path / "store").mkdir()
    done = run(str(incoming), str(tmp_path / "store" / "f.tar.gz"), hashlib.sha256(b"build one").hexdigest())
    assert done.returncode == 1 and "not put in the store" in done.stdout
    assert os.listdir(tmp_path / "store") == []


def test_a_writer_waits_for_the_store_s_lock_before_writing_anything(tmp_path: t.Any) -> None:
    """Two writers of one fingerprint follow each other, so the archive and checksum left are one writer's pair."""
    store = tmp_path / "store"
    store.mkdir()
    incoming = tmp_path / "in.tar.gz"
    incoming.write_bytes(b"build two")
    with open(store / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another writer is in the middle of its put
        writer = subprocess.Popen([sys.executable, SCRIPT, str(incoming), str(store / "f.tar.gz"),
                                   hashlib.sha256(b"build two").hexdigest()], stdout=subprocess.DEVNULL)
        time.sleep(1.0)
        assert writer.poll() is None
        assert sorted(os.listdir(store)) == [".lock"]
    assert writer.wait(timeout=30) == 0
    assert (store / "f.tar.gz").read_bytes() == b"build two"
