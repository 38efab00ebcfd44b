# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The build store's artifacts (inferops-flashinfer export / import), with a real ninja and a real compiler.

A module here is built the way FlashInfer builds one: ninja -C <workspace>/cached_ops/<uri> -f build.ninja, with gcc's
depfiles in ninja's deps log, sources in <workspace>/generated/<uri> and headers outside the workspace (FlashInfer's
in the venv). The importing node is the same workspace after a wipe, with its headers installed later than the build."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import typing as t

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))

import inferops_flashinfer as tool  # noqa: E402 -- plugins/module_utils/inferops_flashinfer.py

sys.path.insert(0, os.path.join(ROOT, "roles", "inferops", "files"))
import pytest  # noqa: E402
from inferops_flashinfer_cli import run  # noqa: E402 -- the command's runner (a subprocess), as on the node

NINJA = shutil.which("ninja", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
pytestmark = pytest.mark.skipif(NINJA is None or shutil.which("gcc") is None, reason="needs ninja and gcc (make venv, make debs)")
URI = "sampling"


def ninja(build_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NINJA), "-C", build_dir, "-f", os.path.join(build_dir, "build.ninja"), *args],
                          capture_output=True, text=True, check=False)


@pytest.fixture(name="node")
def fixture_node(tmp_path: t.Any) -> t.Dict[str, t.Any]:
    """A workspace with one module built by ninja, the plan view of it, and the tool's configuration."""
    workspace = tmp_path / "workspace"
    include = tmp_path / "venv-include"
    include.mkdir()
    (include / "kernel.h").write_text("#define VALUE 7\n")
    generated = workspace / "generated" / URI
    generated.mkdir(parents=True)
    (generated / "kernel.c").write_text('#include "kernel.h"\nint value(void) { return VALUE; }\n')
    build_dir = workspace / "cached_ops" / URI
    build_dir.mkdir(parents=True)
    (build_dir / "build.ninja").write_text(
        "rule cc\n  command = gcc -fPIC -I%s -MD -MF $out.d -c $in -o $out\n  depfile = $out.d\n  deps = gcc\n"
        "rule link\n  command = gcc -shared $in -o $out\n"
        "build %s/kernel.o: cc %s/kernel.c\nbuild %s/%s.so: link %s/kernel.o\n"
        % (include, build_dir, generated, build_dir, URI, build_dir))
    assert ninja(str(build_dir)).returncode == 0
    (workspace / tool.STAMP).write_text(json.dumps({"flashinfer_version": "0.6.18"}))
    env_file = tmp_path / "cuda.env"
    env_file.write_text("PATH='%s:/usr/bin:/bin'\n" % os.path.dirname(str(NINJA)))
    fields = {"format": 1, "modules": [URI], "workspace": str(workspace)}
    view = {"workspace": str(workspace), "fingerprint": "f" * 32, "fingerprint_fields": fields, "stamp_matches": True,
            "modules": [{"name": URI, "uri": URI, "compiled": True}]}
    return {"view": view, "config": {"env_file": str(env_file)}, "build_dir": str(build_dir), "include": include,
            "workspace": workspace, "artifact": str(tmp_path / "artifact.tar.gz")}


def wipe(node: t.Dict[str, t.Any]) -> None:
    """The importing node: no module yet, and FlashInfer's headers installed after the build (newer than its objects)."""
    time.sleep(0.01)
    for sub in ("cached_ops", "generated"):
        shutil.rmtree(node["workspace"] / sub)
    os.unlink(node["workspace"] / tool.STAMP)
    (node["include"] / "kernel.h").touch()


def test_an_imported_build_is_one_ninja_would_not_rebuild(node: t.Dict[str, t.Any]) -> None:
    exported = tool.export_artifact(node["view"], node["artifact"])
    # the warm-up record; build.ninja, .ninja_log, .ninja_deps, kernel.o, sampling.so; generated/sampling/kernel.c
    assert exported["files"] == 7
    wipe(node)
    result = tool.import_artifact(run, node["config"], node["view"], node["artifact"], exported["sha256"])
    assert result["imported"] == 7
    dry = ninja(node["build_dir"], "-n", "-d", "explain")
    assert "no work to do" in dry.stdout, dry.stderr
    assert (node["workspace"] / tool.STAMP).is_file()


def test_without_restating_ninja_would_rebuild_the_import(node: t.Dict[str, t.Any]) -> None:
    """The control for the test above: the same files put back as they were built are stale to ninja on this node."""
    exported = tool.export_artifact(node["view"], node["artifact"])
    wipe(node)
    with tarfile.open(node["artifact"]) as archive:
        # the "data" filter where this Python has it (3.11.4 and later; Debian 12's python3 is 3.11.2): the archive is the
        # test's own export either way
        archive.extractall(node["workspace"], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))  # type: ignore[arg-type]
    dry = ninja(node["build_dir"], "-n", "-d", "explain")
    assert "no work to do" not in dry.stdout and "kernel.o is dirty" in dry.stderr
    assert exported["sha256"]


def test_a_corrupted_artifact_is_refused_and_leaves_nothing(node: t.Dict[str, t.Any]) -> None:
    exported = tool.export_artifact(node["view"], node["artifact"])
    wipe(node)
    with open(node["artifact"], "r+b") as handle:
        handle.seek(100)
        handle.write(b"\0\0\0\0")
    with pytest.raises(ValueError, match="checksum mismatch"):
        tool.import_artifact(run, node["config"], node["view"], node["artifact"], exported["sha256"])
    assert not (node["workspace"] / "cached_ops").exists()


def test_another_fingerprint_is_refused(node: t.Dict[str, t.Any]) -> None:
    exported = tool.export_artifact(node["view"], node["artifact"])
    wipe(node)
    with pytest.raises(ValueError, match=r"fingerprint f+ is not this node.s 0+"):
        tool.import_artifact(run, node["config"], dict(node["view"], fingerprint="0" * 32), node["artifact"], exported["sha256"])
    assert not (node["workspace"] / "cached_ops").exists()


def test_a_member_outside_the_modules_is_refused(node: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    """A file the manifest lists, matching its checksum, but outside this node's module directories."""
    blob = b"#!/bin/sh\n"
    manifest = json.dumps({"format": 1, "fingerprint": "f" * 32, "files": {"../../.bashrc": {
        "sha256": __import__("hashlib").sha256(blob).hexdigest(), "size": len(blob)}}}).encode()
    with tarfile.open(node["artifact"], "w:gz") as archive:
        for name, data in (("manifest.json", manifest), ("../../.bashrc", blob)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="unexpected member"):
        tool.import_artifact(run, node["config"], node["view"], node["artifact"], tool.digest(node["artifact"]))
    assert not (tmp_path / ".bashrc").exists()


def test_nothing_is_exported_before_a_warm_up(node: t.Dict[str, t.Any]) -> None:
    view = dict(node["view"], modules=[{"name": URI, "uri": URI, "compiled": False}])
    with pytest.raises(ValueError, match="nothing to export"):
        tool.export_artifact(view, node["artifact"])
    assert not os.path.exists(node["artifact"])


def test_the_deps_log_retiming_changes_only_the_mtimes(node: t.Dict[str, t.Any]) -> None:
    deps = os.path.join(node["build_dir"], ".ninja_deps")
    before = open(deps, "rb").read()
    assert tool.retime_deps_log(deps, 0x0123456789ABCDEF) == 1
    after = open(deps, "rb").read()
    assert len(after) == len(before) and after != before
    assert (0x0123456789ABCDEF).to_bytes(8, "little") in after
    with pytest.raises(ValueError, match="not a ninja deps log"):
        tool.retime_deps_log(os.path.join(node["build_dir"], "build.ninja"), 0)
