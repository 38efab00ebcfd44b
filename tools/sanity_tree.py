# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ansible-test sanity reads: a copy of the working tree's tracked (and new, not ignored) files, a git tree of its
own, at DIR (a path ending in ansible_collections/inferops/blackwell), so that sanity sees exactly what would be
committed. make sanity and tools/controllers.py make theirs with it.

  tools/sanity_tree.py DIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make(tree: str) -> str:
    """DIR, emptied first, holding the copy; returned."""
    if not tree.rstrip("/").endswith(os.path.join("ansible_collections", "inferops", "blackwell")):
        raise SystemExit("sanity_tree: %s must end in ansible_collections/inferops/blackwell (ansible-test reads the name from it)" % tree)
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    tar = tree.rstrip("/") + ".tar"
    with tarfile.open(tar, "w") as archive:
        for name in files:
            # a tracked file deleted in the working tree is not committed either
            if name and os.path.lexists(os.path.join(ROOT, name)):
                archive.add(os.path.join(ROOT, name), arcname=name, recursive=False)
    with tarfile.open(tar) as archive:
        # the extraction filter where this Python has it (3.11.4 and later; Debian 12's /usr/bin/python3 is 3.11.2)
        if hasattr(tarfile, "tar_filter"):
            archive.extractall(tree, filter="tar")
        else:
            archive.extractall(tree)  # our own archive of the checkout, made just above
    os.unlink(tar)
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True)
    return tree


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    make(os.path.abspath(sys.argv[1]))
