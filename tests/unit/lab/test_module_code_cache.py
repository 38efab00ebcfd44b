# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's module code cache (extensions/molecule/lab/module_code_cache): a second zip with the same source compiles
nothing and its tracebacks name that zip; a changed source compiles; off, nothing is kept; another user's entry is not
loaded; a cache this user cannot write changes nothing; what labctl installs in a node is what its Python's site loads.
Each case runs a new interpreter that imports from a real zip through the real zipimport."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import typing as t
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LAB = os.path.join(ROOT, "extensions", "molecule", "lab")
CACHE_DIR = os.path.join(LAB, "module_code_cache")
# imports labmod from the zip in argv[1] and reports what the cache did and the file a traceback names
CHILD = r"""
import json, os, sys, traceback
import lab_module_code_cache
installed = lab_module_code_cache.install()
if os.environ.get("AS_NOBODY"):
    os.setgid(65534); os.setuid(65534)
sys.path.insert(0, sys.argv[1])
import labmod
try:
    labmod.fail()
except RuntimeError:
    where = traceback.extract_tb(sys.exc_info()[2])[-1].filename
print(json.dumps({"installed": installed, "stats": lab_module_code_cache.stats, "value": labmod.VALUE, "where": where}))
"""


def make_zip(path: str, value: str) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("labmod.py", "VALUE = %r\n\ndef fail():\n    raise RuntimeError('from the zip')\n" % value)
    return path


def child(tmp: t.Any, archive: str, cache: str, **env: str) -> t.Dict[str, t.Any]:
    environ = {name: value for name, value in os.environ.items() if name != "INFEROPS_LAB_MODULE_CODE_CACHE_OFF"}
    environ.update(PYTHONPATH=CACHE_DIR, INFEROPS_LAB_MODULE_CODE_CACHE=cache, **env)
    done = subprocess.run([sys.executable, "-c", CHILD, archive], env=environ, capture_output=True, text=True, check=True,
                          cwd=str(tmp))
    return json.loads(done.stdout)


def lab_nodes() -> t.Any:
    """labctl's node code (extensions/molecule/lab/labkit/nodes.py)."""
    sys.path.insert(0, LAB)
    try:
        from labkit import nodes  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(LAB)
    return nodes


def node_root(tmp_path: t.Any) -> t.Any:
    """A node's root filesystem as far as labctl's install reads it: one Python 3.11."""
    root = tmp_path / "node"
    (root / "usr" / "lib" / "python3.11").mkdir(parents=True)
    return root


@pytest.fixture(name="cache")
def fixture_cache(tmp_path: t.Any) -> str:
    path = tmp_path / "cache"
    path.mkdir()
    path.chmod(0o1777)
    return str(path)


def test_second_zip_compiles_nothing_and_names_itself(tmp_path: t.Any, cache: str) -> None:
    first = child(tmp_path, make_zip(str(tmp_path / "a.zip"), "one"), cache)
    assert first["installed"] and first["stats"] == {"hits": 0, "compiled": 1, "stored": 1}
    second_zip = make_zip(str(tmp_path / "b.zip"), "one")
    second = child(tmp_path, second_zip, cache)
    assert second["stats"] == {"hits": 1, "compiled": 0, "stored": 0}
    assert second["value"] == "one"
    # the code ran from the cache, and says where it was loaded from this time
    assert second["where"] == os.path.join(second_zip, "labmod.py")


def test_changed_source_compiles(tmp_path: t.Any, cache: str) -> None:
    child(tmp_path, make_zip(str(tmp_path / "a.zip"), "one"), cache)
    changed = child(tmp_path, make_zip(str(tmp_path / "b.zip"), "two"), cache)
    assert changed["stats"]["compiled"] == 1 and changed["stats"]["hits"] == 0
    assert changed["value"] == "two"
    assert len([name for name in os.listdir(cache) if name.endswith(".code")]) == 2


def test_off_keeps_nothing(tmp_path: t.Any, cache: str) -> None:
    off = child(tmp_path, make_zip(str(tmp_path / "a.zip"), "one"), cache, INFEROPS_LAB_MODULE_CODE_CACHE_OFF="1")
    assert not off["installed"] and off["value"] == "one"
    missing = child(tmp_path, make_zip(str(tmp_path / "b.zip"), "one"), str(tmp_path / "no-such-directory"))
    assert not missing["installed"]
    assert os.listdir(cache) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: an entry of another user, and a user that cannot write")
def test_another_users_entry_is_not_loaded(tmp_path: t.Any, cache: str) -> None:
    child(tmp_path, make_zip(str(tmp_path / "a.zip"), "one"), cache)
    (entry,) = os.listdir(cache)
    os.chown(os.path.join(cache, entry), 65534, 65534)
    again = child(tmp_path, make_zip(str(tmp_path / "b.zip"), "one"), cache)
    assert again["stats"]["hits"] == 0 and again["stats"]["compiled"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the child as nobody")
def test_unwritable_cache_still_imports() -> None:
    # the zip where nobody can read it (pytest's own directories are root's alone)
    base = tempfile.mkdtemp(dir="/var/tmp")
    try:
        os.chmod(base, 0o755)
        cache = os.path.join(base, "root-only")
        os.mkdir(cache, 0o755)
        archive = make_zip(os.path.join(base, "a.zip"), "one")
        os.chmod(archive, 0o644)
        done = child(base, archive, cache, AS_NOBODY="1")
        assert done["value"] == "one" and done["stats"] == {"hits": 0, "compiled": 1, "stored": 0}
        assert os.listdir(cache) == []
    finally:
        shutil.rmtree(base)


def test_labctl_installs_what_site_loads(tmp_path: t.Any, cache: str) -> None:
    nodes = lab_nodes()
    root = node_root(tmp_path)
    (root / "usr" / "lib" / "python3").mkdir()
    written = nodes.install_module_code_cache(str(root))
    assert written == [str(root / "usr" / "local" / "lib" / "python3.11" / "dist-packages")]
    # a Python whose site reads that directory (as Debian's python3 reads /usr/local/lib/python3.X/dist-packages)
    script = ("import site, sys, zipimport; site.addsitedir(sys.argv[1]); "
              "print(getattr(zipimport._compile_source, 'lab_module_code_cache', False))")
    done = subprocess.run([sys.executable, "-c", script, written[0]], capture_output=True, text=True, check=True,
                          env=dict(os.environ, INFEROPS_LAB_MODULE_CODE_CACHE=cache))
    assert done.stdout.strip() == "True"


def test_labctl_turns_it_off_for_a_measurement(tmp_path: t.Any, monkeypatch: t.Any) -> None:
    nodes = lab_nodes()
    root = node_root(tmp_path)
    off = root / "etc" / "inferops-lab" / "module-code-cache-off"
    monkeypatch.setenv("INFEROPS_LAB_MODULE_CODE_CACHE_OFF", "1")
    nodes.install_module_code_cache(str(root))
    assert off.exists()
    # booted again without the variable: on again
    monkeypatch.delenv("INFEROPS_LAB_MODULE_CODE_CACHE_OFF")
    nodes.install_module_code_cache(str(root))
    assert not off.exists()
