# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The venv side of the node tool (roles/inferops/files/inferops_flashinfer_venv.py): what it decides without FlashInfer,
SGLang or torch (module names, reuse of a derivation, ninja's verdict, stale locks, its result line). What FlashInfer and
SGLang decide through it is tested on lab nodes with their real code (molecule) and on the H200 (tests/device)."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
import typing as t

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
# as inferops.blackwell.inferops installs it on the node: the venv side (the role's file) beside the planner (module_utils),
# which it imports and whose digest it records
INSTALLED = tempfile.mkdtemp(prefix="inferops-tool-")
atexit.register(shutil.rmtree, INSTALLED, True)
for _path in (os.path.join(ROOT, "roles", "inferops", "files", "inferops_flashinfer_venv.py"),
              os.path.join(ROOT, "plugins", "module_utils", "inferops_sglang_plan.py")):
    shutil.copy(_path, INSTALLED)
sys.path.insert(0, INSTALLED)

import inferops_flashinfer_venv as side  # noqa: E402 -- roles/inferops/files/inferops_flashinfer_venv.py, installed
import pytest  # noqa: E402


def test_an_operators_module_name_becomes_a_recipe() -> None:
    assert side.named_recipe("sampling") == {"kind": "sampling"}
    assert side.named_recipe("batch_prefill:bf16:128") == {
        "kind": "batch_prefill", "q": "bfloat16", "kv": "bfloat16", "o": "bfloat16", "head_dim_qk": 128, "head_dim_vo": 128,
        "backend": "fa2"}
    for bad in ("attention", "batch_prefill:fp32:128", "batch_decode:bf16", "batch_decode:bf16:x"):
        with pytest.raises(ValueError, match=r"unknown module .*known: sampling, cascade, norm"):
            side.named_recipe(bad)


@pytest.fixture(name="flashinfer_core")
def fixture_flashinfer_core(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A stand-in for flashinfer.jit.core: just the JitSpec.build_and_load that getter_specs records instead of running."""
    class JitSpec:
        def __init__(self, name: str) -> None:
            self.name = name

        def build_and_load(self) -> str:
            raise AssertionError("getter_specs must not build")

    core = types.SimpleNamespace(JitSpec=JitSpec)
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit", types.SimpleNamespace(core=core))
    monkeypatch.setitem(sys.modules, "flashinfer.jit.core", core)
    return core


def test_a_getters_modules_are_recorded_not_built(flashinfer_core: types.SimpleNamespace) -> None:
    def get_two_modules(suffix: str) -> t.Any:
        first = flashinfer_core.JitSpec("prefill_" + suffix).build_and_load()
        first.run()  # what the getter does with a loaded module is absorbed
        return flashinfer_core.JitSpec("prefill_%s_kv_stride_equal" % suffix).build_and_load()

    specs = side.getter_specs(get_two_modules, "bf16")
    assert [spec.name for spec in specs] == ["prefill_bf16", "prefill_bf16_kv_stride_equal"]
    assert flashinfer_core.JitSpec.build_and_load.__name__ == "build_and_load"  # put back


def test_a_getter_that_builds_nothing_is_an_error(flashinfer_core: types.SimpleNamespace) -> None:
    def get_nothing() -> None:
        return None

    with pytest.raises(ValueError, match="built no JIT module"):
        side.getter_specs(get_nothing)


def test_each_recipe_asks_flashinfer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: t.List[t.Any] = []
    monkeypatch.setattr(side, "SPECS", {})
    monkeypatch.setattr(side, "specs_of", lambda recipe: asked.append(recipe) or ["spec"])
    recipe = {"kind": "cascade", "why": "merge_state"}
    assert side.make_specs(recipe) == ["spec"]
    assert side.make_specs(dict(recipe, uris=["x"])) == ["spec"]  # the names found later do not make it another recipe
    assert asked == [recipe]


@pytest.fixture(name="derivation")
def fixture_derivation(tmp_path: t.Any) -> t.Dict[str, t.Any]:
    """A configuration and a model directory a derivation read, and its record."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"num_attention_heads": 32}')
    (model / "weights.bin").write_text("not read")
    config = tmp_path / "sglang-ar.yaml"
    config.write_text("model-path: %s\n" % model)
    versions = {"sglang": "0.5.23", "flashinfer": "0.7.2", "archs": ["12.1a"], "gpus": []}
    record = {"format": side.DERIVED_FORMAT, "configs": {str(config): {"models": [{"path": str(model)}]}},
              "inputs": side.derivation_inputs([str(config)], [str(model)], versions)}
    return {"config": config, "model": model, "versions": versions, "record": record}


def test_a_derivation_is_reused_while_what_it_read_is_unchanged(derivation: t.Dict[str, t.Any]) -> None:
    paths, versions, record = [str(derivation["config"])], derivation["versions"], derivation["record"]
    assert sorted(record["inputs"]["files"]) == sorted([paths[0], str(derivation["model"] / "config.json")])
    assert side.reusable(record, paths, versions) is True
    # a record of our former recipes (no format) is derived again by SGLang's backend
    assert side.reusable({key: value for key, value in record.items() if key != "format"}, paths, versions) is False
    assert side.reusable(record, paths, dict(versions, sglang="0.5.24")) is False
    assert side.reusable(record, paths + ["/etc/inferops/sglang/sglang-spec.yaml"], versions) is False
    (derivation["model"] / "config.json").write_text('{"num_attention_heads": 64}')
    assert side.reusable(record, paths, versions) is False
    assert side.reusable(None, paths, versions) is False


def test_a_derivation_by_another_planner_is_not_reused(derivation: t.Dict[str, t.Any]) -> None:
    """A collection upgrade whose planner asks SGLang's backend more (a new mode, a new batch) derives again, though the
    configurations, the models, the releases and the GPUs are unchanged."""
    paths, versions, record = [str(derivation["config"])], derivation["versions"], derivation["record"]
    assert sorted(record["inputs"]["planner"]) == ["inferops_flashinfer_venv.py", "inferops_sglang_plan.py"]
    assert side.reusable(record, paths, versions) is True
    older = dict(record, inputs=dict(record["inputs"], planner=dict(record["inputs"]["planner"], **{"inferops_sglang_plan.py": "0" * 64})))
    assert side.reusable(older, paths, versions) is False
    assert side.reusable(dict(record, inputs={k: v for k, v in record["inputs"].items() if k != "planner"}), paths, versions) is False


def test_a_model_that_is_not_a_local_directory_is_derived_again(derivation: t.Dict[str, t.Any]) -> None:
    assert side.derivation_inputs([str(derivation["config"])], ["meta-llama/Llama-3.1-8B"], derivation["versions"]) is None


def test_ninja_decides_whether_a_built_module_is_up_to_date(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    source, library = tmp_path / "kernel.cu", tmp_path / "kernel.so"
    ninja = tmp_path / "build.ninja"

    class Spec:
        is_compiled = True
        build_dir, ninja_path = tmp_path, ninja

        def write_ninja(self) -> None:
            ninja.write_text("rule copy\n  command = cp $in $out\nbuild %s: copy %s\n" % (library, source))

    source.write_text("v1")
    Spec().write_ninja()
    subprocess.run(["ninja", "-C", str(tmp_path), "-f", str(ninja)], check=True, capture_output=True)  # the build, its log
    assert side.up_to_date(Spec()) == (True, None)
    os.utime(source, (os.stat(library).st_mtime + 10,) * 2)
    # a source newer than the library: FlashInfer would rebuild at the first request
    usable, why = side.up_to_date(Spec())
    assert usable is False and why and "kernel" in why
    Spec.is_compiled = False
    assert side.up_to_date(Spec()) == (False, "not built")


def test_a_lock_nobody_holds_is_stale(tmp_path: t.Any) -> None:
    lock = str(tmp_path / "module.lock")
    assert side.unheld(lock) is True
    with open(lock, "a") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert side.unheld(lock) is False
    assert side.unheld(str(tmp_path / "no-such-dir" / "module.lock")) is False


def test_progress_is_written_whole_for_a_warm_up_only(tmp_path: t.Any) -> None:
    progress = side.Progress(str(tmp_path / "workspace"))
    progress("building", module="sampling", index=1, total=2)
    with open(str(tmp_path / "workspace" / "inferops-warm-progress.json")) as handle:
        assert json.load(handle) == {"done": [], "phase": "building", "module": "sampling", "index": 1, "total": 2}
    assert not [name for name in os.listdir(str(tmp_path / "workspace")) if name.endswith(".tmp")]
    side.Progress(None)("building")  # a plan or a probe writes nothing


def test_the_result_is_one_line_after_the_marker_even_when_sglang_is_missing(tmp_path: t.Any) -> None:
    config = tmp_path / "sglang-ar.yaml"
    config.write_text("model-path: /models/demo\n")
    # run as the module runs it: the venv's Python with the file as its script
    done = subprocess.run([sys.executable, side.__file__, "parse", json.dumps({"sglang_configs": [str(config)], "modules": [],
                                                                               "derive": True})],
                          capture_output=True, text=True, check=False, cwd=str(tmp_path))
    assert done.returncode == 0
    last = done.stdout.splitlines()[-1]
    assert last.startswith(side.MARKER)
    result = json.loads(last[len(side.MARKER):])
    assert result["parsed"] == {} and "sglang" in result["error"]


SET = "158f6fa11ef139a098cfddcdddce73ca99d164ad/fmha/trtllm-gen/"


@pytest.fixture(name="cubin_set")
def fixture_cubin_set(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> t.Dict[str, t.Any]:
    """A kernel set laid out as FlashInfer's artifacts name it (two files and their checksums.txt), and stand-ins for the
    two FlashInfer modules trtllm_cubins reads: artifacts (the set's path and its checksums.txt's pinned sha256) and
    jit.env (the directory FlashInfer chose). The real modules, with the real flashinfer-cubin wheels, are in
    docs/testing.md's figures; here only what the tool concludes from them."""
    import hashlib

    root = tmp_path / "cubins"
    directory = root / SET
    (directory / "include").mkdir(parents=True)
    files = {"fmhaSm100aKernel_A.cubin": b"kernel a", "include/flashInferMetaInfo.h": b"// meta"}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    listing = "".join("%s  %s\n" % (hashlib.sha256(data).hexdigest(), name) for name, data in files.items()).encode()
    (directory / "checksums.txt").write_bytes(listing)
    artifacts = types.SimpleNamespace(ArtifactPath=types.SimpleNamespace(TRTLLM_GEN_FMHA=SET),
                                      CheckSumHash=types.SimpleNamespace(TRTLLM_GEN_FMHA=hashlib.sha256(listing).hexdigest()))
    env = types.SimpleNamespace(FLASHINFER_CUBIN_DIR=root, has_flashinfer_cubin=lambda: False)
    package = types.ModuleType("flashinfer")
    package.artifacts = artifacts  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.artifacts", artifacts)
    monkeypatch.setitem(sys.modules, "flashinfer.jit", types.SimpleNamespace(env=env))
    monkeypatch.setitem(sys.modules, "flashinfer.jit.env", env)
    monkeypatch.setenv("FLASHINFER_CUBIN_DIR", str(root))
    return {"root": root, "dir": directory, "artifacts": artifacts, "env": env}


def test_a_whole_kernel_set_is_verified_where_flashinfer_looks(cubin_set: t.Dict[str, t.Any]) -> None:
    found = side.trtllm_cubins()
    assert found["verified"] and found["problem"] is None
    assert (found["dir"], found["set"], found["source"], found["files"]) == (str(cubin_set["root"]), SET, "FLASHINFER_CUBIN_DIR", 2)


def test_an_altered_file_is_named(cubin_set: t.Dict[str, t.Any]) -> None:
    (cubin_set["dir"] / "fmhaSm100aKernel_A.cubin").write_bytes(b"kernel b")
    found = side.trtllm_cubins()
    assert not found["verified"]
    assert found["problem"].startswith("tampered: 1 file(s)") and found["problem"].endswith("fmhaSm100aKernel_A.cubin")


def test_an_absent_file_is_named(cubin_set: t.Dict[str, t.Any]) -> None:
    (cubin_set["dir"] / "include" / "flashInferMetaInfo.h").unlink()
    found = side.trtllm_cubins()
    assert not found["verified"] and found["problem"].startswith("incomplete: 1 of the 2 files")


def test_a_set_whose_checksums_the_release_does_not_pin_is_foreign(cubin_set: t.Dict[str, t.Any]) -> None:
    cubin_set["artifacts"].CheckSumHash.TRTLLM_GEN_FMHA = "0" * 64  # another release's pin
    found = side.trtllm_cubins()
    assert not found["verified"] and found["problem"].startswith("foreign: ") and "0" * 64 in found["problem"]


def test_no_set_where_flashinfer_looks_is_missing(cubin_set: t.Dict[str, t.Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHINFER_CUBIN_DIR")
    cubin_set["env"].FLASHINFER_CUBIN_DIR = cubin_set["root"] / "elsewhere"
    found = side.trtllm_cubins()
    assert not found["verified"] and found["source"] == "download cache" and found["problem"].startswith("missing: no ")


def test_the_set_in_place_is_named_by_its_pin_and_only_then(cubin_set: t.Dict[str, t.Any]) -> None:
    """trtllm_set (a derivation input: trtllm_mha is planned only with it) is the release's pin where FlashInfer looks."""
    assert side.trtllm_set() == cubin_set["artifacts"].CheckSumHash.TRTLLM_GEN_FMHA
    cubin_set["artifacts"].CheckSumHash.TRTLLM_GEN_FMHA = "0" * 64
    assert side.trtllm_set() is None
    cubin_set["artifacts"].CheckSumHash.TRTLLM_GEN_FMHA = "1" * 64
    (cubin_set["dir"] / "checksums.txt").unlink()
    assert side.trtllm_set() is None


def test_a_derivation_is_made_again_when_the_kernel_set_comes(derivation: t.Dict[str, t.Any]) -> None:
    """A derivation made without the set (trtllm not planned) is not reused once the set is in place."""
    paths, versions = [str(derivation["config"])], dict(derivation["versions"], trtllm_set=None)
    record = dict(derivation["record"], inputs=side.derivation_inputs(paths, [str(derivation["model"])], versions))
    assert side.reusable(record, paths, versions) is True
    assert side.reusable(record, paths, dict(versions, trtllm_set="c2d9399b" + "0" * 56)) is False


def test_the_kernel_sets_a_plan_read_are_grouped_by_set_with_their_getters() -> None:
    getter = "flashinfer.jit.attention.modules.gen_trtllm_gen_fmha_module"
    asked = [("flashinfer", "sampling", object()),
             ("kernel-set", "abc/fmha/trtllm-gen//checksums.txt for " + getter, None),
             ("kernel-set", "abc/fmha/trtllm-gen/include/flashInferMetaInfo.h for " + getter, None),
             ("kernel-set", "def/gemm/checksums.txt for flashinfer.gemm.get_gemm_module", None),
             ("kernel-set-missing", "def/gemm/checksums.txt for flashinfer.gemm.get_gemm_module", None)]
    assert side.kernel_sets(asked) == [
        {"set": "abc/fmha/trtllm-gen", "for": [getter], "missing": False},
        {"set": "def/gemm", "for": ["flashinfer.gemm.get_gemm_module"], "missing": True}]
    assert side.kernel_sets([("triton", "kernel", None)]) == []
