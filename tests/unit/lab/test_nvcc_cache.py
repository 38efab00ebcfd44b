# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's compile cache (extensions/molecule/lab/nvcc_cache): a repeat is served, any change of source, header or flags compiles."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import typing as t

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FAKE_NVCC = """#!/bin/sh
# counts real compiles; writes an object from the source and header, and a dependency file naming both
[ "$1" = --version ] && { echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; }
echo x >> "$(dirname "$0")/calls"
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift;; -MF) dep=$2; shift;; -c) src=$2; shift;; esac; shift; done
inc="$(dirname "$(dirname "$0")")/include/h.cuh"
cat "$src" "$inc" > "$out"
printf '%s: %s \\\\\\n %s\\n' "$out" "$src" "$inc" > "$dep"
"""


def toolkit(base: t.Any, name: str) -> str:
    root = base / name
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "include" / "h.cuh").write_text("header 1\n")
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    return str(nvcc)


@pytest.fixture(name="cache")
def fixture_cache(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> t.Any:
    monkeypatch.setenv("LAB_NVCC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    spec = importlib.util.spec_from_file_location("lab_nvcc_cache", os.path.join(ROOT, "extensions", "molecule", "lab", "nvcc_cache", "lab_nvcc_cache.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_once(cache: t.Any, nvcc: str, tmp_path: t.Any, flags: t.Sequence[str] = ("-gencode=arch=compute_120f,code=sm_120f",)) -> str:
    build = tmp_path / "build"
    build.mkdir(exist_ok=True)
    out = str(build / "k.cuda.o")
    assert cache.main([nvcc, "--generate-dependencies-with-compile", "-MF", out + ".d", *flags, "-c", str(tmp_path / "k.cu"), "-o", out]) == 0
    with open(out) as handle:
        return handle.read()


def calls(nvcc: str) -> int:
    path = os.path.join(os.path.dirname(nvcc), "calls")
    return len(open(path).read().split()) if os.path.exists(path) else 0


def test_a_repeat_is_served_from_the_cache_with_its_dependency_file(cache: t.Any, tmp_path: t.Any) -> None:
    nvcc = toolkit(tmp_path, "cuda-13.0")
    (tmp_path / "k.cu").write_text("kernel 1\n")
    first = compile_once(cache, nvcc, tmp_path)
    os.remove(str(tmp_path / "build" / "k.cuda.o"))
    os.remove(str(tmp_path / "build" / "k.cuda.o.d"))
    assert compile_once(cache, nvcc, tmp_path) == first == "kernel 1\nheader 1\n"
    assert calls(nvcc) == 1
    depfile = (tmp_path / "build" / "k.cuda.o.d").read_text()
    assert str(tmp_path / "k.cu") in depfile and os.path.dirname(os.path.dirname(nvcc)) + "/include/h.cuh" in depfile


def test_a_changed_header_source_or_flag_compiles_again(cache: t.Any, tmp_path: t.Any) -> None:
    nvcc = toolkit(tmp_path, "cuda-13.0")
    (tmp_path / "k.cu").write_text("kernel 1\n")
    compile_once(cache, nvcc, tmp_path)
    (tmp_path / "cuda-13.0" / "include" / "h.cuh").write_text("header 2\n")
    assert compile_once(cache, nvcc, tmp_path) == "kernel 1\nheader 2\n"
    (tmp_path / "k.cu").write_text("kernel 2\n")
    compile_once(cache, nvcc, tmp_path)
    compile_once(cache, nvcc, tmp_path, flags=("-gencode=arch=compute_103a,code=sm_103a",))
    assert calls(nvcc) == 4


def test_the_same_release_at_another_path_shares_entries(cache: t.Any, tmp_path: t.Any) -> None:
    first, second = toolkit(tmp_path, "cuda-13.0"), toolkit(tmp_path / "opt", "cuda-13.0")
    (tmp_path / "k.cu").write_text("kernel 1\n")
    compile_once(cache, first, tmp_path)
    compile_once(cache, second, tmp_path)
    assert (calls(first), calls(second)) == (1, 0)
    assert os.path.dirname(os.path.dirname(second)) + "/include/h.cuh" in (tmp_path / "build" / "k.cuda.o.d").read_text()


def test_the_off_switch_compiles_for_real(cache: t.Any, tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> None:
    nvcc = toolkit(tmp_path, "cuda-13.0")
    (tmp_path / "k.cu").write_text("kernel 1\n")
    compile_once(cache, nvcc, tmp_path)
    (tmp_path / "off").write_text("")
    monkeypatch.setattr(cache, "OFF", str(tmp_path / "off"))
    compile_once(cache, nvcc, tmp_path)
    assert calls(nvcc) == 2


def test_two_calls_at_once_compile_once(tmp_path: t.Any) -> None:
    """Scenarios run side by side: two nodes asking for the same object at the same moment share one compile."""
    nvcc = toolkit(tmp_path, "cuda-13.0")
    # the fake compiler takes a second, so both calls are inside it together without the lock
    (tmp_path / "cuda-13.0" / "bin" / "nvcc").write_text(FAKE_NVCC.replace('echo x >>', 'sleep 1; echo x >>'))
    (tmp_path / "k.cu").write_text("kernel 1\n")
    (tmp_path / "cache").mkdir()
    script = os.path.join(ROOT, "extensions", "molecule", "lab", "nvcc_cache", "lab_nvcc_cache.py")
    env = dict(os.environ, LAB_NVCC_CACHE_DIR=str(tmp_path / "cache"), LAB_NVCC_CACHE_OFF=str(tmp_path / "no-off"),
               LAB_NVCC_DENY=str(tmp_path / "no-deny"))
    runs = []
    for index in range(2):
        build = tmp_path / ("build%d" % index)
        build.mkdir()
        out = str(build / "k.cuda.o")
        runs.append(subprocess.Popen([sys.executable, script, nvcc, "--generate-dependencies-with-compile", "-MF", out + ".d",
                                      "-c", str(tmp_path / "k.cu"), "-o", out], env=env))
    assert [run.wait(timeout=30) for run in runs] == [0, 0]
    assert calls(nvcc) == 1
    assert (tmp_path / "build0" / "k.cuda.o").read_text() == (tmp_path / "build1" / "k.cuda.o").read_text() == "kernel 1\nheader 1\n"


FAKE_NVCC_WITH_CONFIG = """#!/bin/sh
# as FAKE_NVCC, and the source reads a config header beside it (named in its dependency file)
[ "$1" = --version ] && { echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; }
echo x >> "$(dirname "$0")/calls"
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift;; -MF) dep=$2; shift;; -c) src=$2; shift;; esac; shift; done
inc="$(dirname "$(dirname "$0")")/include/h.cuh"
cfg="$(dirname "$src")/config.inc"
cat "$src" "$inc" "$cfg" > "$out"
printf '%s: %s %s %s\\n' "$out" "$src" "$inc" "$cfg" > "$dep"
"""


def test_the_same_source_beside_another_modules_header_compiles_again(cache: t.Any, tmp_path: t.Any) -> None:
    # FlashInfer writes each module's sources and its config header into a directory of the module's own: two modules'
    # binding .cu files are the same text, including a different batch_decode_config.inc beside each
    nvcc = toolkit(tmp_path, "cuda-13.0")
    (tmp_path / "cuda-13.0" / "bin" / "nvcc").write_text(FAKE_NVCC_WITH_CONFIG)
    objects = []
    for module, config in (("head_dim_128", "HEAD_DIM 128\n"), ("head_dim_256", "HEAD_DIM 256\n")):
        source_dir = tmp_path / "generated" / module
        source_dir.mkdir(parents=True)
        (source_dir / "binding.cu").write_text("binding\n")
        (source_dir / "config.inc").write_text(config)
        out = str(tmp_path / ("%s.cuda.o" % module))
        assert cache.main([nvcc, "--generate-dependencies-with-compile", "-MF", out + ".d", "-c", str(source_dir / "binding.cu"),
                           "-o", out]) == 0
        objects.append(open(out).read())
    assert objects == ["binding\nheader 1\nHEAD_DIM 128\n", "binding\nheader 1\nHEAD_DIM 256\n"]
    assert calls(nvcc) == 2


def test_real_compiles_share_the_machines_job_slots(tmp_path: t.Any) -> None:
    """Four calls of four distinct sources at once (four nodes' ninjas), with two slots: never more than two compile at
    once, and all four are compiled."""
    nvcc = toolkit(tmp_path, "cuda-13.0")
    # each compile records its start and end; the slots are what keeps more than two from overlapping
    (tmp_path / "cuda-13.0" / "bin" / "nvcc").write_text(FAKE_NVCC.replace(
        'echo x >>', 'echo "start $(date +%s.%N)" >> "$(dirname "$0")/spans"; sleep 1; '
        'echo "end $(date +%s.%N)" >> "$(dirname "$0")/spans"; echo x >>'))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "jobs").write_text("2\n")
    script = os.path.join(ROOT, "extensions", "molecule", "lab", "nvcc_cache", "lab_nvcc_cache.py")
    env = dict(os.environ, LAB_NVCC_CACHE_DIR=str(tmp_path / "cache"), LAB_NVCC_CACHE_OFF=str(tmp_path / "no-off"),
               LAB_NVCC_DENY=str(tmp_path / "no-deny"))
    runs = []
    for index in range(4):
        (tmp_path / ("k%d.cu" % index)).write_text("kernel %d\n" % index)
        build = tmp_path / ("build%d" % index)
        build.mkdir()
        out = str(build / "k.cuda.o")
        runs.append(subprocess.Popen([sys.executable, script, nvcc, "--generate-dependencies-with-compile", "-MF", out + ".d",
                                      "-c", str(tmp_path / ("k%d.cu" % index)), "-o", out], env=env))
    assert [run.wait(timeout=60) for run in runs] == [0, 0, 0, 0]
    assert calls(nvcc) == 4
    events = sorted((float(stamp), 1 if what == "start" else -1)
                    for what, stamp in (line.split() for line in (tmp_path / "cuda-13.0" / "bin" / "spans").read_text().splitlines()))
    running, most = 0, 0
    for _stamp, step in events:
        running += step
        most = max(most, running)
    assert most == 2


def test_a_compile_records_its_cpu_and_the_report_adds_them_up(tmp_path: t.Any) -> None:
    """A compile whose nvcc runs a busy child (as nvcc runs cicc and ptxas) logs that child's CPU seconds and its wait
    for a slot; a hit logs no CPU; labctl's report counts both and adds up the compiles' CPU."""
    nvcc = toolkit(tmp_path, "cuda-13.0")
    busy = "%s -c 'import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass'" % sys.executable
    (tmp_path / "cuda-13.0" / "bin" / "nvcc").write_text(FAKE_NVCC.replace("echo x >>", busy + "; echo x >>"))
    (tmp_path / "cache").mkdir()
    script = os.path.join(ROOT, "extensions", "molecule", "lab", "nvcc_cache", "lab_nvcc_cache.py")
    env = dict(os.environ, LAB_NVCC_CACHE_DIR=str(tmp_path / "cache"), LAB_NVCC_CACHE_OFF=str(tmp_path / "no-off"),
               LAB_NVCC_DENY=str(tmp_path / "no-deny"))
    (tmp_path / "k.cu").write_text("kernel 1\n")
    (tmp_path / "build").mkdir()
    out = str(tmp_path / "build" / "k.cuda.o")
    for _attempt in range(2):
        subprocess.run([sys.executable, script, nvcc, "--generate-dependencies-with-compile", "-MF", out + ".d",
                        "-c", str(tmp_path / "k.cu"), "-o", out], env=env, check=True)
    logged = [json.loads(line) for line in (tmp_path / "cache" / "log.jsonl").read_text().splitlines()]
    assert [entry["result"] for entry in logged] == ["miss", "hit"]
    assert logged[0]["cpu"] >= 0.35 and logged[0]["slot_wait"] >= 0
    assert "cpu" not in logged[1]
    report = subprocess.run([sys.executable, os.path.join(ROOT, "extensions", "molecule", "lab", "labctl.py"), "compiles", "--since", "0"],
                            env=dict(os.environ, INFEROPS_LAB_NVCC_CACHE=str(tmp_path / "cache")),
                            capture_output=True, text=True, check=True).stdout
    assert report.startswith("1 compiled (on 1 nodes), 1 hits; the compiles' CPU (nvcc and what it ran): "), report
    assert float(report.split("ran): ", 1)[1].split(" ", 1)[0]) >= 0.4, report
    later = subprocess.run([sys.executable, os.path.join(ROOT, "extensions", "molecule", "lab", "labctl.py"), "compiles", "--since",
                            str(logged[1]["time"] + 1)], env=dict(os.environ, INFEROPS_LAB_NVCC_CACHE=str(tmp_path / "cache")),
                           capture_output=True, text=True, check=True).stdout
    assert later.startswith("0 compiled (on 0 nodes), 0 hits ("), later
