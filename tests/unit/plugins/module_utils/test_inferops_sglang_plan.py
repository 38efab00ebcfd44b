# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's plumbing (plugins/module_utils/inferops_sglang_plan.py) without SGLang: how a recorded JitSpec is kept
and rebuilt, what FlashInfer gets back from a recorded build, what a constructor is offered. What SGLang's backend plans
through it is tested on lab nodes with the real SGLang 0.5.21 and 0.5.23 (molecule default, stack_matrix, zoo)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import types
import typing as t

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "plugins", "module_utils"))

import inferops_sglang_plan as planner  # noqa: E402 -- plugins/module_utils/inferops_sglang_plan.py
import pytest  # noqa: E402


def adapter(module: t.Any) -> t.Any:
    """A module-level function, as FlashInfer's post-load adapters are."""
    return module


@dataclasses.dataclass
class JitSpecNvcc:
    name: str
    sources: t.List[pathlib.Path]
    extra_cuda_cflags: t.Optional[t.List[str]]
    is_class: bool = False
    post_load_adapter: t.Optional[t.Callable[[t.Any], t.Any]] = None
    extra_cuda_cflags_by_source: t.Optional[t.Dict[pathlib.Path, t.List[str]]] = None


@pytest.fixture(name="flashinfer_core")
def fixture_flashinfer_core(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    core = types.ModuleType("flashinfer.jit.core")
    core.JitSpecNvcc = JitSpecNvcc  # type: ignore[attr-defined]
    jit = types.ModuleType("flashinfer.jit")
    jit.core = core  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit", jit)
    monkeypatch.setitem(sys.modules, "flashinfer.jit.core", core)
    return core


def test_a_recorded_spec_is_rebuilt_equal_from_its_json(flashinfer_core: types.ModuleType) -> None:
    source = pathlib.Path("/var/lib/sglang/.cache/flashinfer/generated/batch_prefill/kernel.cu")
    spec = JitSpecNvcc("batch_prefill_x", [source], ["-O3"], post_load_adapter=adapter,
                       extra_cuda_cflags_by_source={source: ["-DX"]})
    record = json.loads(json.dumps(planner.spec_record(spec)))
    assert record["class"] == "JitSpecNvcc"
    assert record["fields"]["sources"] == [{"path": str(source)}]
    assert record["fields"]["post_load_adapter"] == {"object": "%s:adapter" % __name__}
    rebuilt = planner.spec_from_record(record)
    assert rebuilt == spec and isinstance(rebuilt.sources[0], pathlib.Path) and rebuilt.post_load_adapter is adapter


def test_a_spec_that_cannot_be_recorded_is_refused_by_name(flashinfer_core: types.ModuleType) -> None:
    def local(module: t.Any) -> t.Any:
        return module

    with pytest.raises(planner.PlanError, match="cannot be recorded"):
        planner.spec_record(JitSpecNvcc("x", [], None, post_load_adapter=local))
    with pytest.raises(planner.PlanError, match="not a dataclass"):
        planner.spec_record(types.SimpleNamespace(name="y"))
    with pytest.raises(planner.PlanError, match="has no JitSpecCuteDsl: derive again"):
        planner.spec_from_record({"class": "JitSpecCuteDsl", "fields": {}})


def test_a_recorded_module_does_nothing_and_offers_no_optional_entry_point() -> None:
    module = planner.RecordedModule("batch_mla")
    assert not hasattr(module, "plan_with_staged_workspace_bytes")
    planned = module.plan(1, 2, backend="fa2")
    assert isinstance(planned, planner.Nothing) and isinstance(planned.anything().more, planner.Nothing)


def test_a_constructor_is_offered_what_it_takes_and_must_get_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    class Translator:
        def __init__(self, *, req_to_token: t.Any, page_size: int, device: str = "cpu") -> None:
            self.args = (req_to_token, page_size, device)

    offered = {"req_to_token": 1, "page_size": 16, "device": "cpu", "is_draft_worker": False}
    assert planner.accepted(Translator, offered) == {"req_to_token": 1, "page_size": 16, "device": "cpu"}
    monkeypatch.setattr(planner, "sglang_release", lambda: "0.6.0")
    with pytest.raises(planner.PlanError, match=r"SGLang 0.6.0's Translator needs page_size"):
        planner.accepted(Translator, {"req_to_token": 1})


def test_the_batch_shapes_are_new_prompts_prefix_hits_and_a_decode_step_of_several_requests() -> None:
    assert [(mode, all(prefixes), len(prefixes)) for _what, mode, prefixes, _news in planner.BATCHES] == [
        ("EXTEND", False, 2), ("EXTEND", True, 2), ("DECODE", True, 2)]
    for _what, mode, prefixes, news in planner.BATCHES:
        # requests of different lengths, each within the pool's slots per request
        assert len(set(prefix + new for prefix, new in zip(prefixes, news))) == len(news)
        assert max(prefix + new for prefix, new in zip(prefixes, news)) <= planner.CONTEXT
        assert mode != "DECODE" or set(news) == {1}


def test_graph_steps_fold_into_one_entry_per_phase_listing_the_sizes() -> None:
    steps: t.List[t.Dict[str, t.Any]] = []
    for size in (1, 2, 4):
        planner.merge(steps, {"batch": "CUDA-graph capture, DECODE", "mode": "DECODE", "requests": [size], "graph": "capture",
                              "asked": ["triton k"]})
    # the same phase asking something else is its own entry; an eager step never folds
    planner.merge(steps, {"batch": "CUDA-graph capture, DECODE", "mode": "DECODE", "requests": [8], "graph": "capture",
                          "asked": ["flashinfer m"]})
    planner.merge(steps, {"batch": "a decode step", "mode": "DECODE", "requests": [2], "asked": []})
    planner.merge(steps, {"batch": "a decode step", "mode": "DECODE", "requests": [2], "asked": []})
    assert [step["requests"] for step in steps] == [[1, 2, 4], [8], [2], [2]]


def test_qwen2_7b_heads_do_not_split_over_eight_gpus() -> None:
    # Qwen2-7B: 28 attention heads, 4 KV heads (its model card); SGLang's Qwen2Attention asserts 28 % tp == 0
    assert planner.tp_sizes_that_work(28, 4, 8) == [1, 2, 4]
    assert 8 not in planner.tp_sizes_that_work(28, 4, 8)
    # Llama-3.1-8B: 32 / 8 -- every power of two up to 8, 8 KV heads split one per rank
    assert planner.tp_sizes_that_work(32, 8, 8) == [1, 2, 4, 8]
    # fewer KV heads than ranks are replicated: 1 KV head (MQA) over 8 ranks is fine, 3 KV heads over 2 ranks is not
    assert planner.tp_sizes_that_work(32, 1, 8) == [1, 2, 4, 8]
    assert planner.tp_sizes_that_work(24, 3, 8) == [1, 3, 6]
    # an MLA model's latent KV has no KV-head rule: DeepSeek-V2-Lite's 16 heads
    assert planner.tp_sizes_that_work(16, None, 8) == [1, 2, 4, 8]


def test_a_kernel_set_file_is_recorded_with_the_getter_that_reads_it() -> None:
    recorder = planner.Recorder()
    read: t.List[t.Any] = []

    def get_artifact(file_name: str, sha256: str) -> bytes:
        read.append((file_name, sha256))
        return b"checksums"

    def getter() -> t.Any:
        return planner.read_artifact(recorder, get_artifact, "abc/fmha/trtllm-gen/checksums.txt", "f00")

    # the getter's frame is FlashInfer's (its module's __name__, its function's name), as gen_trtllm_gen_fmha_module's is
    in_flashinfer = types.FunctionType(getter.__code__.replace(co_name="gen_trtllm_gen_fmha_module"), {
        "__name__": "flashinfer.jit.attention.modules", "planner": planner}, "gen_trtllm_gen_fmha_module", None,
        getter.__closure__)
    assert in_flashinfer() == b"checksums"
    assert read == [("abc/fmha/trtllm-gen/checksums.txt", "f00")]
    assert recorder.asked == [("kernel-set", "abc/fmha/trtllm-gen/checksums.txt for "
                               "flashinfer.jit.attention.modules.gen_trtllm_gen_fmha_module", None)]


def test_a_download_is_refused_and_the_file_just_read_recorded_as_missing() -> None:
    recorder = planner.Recorder()
    recorder.asked.append(("kernel-set", "abc/fmha/trtllm-gen/checksums.txt for getter", None))
    with pytest.raises(planner.KernelSetMissing):
        planner.refuse_download(recorder, "https://example.invalid/abc/fmha/trtllm-gen/checksums.txt", "/cache/x")
    assert recorder.asked[-1] == ("kernel-set-missing", "abc/fmha/trtllm-gen/checksums.txt for getter", None)


def test_sglangs_own_jit_kernel_is_recorded_not_compiled() -> None:
    recorder = planner.Recorder()
    module = planner.record_sglang_jit(recorder, "fixup_zero_kv", "bf16_t", cuda_files=["attention/fixup_zero_kv.cuh"])
    assert recorder.asked == [("sglang-jit", "fixup_zero_kv_bf16_t", None)]
    assert isinstance(module.fixup_zero_kv_rows(), planner.Nothing)


def test_the_planner_keeps_no_list_of_backends() -> None:
    """Whatever backend SGLang resolves is built and run (SGLang's own composition or registry): no names to gate on."""
    for path in (planner.__file__, os.path.join(ROOT, "roles", "inferops", "files", "inferops_flashinfer_venv.py")):
        with open(path) as handle:
            source = handle.read()
        assert "FLASHINFER_BACKENDS" not in source
        for name in ("trtllm_mha", "trtllm_mla", "fa3", "fa4", "flashmla", "cutlass_mla"):
            assert '"%s"' % name not in source and "'%s'" % name not in source, (path, name)


# A stand-in of SGLang's parallel context and of its attention test kit's modules, which enter a parallel override when
# first imported and keep it (SGLang's kit modules do: attention_methods/dense_attention.py and mla_attention.py)
KIT_FILES = {
    "sglang/__init__.py": "__version__ = '0.0.test'\n",
    "sglang/parallel.py": (
        "import contextlib\n"
        "OVERRIDES = {}\n"
        "@contextlib.contextmanager\n"
        "def override(**values):\n"
        "    global OVERRIDES\n"
        "    saved = dict(OVERRIDES)\n"
        "    OVERRIDES.update(values)\n"
        "    try:\n"
        "        yield\n"
        "    finally:\n"
        "        OVERRIDES.clear()\n"
        "        OVERRIDES.update(saved)\n"),
    "sglang/test/__init__.py": "",
    "sglang/test/kits/__init__.py": "",
    "sglang/test/kits/attention_unittest/__init__.py": "",
    "sglang/test/kits/attention_unittest/attention_methods/__init__.py": "",
    "sglang/test/kits/attention_unittest/attention_methods/dense_attention.py": (
        "from sglang import parallel\n"
        "_parallel_override = parallel.override(attn_tp_size=1, attn_dcp_rank=0)\n"
        "_parallel_override.__enter__()\n"),
    "sglang/test/kits/attention_unittest/attention_methods/mla_attention.py": (
        "from . import dense_attention\n"
        "from sglang import parallel\n"
        "_parallel_override = parallel.override(attn_tp_size=1)\n"
        "_parallel_override.__enter__()\n"),
    "sglang/test/kits/attention_unittest/runner_modes/__init__.py": "",
    "sglang/test/kits/attention_unittest/runner_modes/speculative_draft_extend_runner.py": (
        "from ..attention_methods import dense_attention, mla_attention\n"
        "def _prepare_eagle_draft_extend_v2_batch(case, batch, *, device):\n"
        "    batch.prepared = (case.prefix_lens, case.input_lens, device)\n"),
}


@pytest.fixture(name="kit")
def fixture_kit(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> t.Iterator[t.Callable[[t.Dict[str, str]], None]]:
    """Writes the stand-in kit (with the files given instead of its own) and puts it first on the path; forgets it
    afterwards."""

    def write(instead: t.Dict[str, str]) -> None:
        for name, text in dict(KIT_FILES, **instead).items():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text(text)
        monkeypatch.syspath_prepend(str(tmp_path))

    yield write
    for name in [name for name in sys.modules if name == "sglang" or name.startswith("sglang.")]:
        del sys.modules[name]


def test_the_kits_tp_pin_is_released_so_the_services_widths_stand(kit: t.Callable[[t.Dict[str, str]], None]) -> None:
    kit({})
    from sglang import parallel  # type: ignore[import-not-found]  # pylint: disable=import-error,import-outside-toplevel

    with parallel.override(attn_tp_size=8):  # the service's widths, as the planner holds them before 0.5.21
        prepare = planner.kit_draft_extend()
        assert parallel.OVERRIDES == {"attn_tp_size": 8}
        batch = types.SimpleNamespace()
        prepare(types.SimpleNamespace(prefix_lens=(8, 5), input_lens=(4, 4)), batch, device="cpu")
        assert batch.prepared == ((8, 5), (4, 4), "cpu")
        # imported again (a second service of the same run): nothing is released twice
        assert planner.kit_draft_extend() is prepare
        assert parallel.OVERRIDES == {"attn_tp_size": 8}
    assert parallel.OVERRIDES == {}


def test_a_release_without_the_kits_draft_extend_batch_fails_the_plan_by_name(kit: t.Callable[[t.Dict[str, str]], None]) -> None:
    """The kit's runner module is there (its attention modules pinned the TP size on import) but has no such batch."""
    runner = "sglang/test/kits/attention_unittest/runner_modes/speculative_draft_extend_runner.py"
    kit({runner: "from ..attention_methods import dense_attention, mla_attention\n"})
    from sglang import parallel  # type: ignore[import-not-found]  # pylint: disable=import-error,import-outside-toplevel

    with pytest.raises(planner.PlanError, match=r"SGLang 0\.0\.test's attention test kit has no DRAFT_EXTEND_V2 batch"):
        planner.kit_draft_extend()
    assert parallel.OVERRIDES == {}


class Algorithm:
    """A speculative algorithm as the planner asks it (SGLang's SpeculativeAlgorithm's questions)."""

    def __init__(self, name: str, draft_verifies: t.Optional[bool]) -> None:
        self.name = name
        if draft_verifies is not None:
            self.supports_target_verify_for_draft = lambda: draft_verifies

    def is_speculative(self) -> bool:
        return self.name != "NONE"


@pytest.mark.parametrize(("name", "draft_verifies", "target", "draft"), [
    ("NONE", None, False, False),
    ("EAGLE3", False, True, False),
    ("DFLASH", True, True, True),
    # a release whose algorithm cannot say: the draft is not taken for one that verifies
    ("EAGLE", None, True, False),
])
def test_a_dflash_draft_runs_its_block_as_a_verify_step_and_an_eagle_draft_does_not(
        name: str, draft_verifies: t.Optional[bool], target: bool, draft: bool) -> None:
    for is_draft, expected in ((False, target), (True, draft)):
        node = types.SimpleNamespace(spec_algorithm=Algorithm(name, draft_verifies), is_draft_worker=is_draft)
        assert planner.verifies(node) is expected
