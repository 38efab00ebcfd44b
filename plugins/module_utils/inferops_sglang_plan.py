# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What SGLang's own attention backend asks of FlashInfer, Triton and SGLang's JIT, found by running it.

For one service (its --config as SGLang parses and resolves it), this builds whatever attention backend SGLang resolves
for it -- no list of backends here: SGLang's own composition (get_attention_backend: one backend, or its hybrid of a
prefill and a decode backend), or before 0.5.23 its registry (ATTENTION_BACKENDS) -- over a minimal model runner, and
runs it through every mode a server runs it in, each the way SGLang's own runners drive the backend: eager batches of
two requests (new prompts, prefix-cache hits, a decode step); under speculative decoding the target's TARGET_VERIFY of
the draft tokens (the verify input SGLang's CUDA-graph runner builds, get_spec_info), an EAGLE-family draft's extend
after each verify (DRAFT_EXTEND_V2, through the backend SGLang's DraftBackendFactory makes for it, eager and as its
draft-extend CUDA-graph runner captures it) and its multi-step decode (DraftBackendFactory's decode backend); and the
CUDA graphs SGLang captures -- decode, or TARGET_VERIFY for a speculative target and for a draft that verifies like
one -- captured and replayed at every batch size SGLang captures for the service (get_batch_sizes_to_capture over its
resolved cuda-graph settings), through the backend's graph protocol (init_cuda_graph_state,
init_forward_metadata_out_graph / _in_graph). A dense model's forward
is the backend's forward_extend / forward_decode with the heads of one TP rank; an MLA model's goes through SGLang's own
MLA attention layer (DeepseekV2AttentionMLA, built as its decoder layer builds it): the layer picks its forward method
(dispatch_attn_forward_method) and calls the backend through its own attention layers (attn_mha or attn_mqa).
SGLang's attention test kit (sglang.test.kits.attention_unittest, the device oracle's) gives one thing here: the draft
extend's batch, which no SGLang function outside the kit prepares on its own. Its modules pin the attention TP size to 1
when imported; the pin is released at once, since a plan is for the heads of one rank at the service's TP size.
Recorded, where they would happen: FlashInfer's JIT modules (JitSpec.build_and_load), FlashInfer's artifact reads (the
trtllm-gen kernel sets: get_artifact / get_cubin; a file that is not in place stops that call, never downloaded), SGLang's
own JIT kernels (load_jit) and Triton launches; nothing is built and no kernel runs. A backend that cannot be built or
run here fails the plan naming it. The only things written here by hand are the eager batch shapes (BATCHES) and the
runner's plumbing (runner() says which of its fields are ours).

No GPU memory is taken, so it runs beside a serving service: every tensor lives in host memory (CUDA tensors and pinned
host buffers are made as plain CPU tensors while planning, so no CUDA context is created), and FlashInfer's questions
about the device of such a tensor are answered for GPU 0 (its compute capability and shared memory), which torch reads
from the driver without a context. After planning, torch's CUDA allocator is asked whether it holds any memory; it must
not.

Imported by inferops_flashinfer_venv.py inside the SGLang venv; torch, FlashInfer and SGLang are imported where used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import logging
import math
import mmap
import pathlib
import sys
import types
import typing as t

# (what the server does, SGLang's ForwardMode, tokens already in the KV cache and new tokens, per request): the eager
# batches, two requests of different lengths each; the only hand-written input besides the runner's plumbing
BATCHES: t.Tuple[t.Tuple[str, str, t.Tuple[int, ...], t.Tuple[int, ...]], ...] = (
    ("new prompts", "EXTEND", (0, 0), (8, 5)),
    ("prompts that hit the prefix cache", "EXTEND", (4, 6), (4, 3)),
    ("a decode step", "DECODE", (8, 5), (1, 1)),
)
# KV slots per request in the planner's pools: each request of a batch owns CONTEXT slots
CONTEXT = 32
# FlashInfer probes a loaded module for these optional entry points with hasattr(); the recorded module has none
OPTIONAL_ENTRY_POINTS = frozenset({"plan_with_staged_workspace_bytes"})
# a host buffer this large or larger is mapped, not filled (untouched_zeros)
LAZY_BYTES = 1 << 26
FACTORIES = ("empty", "zeros", "ones", "full", "arange", "tensor")


class PlanError(RuntimeError):
    """SGLang's backend could not be planned here: a release whose runner or backend reads what this file does not give."""


class KernelSetMissing(RuntimeError):
    """A FlashInfer artifact (a file of a kernel set) is not where FlashInfer looks: FlashInfer would download it here."""


class RecordedModule:
    """What FlashInfer gets back from a recorded build_and_load: every entry point is a function that does nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> t.Any:
        if attr.startswith("__") or attr in OPTIONAL_ENTRY_POINTS:
            raise AttributeError(attr)
        return Nothing()


class Nothing:
    """The result of an entry point of a recorded module: callable, and any attribute of it is another Nothing."""

    def __getattr__(self, attr: str) -> t.Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Nothing()

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> Nothing:
        return Nothing()


@dataclasses.dataclass
class Recorder:
    """What a planning run asked for, in order: (kind, name, JitSpec or None)."""

    asked: t.List[t.Tuple[str, str, t.Any]] = dataclasses.field(default_factory=list)

    def since(self, start: int) -> t.List[t.Tuple[str, str, t.Any]]:
        return self.asked[start:]


def clear_getter_caches() -> None:
    """FlashInfer's module getters are functools caches: a getter that already ran in this process would hand back its
    module without asking build_and_load again, so the next service's plan would miss it."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("flashinfer") or module is None:
            continue
        for value in list(vars(module).values()):
            # the type's attribute, not the object's: some of FlashInfer's module-level objects load CUDA when asked
            if callable(getattr(type(value), "cache_clear", None)) and str(getattr(value, "__module__", "")).startswith("flashinfer"):
                value.cache_clear()


def untouched_zeros(args: t.Tuple[t.Any, ...], kwargs: t.Mapping[str, t.Any]) -> t.Any:
    """A large zero-filled host buffer (at least LAZY_BYTES) in an anonymous mapping, whose pages the kernel gives as
    zeros and commits only when written: a backend's CUDA-graph scratch for its largest batch (SGLang's Triton MLA
    decode logits: gigabytes at 512 requests of 8 tokens) is sized, never filled, by its metadata calls. None where the
    call is not a plain (shape, dtype) one or the buffer is small."""
    import torch  # pylint: disable=import-error,import-outside-toplevel

    shape = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
    if set(kwargs) - {"dtype", "device"} or not shape or not all(isinstance(size, int) for size in shape):
        return None
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    count = math.prod(shape)
    size = count * dtype.itemsize
    if size < LAZY_BYTES:
        return None
    return torch.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=count).view(shape)


def host_factory(factory: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
    zeros = factory.__name__ in ("zeros", "empty")

    @functools.wraps(factory)
    def make(*args: t.Any, **kwargs: t.Any) -> t.Any:
        kwargs.pop("pin_memory", None)
        if "device" in kwargs and str(kwargs["device"]).startswith("cuda"):
            kwargs["device"] = "cpu"
        if zeros:
            lazy = untouched_zeros(args, kwargs)
            if lazy is not None:
                return lazy
        return factory(*args, **kwargs)
    return make


def host_buffers_device(cuda_device: t.Any) -> t.Any:
    """torch.cuda.device, but for a host tensor's device the device of no GPU (index -1: entering it changes nothing)."""

    class HostBuffersDevice(cuda_device):  # type: ignore[misc,valid-type]
        def __init__(self, device: t.Any) -> None:
            super().__init__(-1 if getattr(device, "type", device) == "cpu" else device)

    return HostBuffersDevice


@contextlib.contextmanager
def planning(recorder: Recorder) -> t.Iterator[None]:
    """FlashInfer's builds and Triton's launches recorded, tensors in host memory, FlashInfer's device questions about a
    host tensor answered for GPU 0."""
    # pylint: disable=import-error,import-outside-toplevel
    import torch
    import triton.runtime.jit as triton_jit
    from flashinfer import utils as fi_utils
    from flashinfer.jit import core

    def record_build(spec: t.Any) -> RecordedModule:
        recorder.asked.append(("flashinfer", spec.name, spec))
        return RecordedModule(spec.name)

    def record_launch(kernel: t.Any, *args: t.Any, **kwargs: t.Any) -> None:
        function = getattr(kernel, "fn", kernel)
        recorder.asked.append(("triton", "%s.%s" % (function.__module__, function.__qualname__), None))

    def gpu0(device: t.Any) -> t.Any:
        return torch.device("cuda", 0) if getattr(device, "type", None) == "cpu" else device

    # (FlashInfer 0.6.12 has no get_device_properties)
    asked = (("capability", "get_compute_capability"), ("properties", "get_device_properties"))
    originals = {key: getattr(fi_utils, name) for key, name in asked if hasattr(fi_utils, name)}
    answers = {key: functools.partial(lambda original, device: original(gpu0(device)), original)
               for key, original in originals.items()}
    # trtllm's getters hand a built module's library to setup_cubin_loader, which opens it to register FlashInfer's
    # kernel-set callback: a recorded module has no library, and the callback is for a kernel launch
    cubins = importlib.import_module("flashinfer.jit.cubin_loader")
    loader = getattr(cubins, "setup_cubin_loader", None)
    if loader is not None:
        originals["cubin loader"] = loader
        answers["cubin loader"] = lambda path: None
    # a kernel set's files (checksums, headers) as a getter reads them: recorded with the getter that asked; one that is
    # not in place would be downloaded, which stops the getter here instead
    for name in ("get_artifact", "get_cubin"):
        if callable(getattr(cubins, name, None)) and getattr(cubins, name) not in originals.values():
            originals["artifact " + name] = getattr(cubins, name)
            answers["artifact " + name] = functools.partial(read_artifact, recorder, getattr(cubins, name))
    if callable(getattr(cubins, "download_file", None)):
        originals["download"] = cubins.download_file
        answers["download"] = functools.partial(refuse_download, recorder)
    # its "Fetching <file> from <url>" line precedes the refused download: nothing is fetched, so it is not said
    jit_log = getattr(cubins, "logger", None)
    jit_log_level = jit_log.level if isinstance(jit_log, logging.Logger) else None
    # SGLang's own JIT kernels (0.5.23: sglang.kernels.jit), built by a backend's constructor or forward
    try:
        jit_loader = importlib.import_module("sglang.kernels.jit.utils.compile.loader")
    except ImportError:
        jit_loader = None
    if jit_loader is not None and callable(getattr(jit_loader, "load_jit", None)):
        originals["sglang jit"] = jit_loader.load_jit
        answers["sglang jit"] = functools.partial(record_sglang_jit, recorder)
    swapped: t.List[t.Tuple[t.Any, str, t.Any]] = []

    def swap(owner: t.Any, attr: str, value: t.Any) -> None:
        swapped.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    clear_getter_caches()
    swap(core.JitSpec, "build_and_load", record_build)
    swap(triton_jit.JITFunction, "run", record_launch)
    for factory in FACTORIES:
        swap(torch, factory, host_factory(getattr(torch, factory)))
    # FlashInfer's CUDA-graph plan (fast_decode_plan) enters the device of its host buffers: for those, the device of no
    # GPU (torch's index -1, which enters nothing). A class still: torch itself asks isinstance(x, torch.cuda.device)
    # (get_device_properties, which SGLang's Triton backend calls on a GPU host)
    swap(torch.cuda, "device", host_buffers_device(torch.cuda.device))
    # every module that holds one of them by name, and (for a module imported later) where they are defined
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("flashinfer", "sglang")):
            continue
        for attr, value in list(vars(module).items()):
            for key, original in originals.items():
                if value is original:
                    swap(module, attr, answers[key])
    if isinstance(jit_log, logging.Logger):
        jit_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for owner, attr, value in reversed(swapped):
            setattr(owner, attr, value)
        if isinstance(jit_log, logging.Logger) and jit_log_level is not None:
            jit_log.setLevel(jit_log_level)
        clear_getter_caches()


def asking_getter() -> str:
    """The FlashInfer function (outside its cubin loader) that is reading an artifact: what the kernel set is for."""
    for frame in inspect.stack()[2:12]:
        module = str(frame.frame.f_globals.get("__name__", ""))
        if module.startswith("flashinfer") and not module.endswith("cubin_loader"):
            return "%s.%s" % (module, frame.function)
    return "FlashInfer"


def read_artifact(recorder: Recorder, original: t.Callable[..., t.Any], file_name: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
    """FlashInfer's get_artifact / get_cubin, recorded: the file, and the getter that reads it."""
    recorder.asked.append(("kernel-set", "%s for %s" % (file_name, asking_getter()), None))
    return original(file_name, *args, **kwargs)


def refuse_download(recorder: Recorder, source: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
    """FlashInfer's download_file: the artifact just read (get_artifact downloads only what is not in place, or not
    the file the release pins) is recorded as missing; the getter stops here."""
    reads = [name for kind, name, _spec in recorder.asked if kind == "kernel-set"]
    recorder.asked.append(("kernel-set-missing", reads[-1] if reads else "%s for %s" % (source, asking_getter()), None))
    raise KernelSetMissing(str(source))


def record_sglang_jit(recorder: Recorder, *args: t.Any, **kwargs: t.Any) -> RecordedModule:
    """SGLang's load_jit: the kernel's marker (its name and template arguments), recorded instead of compiled."""
    marker = "_".join(str(arg) for arg in args)
    recorder.asked.append(("sglang-jit", marker, None))
    return RecordedModule(marker)


def spec_record(spec: t.Any) -> t.Dict[str, t.Any]:
    """A JitSpec as JSON: its class and dataclass fields (paths marked), so a later run rebuilds it without SGLang."""
    if not dataclasses.is_dataclass(spec):
        raise PlanError("FlashInfer's %s is not a dataclass in this release: its module %s cannot be recorded"
                        % (type(spec).__name__, spec.name))
    fields = {}
    for field in dataclasses.fields(spec):
        fields[field.name] = encode(getattr(spec, field.name))
    return {"class": type(spec).__name__, "fields": fields}


def encode(value: t.Any) -> t.Any:
    if isinstance(value, pathlib.PurePath):
        return {"path": str(value)}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {"mapping": [[encode(key), encode(item)] for key, item in value.items()]}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    where = "%s:%s" % (getattr(value, "__module__", ""), getattr(value, "__qualname__", ""))
    if callable(value) and "<" not in where and resolve(where) is value:
        return {"object": where}
    raise PlanError("a JitSpec field holds %r, which cannot be recorded" % (value,))


def resolve(where: str) -> t.Any:
    """A module-level object by "module:qualname" (a JitSpec's adapter or factory), or None."""
    module_name, _sep, qualname = where.partition(":")
    try:
        found: t.Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return found


def decode(value: t.Any) -> t.Any:
    if isinstance(value, dict) and set(value) == {"path"}:
        return pathlib.Path(value["path"])
    if isinstance(value, dict) and set(value) == {"mapping"}:
        return {decode(key): decode(item) for key, item in value["mapping"]}
    if isinstance(value, dict) and set(value) == {"object"}:
        found = resolve(value["object"])
        if found is None:
            raise PlanError("this FlashInfer has no %s: derive again" % value["object"])
        return found
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def spec_from_record(record: t.Dict[str, t.Any]) -> t.Any:
    from flashinfer.jit import core  # pylint: disable=import-error,import-outside-toplevel

    cls = getattr(core, record["class"], None)
    if cls is None:
        raise PlanError("this FlashInfer has no %s: derive again" % record["class"])
    return cls(**{name: decode(value) for name, value in record["fields"].items()})


def sglang_release() -> str:
    import sglang  # pylint: disable=import-error,import-outside-toplevel

    return str(getattr(sglang, "__version__", "?"))


def model_config_of(server_args: t.Any) -> t.Any:
    """The target model's ModelConfig, as SGLang's release makes it from the record."""
    # pylint: disable=import-error,import-outside-toplevel
    try:
        from sglang.srt.arg_groups.model_override_base import model_config_of as of
    except ImportError:
        # before 0.5.21 (0.5.15): ModelConfig's own constructor from the record
        from sglang.srt.configs.model_config import ModelConfig

        return ModelConfig.from_server_args(server_args)
    return of(server_args)


def publish(server_args: t.Any, held: contextlib.ExitStack) -> t.Dict[str, t.Any]:
    """The service's configuration published as SGLang's scheduler does for rank 0; its parallel widths, as SGLang
    derives them (the attention TP size decides the heads per rank). Before 0.5.21 the widths are dp_attention's, which
    the context answers from process groups that a planner does not make: they are held as the context's overrides
    (its own mechanism) until held closes."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt import runtime_context

    try:
        from sglang.srt.arg_groups.model_override_base import resolving_view
    except ImportError:
        from sglang.srt.layers.dp_attention import compute_dp_attention_world_info

        runtime_context.get_context().set_server_args(server_args)
        cp = int(getattr(server_args, "attn_cp_size", 1) or 1)
        _rank, attn_tp, _dp_rank, attn_dp = compute_dp_attention_world_info(
            server_args.enable_dp_attention, 0, server_args.tp_size, server_args.dp_size, cp)
        widths = {"tp_size": server_args.tp_size, "tp_rank": 0, "attn_tp_size": attn_tp, "attn_tp_rank": 0,
                  "attn_dp_size": attn_dp, "attn_dp_rank": 0, "attn_cp_size": cp, "attn_cp_rank": 0}
        held.enter_context(runtime_context.get_parallel().override(**widths))
        return widths
    runtime_context.publish(server_args, role="scheduler",
                            ranks=runtime_context.SpawnRanks(world_rank=0, dp_rank=0, gpu_id=0))
    return dict(runtime_context.parallel_widths_of(resolving_view(server_args)))


def sliding_window(model_config: t.Any) -> t.Any:
    """SGLang's resolve_sliding_window_size, with the model's own class answering for the model (Gemma-2's window is
    its class's get_attention_sliding_window_size, not config.json's sliding_window). A class whose answer needs the
    loaded model's own state (EAGLE3's draft window, set from --speculative-draft-window-size in its constructor) is
    asked without it: SGLang's rule for a model without that method. SGLang before 0.5.21 (0.5.15) has no such function:
    its ModelRunner.load_model reads the window of the loaded model inline, so a model with a window (its class's
    answer, a hybrid-SWA or chunked-attention config) is not planned on such a release."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.models.registry import ModelRegistry

    try:
        from sglang.srt.model_executor.model_runner_components.load_model_utils import resolve_sliding_window_size
    except ImportError:
        resolve_sliding_window_size = None

    # SGLang's registry imports every model module it has to find the class; the ones this venv cannot import (their
    # GPU-only dependencies) are logged as warnings, which say nothing about this model
    registry_log = logging.getLogger("sglang.srt.models.registry")
    level = registry_log.level
    registry_log.setLevel(logging.ERROR)
    try:
        cls = ModelRegistry.resolve_model_cls(model_config.hf_config.architectures)[0]
    finally:
        registry_log.setLevel(level)
    model = types.SimpleNamespace(config=model_config.hf_config)
    if hasattr(cls, "get_attention_sliding_window_size"):
        model.get_attention_sliding_window_size = cls.get_attention_sliding_window_size.__get__(model)  # type: ignore[attr-defined]
    if resolve_sliding_window_size is None:
        try:
            answer = model.get_attention_sliding_window_size() if hasattr(model, "get_attention_sliding_window_size") else None
        except AttributeError:
            answer = None
        if answer is not None or model_config.is_hybrid_swa or getattr(model_config, "attention_chunk_size", None) is not None:
            raise PlanError("SGLang %s sets a model's sliding window inside ModelRunner.load_model, from the loaded model, "
                            "and %s has one: name its modules in flashinfer_jit_modules and set flashinfer_jit_derive: false"
                            % (sglang_release(), model_config.model_path))
        return None
    try:
        return resolve_sliding_window_size(model, model_config)
    except AttributeError:
        return resolve_sliding_window_size(types.SimpleNamespace(config=model_config.hf_config), model_config)


def runner(server_args: t.Any, resolved: t.Mapping[str, t.Any], model_config: t.Any, draft: bool,
           widths: t.Mapping[str, t.Any], *, device: str = "cpu", requests: int = 2,
           context: int = CONTEXT) -> types.SimpleNamespace:
    """The model runner the backend reads. SGLang's: the model config, dtype, KV cache dtype (its configure_kv_cache_dtype),
    page size, backends, speculative algorithm, MLA or not, sliding window, the pools and the KV index translator (its
    classes). Ours: device "cpu", GPU 0, a pool of `requests` requests of `context` tokens with one layer, the allocator's two fields, an empty
    model, no new workspace, no CUDA stream for EAGLE's planning. (tests/device runs the same backend on a GPU: device "cuda".)"""
    # pylint: disable=import-error,import-outside-toplevel
    import torch
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, ReqToTokenPool
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algorithm = resolved.get("speculative_algorithm")
    base = resolved.get("attention_backend")
    prefill = resolved.get("prefill_attention_backend") or base
    decode_backend = resolved.get("decode_attention_backend") or base
    if draft and resolved.get("speculative_draft_attention_backend"):
        prefill = decode_backend = resolved["speculative_draft_attention_backend"]
    kv_dtype = kv_cache_dtype(server_args, resolved, model_config, draft)
    page_size = int(resolved.get("page_size") or 1)
    node = types.SimpleNamespace(
        device=device, gpu_id=0, model_config=model_config, server_args=server_args, dtype=model_config.dtype,
        kv_cache_dtype=kv_dtype, kv_cache_dtype_str=str(resolved.get("kv_cache_dtype") or "auto"), page_size=page_size,
        prefill_attention_backend_str=prefill, decode_attention_backend_str=decode_backend,
        draft_attention_backend=resolved.get("speculative_draft_attention_backend") if draft else None,
        is_draft_worker=draft, spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA, init_new_workspace=False,
        sliding_window_size=sliding_window(model_config), is_hybrid_swa=bool(model_config.is_hybrid_swa),
        attention_chunk_size=getattr(model_config, "attention_chunk_size", None), hisparse_coordinator=None,
        model=torch.nn.Module(), max_running_requests=requests, plan_stream_for_flashinfer="planning: no stream",
        canary_manager=None)
    node.req_to_token_pool = ReqToTokenPool(size=requests, max_context_len=context, device=device, enable_memory_saver=False)
    size = requests * context + page_size
    if node.use_mla_backend:
        node.token_to_kv_pool = MLATokenToKVPool(
            size=size, page_size=page_size, dtype=kv_dtype, kv_lora_rank=model_config.kv_lora_rank,
            qk_rope_head_dim=model_config.qk_rope_head_dim, layer_num=1, device=device, enable_memory_saver=False)
    else:
        node.token_to_kv_pool = MHATokenToKVPool(
            size=size, page_size=page_size, dtype=kv_dtype,
            head_num=model_config.get_num_kv_heads(widths["attn_tp_size"]), head_dim=model_config.head_dim, layer_num=1,
            device=device, enable_memory_saver=False, enable_alt_stream=False)
    node.token_to_kv_pool_allocator = types.SimpleNamespace(page_size=page_size, get_kvcache=lambda: node.token_to_kv_pool)
    try:
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:
        # before 0.5.21 (0.5.15) the backends read the request-to-token table themselves
        node.kv_index_translator = None
        return node
    # what SGLang's ModelRunner.init_kv_index_translator passes (0.5.23 adds is_draft_worker)
    offered = {"req_to_token": node.req_to_token_pool.req_to_token, "token_to_kv_pool_allocator": node.token_to_kv_pool_allocator,
               "token_to_kv_pool": node.token_to_kv_pool, "page_size": page_size, "device": device, "is_draft_worker": draft}
    node.kv_index_translator = KVIndexTranslator(**accepted(KVIndexTranslator, offered))
    return node


def kv_cache_dtype(server_args: t.Any, resolved: t.Mapping[str, t.Any], model_config: t.Any, draft: bool) -> t.Any:
    """The KV cache's torch dtype, by SGLang's own rule: its configure_kv_cache_dtype (0.5.21 and later), or, before,
    ModelRunner.configure_kv_cache_dtype run on a runner that holds the record, an empty model and the model's dtype."""
    # pylint: disable=import-error,import-outside-toplevel
    import torch

    try:
        from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
    except ImportError:
        from sglang.srt.model_executor.model_runner import ModelRunner

        holder = types.SimpleNamespace(server_args=server_args, model=torch.nn.Module(), dtype=model_config.dtype)
        ModelRunner.configure_kv_cache_dtype(holder)  # type: ignore[arg-type]
        return holder.kv_cache_dtype
    algorithm = resolved.get("speculative_algorithm")
    return configure_kv_cache_dtype(
        server_args_kv_cache_dtype=resolved.get("kv_cache_dtype") or "auto", model=None, model_dtype=model_config.dtype,
        is_draft_worker=draft, is_dflash=str(algorithm or "").upper() == "DFLASH",
        speculative_draft_attention_backend=resolved.get("speculative_draft_attention_backend"),
        speculative_draft_kv_cache_dtype=resolved.get("speculative_draft_kv_cache_dtype"))[1]


def accepted(cls: t.Any, offered: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    """The keyword arguments among offered that cls's constructor takes; it must take every one it requires."""
    parameters = inspect.signature(cls).parameters
    missing = [name for name, parameter in parameters.items() if parameter.default is inspect.Parameter.empty
               and parameter.kind is not parameter.VAR_KEYWORD and parameter.kind is not parameter.VAR_POSITIONAL
               and name not in offered]
    if missing:
        raise PlanError("SGLang %s's %s needs %s, which the planner does not give"
                        % (sglang_release(), cls.__name__, ", ".join(missing)))
    return {name: value for name, value in offered.items() if name in parameters}


def batch(node: types.SimpleNamespace, mode_name: str, prefixes: t.Sequence[int], news: t.Sequence[int],
          spec_info: t.Any = None) -> t.Any:
    """A ForwardBatch of several requests as SGLang's scheduler hands it to the backend: request i owns the runner's
    KV slots page_size + i * CONTEXT onward, laid out in order. A TARGET_VERIFY batch carries the requests' cached
    lengths as seq_lens (SGLang's verify step adds the draft tokens itself)."""
    # pylint: disable=import-error,import-outside-toplevel
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    mode = getattr(ForwardMode, mode_name)
    device, first, context = node.device, node.page_size, node.req_to_token_pool.req_to_token.shape[1]
    verify = mode_name == "TARGET_VERIFY"
    slots, positions = [], []
    for index, (prefix, new) in enumerate(zip(prefixes, news)):
        base = first + index * context
        node.req_to_token_pool.req_to_token[index, :prefix + new] = torch.arange(base, base + prefix + new, dtype=torch.int32)
        slots.append(torch.arange(base + prefix, base + prefix + new, dtype=torch.int64))
        positions.append(torch.arange(prefix, prefix + new, dtype=torch.int64))
    lengths = list(prefixes) if verify else [prefix + new for prefix, new in zip(prefixes, news)]
    lens = torch.tensor(lengths, dtype=torch.int32)
    count = len(lengths)
    forward = ForwardBatch(forward_mode=mode, batch_size=count,
                           input_ids=torch.zeros(sum(news), dtype=torch.int64, device=device),
                           req_pool_indices=torch.arange(count, dtype=torch.int32, device=device), seq_lens=lens.to(device),
                           seq_lens_cpu=lens, seq_lens_sum=sum(lengths), out_cache_loc=torch.cat(slots).to(device),
                           positions=torch.cat(positions).to(device))
    forward.spec_info = spec_info
    if hasattr(node.kv_index_translator, "bind_own_plan"):
        # 0.5.23: a batch carries the KV ids its ScheduleBatch planned (init_new); 0.5.21 reads them from the batch
        node.kv_index_translator.bind_own_plan(forward)
    if (mode.is_extend() or mode_name == "DRAFT_EXTEND_V2") and not verify:
        forward.extend_prefix_lens = torch.tensor(list(prefixes), dtype=torch.int32, device=device)
        forward.extend_prefix_lens_cpu = list(prefixes)
        forward.extend_seq_lens = torch.tensor(list(news), dtype=torch.int32, device=device)
        forward.extend_seq_lens_cpu = list(news)
        forward.extend_num_tokens = sum(news)
        starts = [sum(news[:index]) for index in range(count)]
        forward.extend_start_loc = torch.tensor(starts, dtype=torch.int32, device=device)
    return forward


def layers(node: types.SimpleNamespace, widths: t.Mapping[str, t.Any]) -> t.List[t.Any]:
    """A dense model's attention layers as its model code makes them (a full-attention one, and a sliding-window one
    where the model has a window): heads and KV heads per rank, head dims, soft-cap. Ours: one layer of each kind."""
    from sglang.srt.layers.radix_attention import RadixAttention  # pylint: disable=import-error,import-outside-toplevel

    config = node.model_config
    tp = int(widths["attn_tp_size"])
    heads, kv_heads = int(config.num_attention_heads) // tp, int(config.get_num_kv_heads(tp))
    head_dim, v_head_dim = int(config.head_dim), int(config.v_head_dim or config.head_dim)
    cap = float(getattr(config.hf_text_config, "attn_logit_softcapping", None) or 0.0)
    windows = [-1] + ([int(node.sliding_window_size)] if node.sliding_window_size else [])
    return [RadixAttention(heads, head_dim, head_dim ** -0.5, kv_heads, layer_id=0, logit_cap=cap, v_head_dim=v_head_dim,
                           sliding_window_size=window) for window in windows]


def forward(backend: t.Any, node: types.SimpleNamespace, layer: t.Any, forward_batch: t.Any) -> None:
    """The backend's forward_extend or forward_decode as RadixAttention.forward calls it (Q flat, K and V per head), with
    the model's shapes, for every token of the batch; the KV cache is not written."""
    import torch  # pylint: disable=import-error,import-outside-toplevel

    new = int(forward_batch.input_ids.numel())
    q = torch.zeros(new, layer.tp_q_head_num * layer.head_dim, dtype=node.dtype)
    k = torch.zeros(new, layer.tp_k_head_num, layer.head_dim, dtype=node.dtype)
    v = torch.zeros(new, layer.tp_v_head_num, layer.v_head_dim, dtype=node.dtype)
    # as SGLang's AttentionBackend.forward dispatches: a decode step to forward_decode, every other mode to forward_extend
    run = backend.forward_decode if forward_batch.forward_mode.is_decode() else backend.forward_extend
    run(q, k, v, layer, forward_batch, save_kv_cache=False)


def as_model_runner(node: types.SimpleNamespace) -> t.Any:
    """The runner as an instance of SGLang's own ModelRunner (not initialised: no model, no GPU), holding the fields
    runner() made, as SGLang's attention test kit makes its runners: a backend that calls one of ModelRunner's methods
    (Triton's decode_num_tokens_per_req, ...) runs SGLang's method."""
    from sglang.srt.model_executor.model_runner import ModelRunner  # pylint: disable=import-error,import-outside-toplevel

    model_runner = ModelRunner.__new__(ModelRunner)
    model_runner.__dict__.update(vars(node))
    return model_runner


def build_backend(node: t.Any) -> t.Any:
    """The attention backend SGLang makes for this runner: its own composition (get_attention_backend, SGLang 0.5.23:
    one backend, or the hybrid of a prefill and a decode backend, with its model-level wrappers), or before that its
    registry's class for the one backend name."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    names = "prefill %s / decode %s" % (node.prefill_attention_backend_str, node.decode_attention_backend_str)
    try:
        from sglang.srt.model_executor.model_runner_components.attention_backend_setup import get_attention_backend
    except ImportError:
        get_attention_backend = None
    try:
        if get_attention_backend is not None:
            return get_attention_backend(model_runner=node)
        if node.prefill_attention_backend_str != node.decode_attention_backend_str:
            raise PlanError("SGLang %s composes a prefill and a decode backend inside its ModelRunner, which is not "
                            "planned here (%s)" % (sglang_release(), names))
        return ATTENTION_BACKENDS[node.decode_attention_backend_str](node)
    except PlanError:
        raise
    except Exception as exc:  # pylint: disable=broad-exception-caught
        raise PlanError("SGLang %s's attention backend (%s) could not be built here (%s: %s)"
                        % (sglang_release(), names, type(exc).__name__, exc)) from exc


def mla_layer(model_config: t.Any) -> t.Any:
    """An MLA model's attention layer, SGLang's own (DeepseekV2AttentionMLA, what its DeepSeek-V2/V3 and Kimi-K2 decoder
    layers hold), made with the model's text config the way its decoder layer makes it: heads, head dims, LoRA ranks,
    rope. Its weights are empty host tensors of the model's dtype; it is built to pick its forward method and to call
    the backend through its own attention layers."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.models.deepseek_v2 import DeepseekV2AttentionMLA

    config = model_config.hf_text_config
    parameters = getattr(config, "rope_parameters", None)
    if parameters:
        rope_theta = parameters["rope_theta"]
        rope_scaling = parameters if parameters.get("rope_type") != "default" else None
    else:
        rope_theta, rope_scaling = config.rope_theta, config.rope_scaling
    with set_default_torch_dtype(model_config.dtype):
        return DeepseekV2AttentionMLA(
            config=config, hidden_size=config.hidden_size, num_heads=config.num_attention_heads,
            qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=config.qk_rope_head_dim,
            v_head_dim=config.v_head_dim, q_lora_rank=getattr(config, "q_lora_rank", None),
            kv_lora_rank=config.kv_lora_rank, rope_theta=rope_theta, rope_scaling=rope_scaling,
            max_position_embeddings=config.max_position_embeddings, quant_config=None, layer_id=0, reduce_results=False,
            prefix="model.layers.0.self_attn")


def mla_forward(backend: t.Any, node: t.Any, layer: t.Any, forward_batch: t.Any, *, step: t.Dict[str, t.Any]) -> None:
    """The MLA layer's forward method for this batch, as the layer picks it (recorded in step), and its attention layer
    (attn_mha for the MHA methods, attn_mqa for the absorbed ones) called with its own shapes for every token of the
    batch; the KV cache is not written."""
    # pylint: disable=import-error,import-outside-toplevel
    import torch
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    new = int(forward_batch.input_ids.numel())
    with forward_context(ForwardContext(attn_backend=backend)):
        method = layer.dispatch_attn_forward_method(forward_batch)
        step.setdefault("methods", [])
        if str(method.name) not in step["methods"]:
            step["methods"].append(str(method.name))
        attention = layer.attn_mha if "MHA" in method.name else layer.attn_mqa
        q = torch.zeros(new, attention.tp_q_head_num * attention.head_dim, dtype=node.dtype)
        k = torch.zeros(new, attention.tp_k_head_num, attention.head_dim, dtype=node.dtype)
        v = torch.zeros(new, attention.tp_v_head_num, attention.v_head_dim, dtype=node.dtype)
        with torch.no_grad():
            attention(q, k, v, forward_batch, save_kv_cache=False)


@dataclasses.dataclass
class Model:
    """One model of a service as the planner runs it: its runner, backend, parallel widths, its attention layers (an
    MLA model's SGLang layer, or a dense model's RadixAttention layers), made once for every step, and whether SGLang
    captures CUDA graphs for it (cuda_graphs_disabled, asked once)."""

    node: t.Any
    backend: t.Any
    widths: t.Mapping[str, t.Any]
    mla: t.Any
    dense: t.List[t.Any] = dataclasses.field(default_factory=list)
    graphs: bool = True


def run_forward(model: Model, backend: t.Any, forward_batch: t.Any, step: t.Dict[str, t.Any], metadata: str) -> None:
    """The backend's metadata for the batch, as SGLang's runners ask it -- eager (init_forward_metadata), or the CUDA-graph
    runners' protocol at capture (init_forward_metadata_out_graph with in_capture, then _in_graph) and at replay -- and,
    but at a replay (which runs the captured kernels), the forward of every attention layer. An EAGLE draft's multi-step
    backend ("draft ..." steps) takes the same metadata calls, then each step's backend runs the layers."""
    phase = metadata.rsplit(" ", 1)[-1]
    if phase in ("eager", "draft"):
        backend.init_forward_metadata(forward_batch)
    else:
        backend.init_forward_metadata_out_graph(forward_batch, **({"in_capture": True} if phase == "capture" else {}))
        backend.init_forward_metadata_in_graph(forward_batch)
    if phase == "replay":
        return
    for each in (backend.attn_backends if metadata.startswith("draft") else [backend]):
        if model.mla is not None:
            mla_forward(each, model.node, model.mla, forward_batch, step=step)
        else:
            for layer in model.dense:
                forward(each, model.node, layer, forward_batch)


def speculative(server_args: t.Any) -> t.Dict[str, int]:
    """The service's speculative shape as SGLang resolved it (get_spec() on 0.5.23, the record before)."""
    try:
        from sglang.srt.runtime_context import get_spec  # pylint: disable=import-error,import-outside-toplevel

        source: t.Any = get_spec()
    except (ImportError, AttributeError, RuntimeError):
        source = server_args
    return {name: int(getattr(source, "speculative_" + name, None) or getattr(server_args, "speculative_" + name, None) or 1)
            for name in ("num_steps", "eagle_topk", "num_draft_tokens")}


def cuda_graphs_disabled(server_args: t.Any) -> bool:
    """Whether SGLang captures no decode CUDA graphs for the service, asked as its model runner asks it: from 0.5.21
    check_cuda_graph_backend(decode, disabled) over the published cuda-graph settings (--cuda-graph-backend-decode
    disabled; the old flag is refused in a --config), before that the server args' disable_cuda_graph."""
    try:
        # pylint: disable-next=import-error,import-outside-toplevel
        from sglang.srt.model_executor.cuda_graph_config import Backend, Phase, check_cuda_graph_backend
    except ImportError:
        return bool(getattr(server_args, "disable_cuda_graph", False))
    return bool(check_cuda_graph_backend(Phase.DECODE, Backend.DISABLED))


def tokens_per_request(node: t.Any, shape: t.Mapping[str, int]) -> int:
    """What one request adds to a batch of the CUDA-graph runner: SGLang's decode_num_tokens_per_req (0.5.21 on), before
    it the draft tokens under speculative decoding, else one."""
    if hasattr(node, "decode_num_tokens_per_req"):
        return int(node.decode_num_tokens_per_req(num_draft_tokens=shape["num_draft_tokens"]))
    return shape["num_draft_tokens"] if node.spec_algorithm.is_speculative() else 1


def graph_sizes(node: t.Any, width: int) -> t.List[int]:
    """The batch sizes SGLang's CUDA-graph runner captures for this runner (its get_batch_sizes_to_capture over the
    service's resolved cuda-graph settings)."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.model_executor.runner.base_cuda_graph_runner import get_batch_sizes_to_capture

    return [int(size) for size in get_batch_sizes_to_capture(node, width)[0]]


def verify_input(node: t.Any, shape: t.Mapping[str, int], width: int, count: int) -> t.Any:
    """The TARGET_VERIFY input SGLang's decode CUDA-graph runner builds for a speculative runner (its get_spec_info:
    EagleVerifyInput, DFlashVerifyInput or NgramVerifyInput by algorithm), over a custom-mask buffer of its size."""
    # pylint: disable=import-error,import-outside-toplevel
    import torch
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner

    context = node.req_to_token_pool.req_to_token.shape[1]
    holder = types.SimpleNamespace(
        model_runner=node, speculative_num_steps=shape["num_steps"], speculative_num_draft_tokens=shape["num_draft_tokens"],
        captured_req_width=width, buffers=types.SimpleNamespace(custom_mask=torch.ones(count * width * context, dtype=torch.bool)),
        _capture_ragged_verify_layout=lambda num_tokens: None)
    return DecodeCudaGraphRunner.get_spec_info(holder, count * width)  # type: ignore[arg-type]


def verifies(node: t.Any) -> bool:
    """Whether this runner's steps under speculative decoding are TARGET_VERIFY ones: a target's, and a draft's whose
    algorithm runs its draft block as one (SGLang's supports_target_verify_for_draft: DFLASH)."""
    algorithm = node.spec_algorithm
    return bool(algorithm.is_speculative() and (not node.is_draft_worker or (
        callable(getattr(algorithm, "supports_target_verify_for_draft", None)) and algorithm.supports_target_verify_for_draft())))


def graph_steps(model: Model, shape: t.Mapping[str, int]) -> t.Iterator[t.Tuple[str, t.Any, t.Any, str]]:
    """The model runner's CUDA graphs as SGLang's decode graph runner makes them: its capture mode (DECODE, or
    TARGET_VERIFY for a speculative target and for a draft that verifies like one, as DFLASH's), its state for the
    largest size, then per batch size a capture (every request at the backend's fill length) and a replay (requests of
    different lengths)."""
    node, backend = model.node, model.backend
    verify = verifies(node)
    if node.is_draft_worker and not verify:
        return
    width = tokens_per_request(node, shape) if verify else 1
    sizes = graph_sizes(node, width)
    backend.init_cuda_graph_state(max(sizes), max(sizes) * width)
    fill = int(backend.get_cuda_graph_seq_len_fill_value())
    mode = "TARGET_VERIFY" if verify else "DECODE"
    for size in sizes:
        spec_info = verify_input(node, shape, width, size) if verify else None
        cached = [max(fill - (0 if verify else 1), 0)] * size
        yield ("CUDA-graph capture, %s" % mode, backend,
               batch(node, mode, cached, [width] * size, spec_info), "capture")
    for size in sizes:
        cached = [4 + index % 7 for index in range(size)]
        spec_info = verify_input(node, shape, width, size) if verify else None
        yield ("CUDA-graph replay, %s" % mode, backend,
               batch(node, mode, cached, [width] * size, spec_info), "replay")


def speculative_steps(model: Model, shape: t.Mapping[str, int]) -> t.Iterator[t.Tuple[str, t.Any, t.Any, str]]:
    """What a speculative service runs besides prompts and decode steps: on the target, TARGET_VERIFY of the draft
    tokens; on a DFLASH draft, its block as a TARGET_VERIFY step of its own; on an EAGLE-family draft, its extend after
    each verify and the multi-step draft decode through the backends SGLang's DraftBackendFactory makes for it (topk
    tokens per request per step), eager and at its CUDA graphs' batch sizes."""
    # pylint: disable=import-error,import-outside-toplevel
    node = model.node
    if not node.spec_algorithm.is_speculative():
        return
    if verifies(node):
        # the target's verify of the draft tokens; a DFLASH draft's block (eager where no CUDA graph of its size is)
        width = tokens_per_request(node, shape)
        what = "the draft's block (TARGET_VERIFY)" if node.is_draft_worker else "draft tokens verified (TARGET_VERIFY)"
        yield (what, model.backend,
               batch(node, "TARGET_VERIFY", [8, 5], [width, width], verify_input(node, shape, width, 2)), "eager")
        return
    if not node.spec_algorithm.is_eagle():
        return
    from sglang.srt.speculative.draft_utils import DraftBackendFactory
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    # what SGLang's EAGLE worker passes (0.5.15 adds the server args)
    offered = {"server_args": node.server_args, "draft_model_runner": node, "topk": shape["eagle_topk"],
               "speculative_num_steps": shape["num_steps"]}
    factory = DraftBackendFactory(**accepted(DraftBackendFactory, offered))
    yield from draft_extend_steps(model, shape, factory.create_draft_extend_backend() or model.backend)
    multi_step = factory.create_decode_backend()
    if multi_step is None:
        return
    topk = shape["eagle_topk"]
    what = "draft decode, %d steps of topk %d" % (shape["num_steps"], topk)
    yield (what, multi_step, batch(node, "DECODE", [8, 5], [topk, topk], EagleDraftInput()), "draft")
    if not model.graphs:
        return
    sizes = graph_sizes(node, 1)
    multi_step.init_cuda_graph_state(max(sizes), max(sizes) * topk)
    fill = int(multi_step.attn_backends[0].get_cuda_graph_seq_len_fill_value())
    for size in sizes:
        yield ("CUDA-graph capture, %s" % what, multi_step,
               batch(node, "DECODE", [fill] * size, [topk] * size, EagleDraftInput()), "draft capture")
    for size in sizes:
        yield ("CUDA-graph replay, %s" % what, multi_step,
               batch(node, "DECODE", [4 + index % 7 for index in range(size)], [topk] * size, EagleDraftInput()),
               "draft replay")


def drafts_by_extend(resolved: t.Mapping[str, t.Any]) -> bool:
    """Whether the service's draft model runs an extend after each verify: an EAGLE-family algorithm (SGLang's own
    classification) with a draft model."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # pylint: disable=import-error,import-outside-toplevel

    algorithm = SpeculativeAlgorithm.from_string(resolved.get("speculative_algorithm"))
    return bool(resolved.get("speculative_draft_model_path")) and algorithm.is_eagle()


def kit_draft_extend() -> t.Callable[..., None]:
    """SGLang's attention test kit's preparation of a DRAFT_EXTEND_V2 batch (its speculative_draft_extend_runner: the
    sequence lengths after the draft tokens are written, the EagleDraftExtendInput the draft's extend reads). The kit's
    attention modules pin the attention TP size to 1 when first imported (a parallel override they enter and keep, which
    SGLang refuses while a service's wider topology is published: the first import comes before any service is planned,
    derive() in inferops_flashinfer_venv.py); that pin is released at once through the kit's own handles, innermost first,
    so the widths each plan publishes stand."""
    kit = "sglang.test.kits.attention_unittest."
    pinning = [kit + "attention_methods.mla_attention", kit + "attention_methods.dense_attention"]
    fresh = [name for name in pinning if name not in sys.modules]
    try:
        module = importlib.import_module(kit + "runner_modes.speculative_draft_extend_runner")
        prepare = module._prepare_eagle_draft_extend_v2_batch  # pylint: disable=protected-access
    except (ImportError, AttributeError) as exc:
        raise PlanError("SGLang %s's attention test kit has no DRAFT_EXTEND_V2 batch to run the draft's extend with "
                        "(%s: %s). Fix: install SGLang with its own dependencies in its venv (the kit imports SGLang's "
                        "speculative worker and server modules), or name the modules in flashinfer_jit_modules and set "
                        "flashinfer_jit_derive: false" % (sglang_release(), type(exc).__name__, exc)) from exc
    finally:
        for name in fresh:
            held = getattr(sys.modules.get(name), "_parallel_override", None)
            if held is not None:
                held.__exit__(None, None, None)
    return prepare


def draft_extend_steps(model: Model, shape: t.Mapping[str, int],
                       backend: t.Any) -> t.Iterator[t.Tuple[str, t.Any, t.Any, str]]:
    """An EAGLE-family draft's extend after every verify (DRAFT_EXTEND_V2: each request's draft tokens, num_draft_tokens
    of them, over its cached tokens) through the backend SGLang's DraftBackendFactory makes for it, eager and as SGLang's
    EAGLEDraftExtendCudaGraphRunner captures it (its batch sizes, its fill length) and replays it; the batch as SGLang's
    attention test kit prepares one."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as graph_runner

    node, width = model.node, shape["num_draft_tokens"]
    prepare = kit_draft_extend()

    def extend(prefixes: t.Sequence[int]) -> t.Any:
        news = [width] * len(prefixes)
        forward_batch = batch(node, "DRAFT_EXTEND_V2", prefixes, news)
        prepare(types.SimpleNamespace(prefix_lens=tuple(prefixes), input_lens=tuple(news)), forward_batch, device=node.device)
        return forward_batch

    what = "draft extend, %d tokens a request" % width
    yield (what, backend, extend([8, 5]), "eager")
    if not model.graphs:
        return
    sizes = graph_sizes(node, 1)
    backend.init_cuda_graph_state(max(sizes), max(sizes) * width)
    fill_value = getattr(graph_runner, "resolve_draft_extend_seq_len_fill_value", None)
    fill = int(fill_value(backend, width) if fill_value else backend.get_cuda_graph_seq_len_fill_value())
    for size in sizes:
        yield ("CUDA-graph capture, %s" % what, backend, extend([max(fill - width, 0)] * size), "capture")
    for size in sizes:
        yield ("CUDA-graph replay, %s" % what, backend, extend([4 + index % 7 for index in range(size)]), "replay")


def merge(steps: t.List[t.Dict[str, t.Any]], step: t.Dict[str, t.Any]) -> None:
    """A step appended to the record, or folded into the one before when only its batch size differs and it asked the
    same (a CUDA graph's capture at every size is one entry listing the sizes)."""
    last = steps[-1] if steps else {}
    same = {key: value for key, value in step.items() if key != "requests"}
    if last and last.get("graph") and step.get("graph") == last["graph"] and same == {
            key: value for key, value in last.items() if key != "requests"}:
        last["requests"].extend(step["requests"])
        return
    steps.append(step)


def plan_model(server_args: t.Any, resolved: t.Mapping[str, t.Any], model_config: t.Any, draft: bool,
               recorder: Recorder, *, held: contextlib.ExitStack) -> t.Dict[str, t.Any]:
    """One model's attention backend through every mode the server runs it in: the eager BATCHES, the speculative steps
    (verify on the target, the multi-step draft decode on an EAGLE draft) and the CUDA graphs at SGLang's batch sizes.
    Per step: what it asked of FlashInfer (modules, kernel-set files), SGLang's JIT and Triton."""
    widths = publish(server_args, held)
    shape = speculative(server_args)
    requests = 2
    graphs = not cuda_graphs_disabled(server_args)
    if graphs:
        # the pool holds SGLang's largest capture size: its runner clamps the sizes to the pool, which a server sizes
        # from its GPU memory; asked of a runner whose pool is larger than any size
        probe = as_model_runner(runner(server_args, resolved, model_config, draft, widths))
        probe.req_to_token_pool = types.SimpleNamespace(size=1 << 16)
        requests = max([requests] + graph_sizes(probe, 1))
    node = as_model_runner(runner(server_args, resolved, model_config, draft, widths, requests=requests))
    start = len(recorder.asked)
    backend = build_backend(node)
    # held by the runner as SGLang's ModelRunner holds it (its graph runner's DFLASH verify input asks it)
    node.attn_backend = backend
    names = sorted({node.prefill_attention_backend_str, node.decode_attention_backend_str})
    tp = int(widths["attn_tp_size"])
    heads, kv_heads = int(model_config.num_attention_heads) // tp, int(model_config.get_num_kv_heads(tp))
    planned = {"model": model_config.model_path, "draft": draft, "backend": type(backend).__name__,
               "attention_backends": names,
               "dtype": str(node.dtype).replace("torch.", ""), "kv_cache_dtype": str(node.kv_cache_dtype).replace("torch.", ""),
               "head_dim": int(model_config.head_dim), "heads_per_rank": heads, "kv_heads_per_rank": kv_heads,
               "gqa_group": heads // max(kv_heads, 1), "sliding_window": node.sliding_window_size,
               "decode_tensor_cores": getattr(backend, "decode_use_tensor_cores", None),
               "batches": [{"batch": "construction", "asked": ["%s %s" % (kind, name) for kind, name, _spec in recorder.since(start)]}]}
    mla = None
    if node.use_mla_backend:
        try:
            mla = mla_layer(model_config)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            raise PlanError("SGLang %s's MLA attention layer could not be built here for %s (%s: %s), so its %s backend "
                            "cannot be run" % (sglang_release(), model_config.model_path, type(exc).__name__, exc,
                                               " / ".join(names))) from exc
    model = Model(node=node, backend=backend, widths=widths, mla=mla, dense=[] if mla is not None else layers(node, widths),
                  graphs=graphs)

    def steps() -> t.Iterator[t.Tuple[str, t.Any, t.Any, str]]:
        for what, mode, prefixes, news in BATCHES:
            yield what, backend, batch(node, mode, prefixes, news), "eager"
        yield from speculative_steps(model, shape)
        if graphs:
            yield from graph_steps(model, shape)
        else:
            planned["cuda_graph"] = "disabled"

    what = "building the batches"
    try:
        for what, step_backend, forward_batch, metadata in steps():
            start = len(recorder.asked)
            step: t.Dict[str, t.Any] = {"batch": what, "mode": forward_batch.forward_mode.name,
                                        "requests": [int(forward_batch.batch_size)]}
            if metadata.endswith(("capture", "replay")):
                step["graph"] = metadata.rsplit(" ", 1)[-1]
            try:
                run_forward(model, step_backend, forward_batch, step, metadata)
            except KernelSetMissing:
                # the getter stopped where FlashInfer would download; the batch asked for nothing after it
                step["stopped"] = "a kernel-set file is not in place"
            step["asked"] = ["%s %s" % (kind, name) for kind, name, _spec in recorder.since(start)]
            merge(planned["batches"], step)
    except PlanError:
        raise
    except Exception as exc:  # pylint: disable=broad-exception-caught
        raise PlanError("SGLang %s's attention backend %s (%s) could not be run here for %s (%s: %s)" % (
            sglang_release(), type(backend).__name__, " / ".join(names), what, type(exc).__name__, exc)) from exc
    return planned


def plan_service(server_args: t.Any, resolved: t.Mapping[str, t.Any]) -> t.Tuple[t.List[t.Dict[str, t.Any]], Recorder]:
    """The target model and, under speculative decoding, the draft model, planned by SGLang's backend."""
    # pylint: disable=import-error,import-outside-toplevel
    import torch
    from sglang.srt.configs.model_config import ModelConfig

    configs = [(model_config_of(server_args), False)]
    if resolved.get("speculative_draft_model_path"):
        configs.append((ModelConfig.from_server_args(server_args, model_path=resolved["speculative_draft_model_path"]), True))
    recorder = Recorder()
    plans = []
    try:
        with planning(recorder), contextlib.ExitStack() as held_widths:
            for config, draft in configs:
                plans.append(plan_model(server_args, resolved, config, draft, recorder, held=held_widths))
    except PlanError as exc:
        raise PlanError("%s. Fix: the planner was tested with SGLang 0.5.15, 0.5.21 and 0.5.23; where SGLang's backend "
                        "cannot run here, name its modules in flashinfer_jit_modules and set flashinfer_jit_derive: false"
                        % exc) from exc
    except Exception as exc:  # pylint: disable=broad-exception-caught
        raise PlanError("SGLang %s's attention backend could not be planned (%s: %s): the planner was tested with SGLang "
                        "0.5.15, 0.5.21 and 0.5.23; on another release name the modules in flashinfer_jit_modules and set "
                        "flashinfer_jit_derive: false" % (sglang_release(), type(exc).__name__, exc)) from exc
    held = 0
    if torch.cuda.is_available() and torch.version.cuda:
        # a torch without a CUDA allocator (the lab's CPU build) cannot have taken any
        with contextlib.suppress(AssertionError, RuntimeError, AttributeError):
            held = sum(torch.cuda.memory_reserved(index) for index in range(torch.cuda.device_count()))
    if held:
        raise PlanError("planning took %d bytes of GPU memory; it must take none" % held)
    return plans, recorder


def tp_sizes_that_work(heads: int, kv_heads: t.Optional[int], limit: int) -> t.List[int]:
    """The TP sizes up to limit whose split SGLang's attention layers accept: every dense model's attention (Llama, Qwen2,
    Gemma-2, ...: sglang/srt/models/*.py, its constructor's asserts) needs the attention heads divisible by the TP size, and
    the KV heads divisible by it (more KV heads than ranks) or it divisible by them (fewer: each is replicated); an MLA
    model's latent KV has no such rule (kv_heads None)."""
    sizes = []
    for size in range(1, max(limit, 1) + 1):
        if heads % size:
            continue
        if kv_heads and (kv_heads % size if kv_heads >= size else size % kv_heads):
            continue
        sizes.append(size)
    return sizes


def tp_problems(server_args: t.Any, resolved: t.Mapping[str, t.Any], gpus: int) -> t.List[str]:
    """The models (and draft) of a service that SGLang's attention layers cannot split over its TP size."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig

    tp = int(resolved.get("tp_size") or 1)
    configs = [model_config_of(server_args)]
    if resolved.get("speculative_draft_model_path"):
        configs.append(ModelConfig.from_server_args(server_args, model_path=resolved["speculative_draft_model_path"]))
    problems = []
    for config in configs:
        heads = int(config.num_attention_heads)
        kv_heads = None if config.attention_arch == AttentionArch.MLA else int(config.get_total_num_kv_heads())
        if tp in tp_sizes_that_work(heads, kv_heads, tp):
            continue
        shape = "%d attention heads" % heads + ("" if kv_heads is None else " and %d KV heads" % kv_heads)
        problems.append("SGLang cannot split %s (%s) over tp_size %d: its attention layers need the heads divisible by the TP "
                        "size%s; TP sizes that work on %d GPU(s): %s" % (
                            config.model_path, shape, tp,
                            "" if kv_heads is None else ", and the KV heads divisible by it or it by them",
                            max(gpus, tp), ", ".join(map(str, tp_sizes_that_work(heads, kv_heads, max(gpus, tp)))) or "none"))
    return problems
