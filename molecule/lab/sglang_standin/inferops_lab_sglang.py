# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- SGLang's server with the model and the GPU simulated.

Test equipment for the inferops.blackwell lab (lab nodes have no GPU and no model weights).
`python -m sglang.launch_server` in the lab venv runs this module. Everything SGLang decides
comes from the real SGLang release installed beside it:
- the command line and --config are parsed by SGLang's own `prepare_server_args` (a flag or a
  value SGLang rejects fails here with SGLang's message), and resolved by `resolve_once` (SGLang
  0.5.15: in ServerArgs.__post_init__): attention and sampling backends, KV cache dtype, page size,
  SGLang's own code, given the node's simulated GPUs, which torch reports through the lab's torch shim;
- the model's shape is SGLang's `ModelConfig` of the model directory (config.json);
- requests are normalised by SGLang's `SamplingParams`;
- attention: SGLang's own attention backend (the class its registry picks for the resolved
  backend: FlashInferAttnBackend, FlashInferMLAAttnBackend for an MLA model, TRTLLMHAAttnBackend on SM 10.x where the
  release's trtllm-gen kernel set is in place -- without it FlashInfer would download the set) runs its planning
  (init_forward_metadata) and, for a dense model, its forward, for each batch the server goes
  through: the start-up warm-up request (a greedy one), then each request's own extend (its
  cached prefix, if it hits an earlier prompt) and a decode step. Every FlashInfer module the
  backend asks for is really loaded by FlashInfer (from its cache, or JIT-built), then handed
  back as a stand-in whose kernels do nothing (no GPU); Triton kernels are not launched.
  This harness is the lab's own, written apart from the role's planner
  (roles/inferops/files/inferops_sglang_plan.py), so that a disagreement fails here.
What is simulated: loading weights (a sleep) and running kernels (none run). Besides attention:
- `sampling` at the first request that needs top-k / top-p / min-p (a temperature-only or
  greedy request samples with torch; sglang/srt/layers/sampler.py).
Each module load logs whether the module came from the cache or was compiled at run time (an object or library
in FlashInfer's cache added or rewritten); a load that fails fails the request, and the server exits, as
SGLang's scheduler does.
Serves /health, /health_generate, /v1/models, /model_info and POST /generate.
"""

from __future__ import annotations

import contextlib
import http.server
import inspect
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
import types
import typing as t

LOG = logging.getLogger("sglang.launch_server")


def release_has(module: str) -> bool:
    """Whether the installed SGLang has this module (the lab serves 0.5.15 as well as 0.5.21 and later)."""
    import importlib.util  # noqa: PLC0415

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def attention_backends(resolved: t.Mapping[str, t.Any]) -> t.Tuple[str, str]:
    """(prefill, decode) as SGLang dispatches them: the split fields fall back to attention_backend."""
    base = resolved.get("attention_backend")
    return (resolved.get("prefill_attention_backend") or base, resolved.get("decode_attention_backend") or base)


class Stub:
    """LAB: what a loaded FlashInfer module's entry points return here (no kernel runs); FlashInfer's optional
    entry points (probed with hasattr) are absent."""

    def __getattr__(self, attr: str) -> t.Any:
        if attr.startswith("__") or attr == "plan_with_staged_workspace_bytes":
            raise AttributeError(attr)
        return Stub()

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> Stub:
        return Stub()


class Attention:
    """One model's attention as SGLang's scheduler drives it, on a node without a GPU."""

    def __init__(self, server_args: t.Any, resolved: t.Mapping[str, t.Any], draft: bool) -> None:
        # pylint: disable=import-outside-toplevel
        import torch  # noqa: PLC0415
        from sglang.srt import runtime_context  # noqa: PLC0415
        from sglang.srt.configs.model_config import AttentionArch, ModelConfig  # noqa: PLC0415
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS  # noqa: PLC0415
        from sglang.srt.mem_cache import memory_pool  # noqa: PLC0415
        from sglang.srt.models.registry import ModelRegistry  # noqa: PLC0415
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: PLC0415

        modern = release_has("sglang.srt.arg_groups.model_override_base")  # SGLang 0.5.21 and later; else 0.5.15
        draft_path = resolved.get("speculative_draft_model_path")
        prefill, decode = attention_backends(resolved)
        algorithm = resolved.get("speculative_algorithm")
        model_cls = None
        if modern:
            from sglang.srt.arg_groups.model_override_base import model_config_of, resolving_view  # noqa: PLC0415
            from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype  # noqa: PLC0415
            from sglang.srt.model_executor.model_runner_components.load_model_utils import (  # noqa: PLC0415
                resolve_sliding_window_size,
            )

            config = ModelConfig.from_server_args(server_args, model_path=draft_path) if draft else model_config_of(server_args)
            runtime_context.publish(server_args, role="scheduler",
                                    ranks=runtime_context.SpawnRanks(world_rank=0, dp_rank=0, gpu_id=0))
            tp = runtime_context.parallel_widths_of(resolving_view(server_args))["attn_tp_size"]
            kv = configure_kv_cache_dtype(
                server_args_kv_cache_dtype=resolved.get("kv_cache_dtype") or "auto", model=None, model_dtype=config.dtype,
                is_draft_worker=draft, is_dflash=str(algorithm or "").upper() == "DFLASH",
                speculative_draft_attention_backend=resolved.get("speculative_draft_attention_backend"),
                speculative_draft_kv_cache_dtype=resolved.get("speculative_draft_kv_cache_dtype"))[1]
            model_cls = ModelRegistry.resolve_model_cls(config.hf_config.architectures)[0]
            model = types.SimpleNamespace(config=config.hf_config)
            if hasattr(model_cls, "get_attention_sliding_window_size"):
                model.get_attention_sliding_window_size = model_cls.get_attention_sliding_window_size.__get__(model)
            try:
                window = resolve_sliding_window_size(model, config)
            except AttributeError:  # a window the loaded model's constructor sets (EAGLE3's draft window): none given here
                window = resolve_sliding_window_size(types.SimpleNamespace(config=config.hf_config), config)
        else:
            # SGLang 0.5.15: the record is published with set_server_args; the widths come from process groups the
            # stand-in does not make, so the scheduler's values for one rank are held as the context's overrides; the KV
            # dtype is ModelRunner.configure_kv_cache_dtype's on a holder; the window is read inside load_model from the
            # loaded model, which the lab does not have: the lab serves such a release models without one
            from sglang.srt.layers.dp_attention import compute_dp_attention_world_info  # noqa: PLC0415
            from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: PLC0415

            config = ModelConfig.from_server_args(server_args, model_path=draft_path if draft else server_args.model_path)
            runtime_context.get_context().set_server_args(server_args)
            cp = int(getattr(server_args, "attn_cp_size", 1) or 1)
            _rank, tp, _dp_rank, dp = compute_dp_attention_world_info(server_args.enable_dp_attention, 0, server_args.tp_size,
                                                                      server_args.dp_size, cp)
            self.widths = runtime_context.get_parallel().override(
                tp_size=server_args.tp_size, tp_rank=0, attn_tp_size=tp, attn_tp_rank=0, attn_dp_size=dp, attn_dp_rank=0,
                attn_cp_size=cp, attn_cp_rank=0)
            self.widths.__enter__()
            holder = types.SimpleNamespace(server_args=server_args, model=torch.nn.Module(), dtype=config.dtype)
            ModelRunner.configure_kv_cache_dtype(holder)
            kv = holder.kv_cache_dtype
            model_cls = ModelRegistry.resolve_model_cls(config.hf_config.architectures)[0]
            asked = getattr(model_cls, "get_attention_sliding_window_size", None)
            try:
                answer = asked(types.SimpleNamespace(config=config.hf_config)) if asked else None
            except AttributeError:  # EAGLE3's draft window comes from its constructor: none given here
                answer = None
            if answer is not None or config.is_hybrid_swa or getattr(config, "attention_chunk_size", None) is not None:
                raise RuntimeError("LAB: SGLang %s reads a sliding window from the loaded model; the lab serves such a "
                                   "release only models without one" % getattr(sys.modules.get("sglang"), "__version__", "?"))
            window = None
        self.page = int(resolved.get("page_size") or 1)
        self.config, self.tp, self.window, self.kv = config, tp, window, kv
        self.runner = types.SimpleNamespace(
            device="cpu", gpu_id=0, model_config=config, server_args=server_args, dtype=config.dtype, kv_cache_dtype=kv,
            kv_cache_dtype_str=str(resolved.get("kv_cache_dtype") or "auto"), page_size=self.page,
            prefill_attention_backend_str=prefill, decode_attention_backend_str=decode, draft_attention_backend=None,
            is_draft_worker=draft, spec_algorithm=SpeculativeAlgorithm.from_string(algorithm),
            use_mla_backend=config.attention_arch == AttentionArch.MLA, init_new_workspace=False, sliding_window_size=window,
            is_hybrid_swa=bool(config.is_hybrid_swa), attention_chunk_size=getattr(config, "attention_chunk_size", None),
            hisparse_coordinator=None, model=torch.nn.Module(), max_running_requests=4, canary_manager=None,
            plan_stream_for_flashinfer="LAB: no CUDA stream")
        self.runner.req_to_token_pool = memory_pool.ReqToTokenPool(size=4, max_context_len=512, device="cpu",
                                                                   enable_memory_saver=False)
        if self.runner.use_mla_backend:
            pool = memory_pool.MLATokenToKVPool(size=2048 + self.page, page_size=self.page, dtype=kv, layer_num=1,
                                                kv_lora_rank=config.kv_lora_rank, qk_rope_head_dim=config.qk_rope_head_dim,
                                                device="cpu", enable_memory_saver=False)
        else:
            pool = memory_pool.MHATokenToKVPool(size=2048 + self.page, page_size=self.page, dtype=kv, layer_num=1,
                                                head_num=config.get_num_kv_heads(tp), head_dim=config.head_dim, device="cpu",
                                                enable_memory_saver=False, enable_alt_stream=False)
        self.runner.token_to_kv_pool = pool
        self.runner.token_to_kv_pool_allocator = types.SimpleNamespace(page_size=self.page, get_kvcache=lambda: pool)
        self.runner.kv_index_translator = None
        if modern:
            from sglang.srt.mem_cache import kv_index_translator  # noqa: PLC0415

            translator = kv_index_translator.KVIndexTranslator
            wanted = {"req_to_token": self.runner.req_to_token_pool.req_to_token, "token_to_kv_pool_allocator":
                      self.runner.token_to_kv_pool_allocator, "token_to_kv_pool": pool, "page_size": self.page, "device": "cpu",
                      "is_draft_worker": draft}
            takes = inspect.signature(translator).parameters
            self.runner.kv_index_translator = translator(**{key: value for key, value in wanted.items() if key in takes})
        self.backend = ATTENTION_BACKENDS[decode](self.runner)
        self.label = "%s %s (%s)" % ("draft" if draft else "model", config.model_path, type(self.backend).__name__)

    def describe(self) -> str:
        heads = int(self.config.num_attention_heads) // self.tp
        return "%s: %s, head dim %d, %d heads / %d KV heads per rank, KV cache %s, sliding window %s" % (
            self.label, self.config.dtype, self.config.head_dim, heads, self.config.get_num_kv_heads(self.tp), self.kv,
            self.window)

    def step(self, prefix: int, new: int, decode: bool) -> None:
        """One batch of one request through the backend: plan it, then run each kind of attention layer the model has."""
        # pylint: disable=import-outside-toplevel
        import torch  # noqa: PLC0415
        from sglang.srt.layers.radix_attention import RadixAttention  # noqa: PLC0415
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: PLC0415

        total = prefix + new
        table = self.runner.req_to_token_pool.req_to_token
        for position in range(total):
            table[0, position] = self.page + position
        seq = torch.tensor([total], dtype=torch.int32)
        batch = ForwardBatch(forward_mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND, batch_size=1,
                             input_ids=torch.zeros(new, dtype=torch.int64), req_pool_indices=torch.zeros(1, dtype=torch.int32),
                             seq_lens=seq, seq_lens_cpu=seq.clone(), seq_lens_sum=total,
                             out_cache_loc=torch.arange(self.page + prefix, self.page + total, dtype=torch.int64),
                             positions=torch.arange(prefix, total, dtype=torch.int64))
        if hasattr(self.runner.kv_index_translator, "bind_own_plan"):
            self.runner.kv_index_translator.bind_own_plan(batch)
        if not decode:
            batch.extend_prefix_lens, batch.extend_prefix_lens_cpu = torch.tensor([prefix], dtype=torch.int32), [prefix]
            batch.extend_seq_lens, batch.extend_seq_lens_cpu = torch.tensor([new], dtype=torch.int32), [new]
            batch.extend_num_tokens = new
        self.backend.init_forward_metadata(batch)
        if self.runner.use_mla_backend:
            return  # the MLA backend's forward runs the wrappers it planned; the layer shapes are DeepSeek's own code's
        config = self.config
        heads, kv_heads = int(config.num_attention_heads) // self.tp, int(config.get_num_kv_heads(self.tp))
        cap = float(getattr(config.hf_text_config, "attn_logit_softcapping", None) or 0.0)
        for window in [-1] + ([int(self.window)] if self.window else []):
            layer = RadixAttention(heads, config.head_dim, config.head_dim ** -0.5, kv_heads, layer_id=0, logit_cap=cap,
                                   sliding_window_size=window)
            q = torch.zeros(new, heads * config.head_dim, dtype=config.dtype)
            k = torch.zeros(new, kv_heads, config.head_dim, dtype=config.dtype)
            run = self.backend.forward_decode if decode else self.backend.forward_extend
            run(q, k, k.clone(), layer, batch, save_kv_cache=False)


@contextlib.contextmanager
def without_gpu(engine: Engine) -> t.Iterator[None]:
    """LAB: while SGLang's backend plans and runs, every FlashInfer module it asks for is loaded for real (the cache, or a
    JIT build: logged) and handed back as a Stub; Triton launches nothing; tensors are made in host memory; FlashInfer's
    device questions about a host tensor are answered for GPU 0 (the lab's torch reports the profile's GPUs)."""
    import torch  # noqa: PLC0415
    import triton.runtime.jit as triton_jit  # noqa: PLC0415
    from flashinfer import utils as fi_utils  # noqa: PLC0415
    from flashinfer.jit import core  # noqa: PLC0415

    load = core.JitSpec.build_and_load

    def load_for_real(spec: t.Any) -> Stub:
        engine.acquire(spec.name, lambda: load(spec))
        return Stub()

    def on_gpu0(original: t.Callable[[t.Any], t.Any]) -> t.Callable[[t.Any], t.Any]:
        return lambda device: original(torch.device("cuda", 0) if getattr(device, "type", None) == "cpu" else device)

    def host(factory: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
        def make(*args: t.Any, **kwargs: t.Any) -> t.Any:
            kwargs.pop("pin_memory", None)
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return factory(*args, **kwargs)
        return make

    undo: t.List[t.Tuple[t.Any, str, t.Any]] = []
    replacements = [(core.JitSpec, "build_and_load", load_for_real), (triton_jit.JITFunction, "run", lambda *a, **k: None)]
    replacements += [(torch, name, host(getattr(torch, name))) for name in ("empty", "zeros", "ones", "full", "arange", "tensor")]
    # FlashInfer 0.6.12 has no get_device_properties
    answers = {id(getattr(fi_utils, name)): on_gpu0(getattr(fi_utils, name))
               for name in ("get_compute_capability", "get_device_properties") if hasattr(fi_utils, name)}
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(("flashinfer", "sglang")):
            replacements += [(module, attr, answers[id(value)]) for attr, value in list(vars(module).items())
                             if id(value) in answers]
    for owner, attr, value in replacements:
        undo.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)
    try:
        yield
    finally:
        for owner, attr, value in reversed(undo):
            setattr(owner, attr, value)


def kernel_set_in_place() -> bool:
    """Whether the trtllm-gen FMHA kernel set this FlashInfer release pins is where FlashInfer looks for it (its
    checksums.txt, by the sha256 the release's artifacts module names)."""
    import hashlib  # noqa: PLC0415

    from flashinfer import artifacts  # noqa: PLC0415
    from flashinfer.jit import env as jit_env  # noqa: PLC0415

    listing = os.path.join(str(jit_env.FLASHINFER_CUBIN_DIR), artifacts.ArtifactPath.TRTLLM_GEN_FMHA, "checksums.txt")
    try:
        with open(listing, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest() == artifacts.CheckSumHash.TRTLLM_GEN_FMHA
    except OSError:
        return False


def built_files() -> t.Dict[str, t.Tuple[int, int]]:
    """The objects and libraries in FlashInfer's JIT cache with their mtime and size: a getter that adds or rewrites one
    compiled or linked at run time. (Loading a cached module rewrites build.ninja and runs ninja, a no-op; FlashInfer
    0.6.18's FLASHINFER_DISABLE_JIT refuses even warmed JIT-cache modules, only AOT ones load, so it cannot be used
    to prove this.)"""
    from flashinfer.jit import env as jit_env  # noqa: PLC0415

    found = {}
    for directory, _dirs, files in os.walk(str(jit_env.FLASHINFER_JIT_DIR)):
        for name in files:
            if name.endswith((".o", ".so")):
                path = os.path.join(directory, name)
                status = os.stat(path)
                found[path] = (status.st_mtime_ns, status.st_size)
    return found


class Engine:
    """The parts of the scheduler that reach FlashInfer."""

    def __init__(self, server_args: t.Any, resolved: t.Mapping[str, t.Any]) -> None:
        self.server_args = server_args
        self.resolved = resolved
        self.loaded: t.Dict[str, float] = {}
        self.prefixes: t.List[t.List[str]] = []
        self.lock = threading.Lock()
        self.sampling_backend = resolved.get("sampling_backend")
        self.prefill_backend, self.decode_backend = attention_backends(resolved)
        self.attention: t.List[Attention] = []
        self.used: t.List[str] = []

    def acquire(self, name: str, load: t.Callable[[], t.Any]) -> None:
        """One FlashInfer module loaded by FlashInfer itself: a cache lookup and load, or a JIT build."""
        kind = name
        for separator in ("_with_kv_cache", "_dtype_"):
            kind = kind.split(separator, 1)[0]
        self.used.append(kind)
        if name in self.loaded:
            return
        before = built_files()
        started = time.monotonic()
        load()
        self.loaded[name] = round(time.monotonic() - started, 2)
        after = built_files()
        new = sorted(path for path, stamp in after.items() if before.get(path) != stamp)
        LOG.info("FlashInfer module %s: %s in %.2f s", name,
                 "JIT-BUILT AT RUN TIME (%s)" % ", ".join(new) if new else "loaded from the cache", self.loaded[name])

    def attend(self, prefix: int, new: int) -> None:
        """A request's extend (after its cached prefix) and one decode step, through every model's attention backend."""
        if not self.attention:
            return
        with without_gpu(self):
            for attention in self.attention:
                attention.step(prefix, new, decode=False)
                attention.step(prefix + new, 1, decode=True)

    def warm_up(self) -> None:
        """SGLang's start-up warm-up request: greedy, one prefill and decode step through the attention backend."""
        import flashinfer  # noqa: PLC0415
        from flashinfer.jit import core as jit_core  # noqa: PLC0415

        archs = sorted("%d.%s" % arch for arch in jit_core.current_compilation_context.TARGET_CUDA_ARCHS)
        LOG.info("FlashInfer %s, target archs: %s", flashinfer.__version__, " ".join(archs) or "set()")
        trtllm_ready = self.decode_backend == "trtllm_mha" and kernel_set_in_place()
        if self.decode_backend == self.prefill_backend and (self.decode_backend == "flashinfer" or trtllm_ready):
            with without_gpu(self):
                self.attention = [Attention(self.server_args, self.resolved, draft=False)]
                if self.resolved.get("speculative_draft_model_path"):
                    self.attention.append(Attention(self.server_args, self.resolved, draft=True))
            for attention in self.attention:
                LOG.info("%s", attention.describe())
            self.attend(0, 8)
        elif self.decode_backend == "trtllm_mha":
            LOG.info("attention backend trtllm_mha without FlashInfer %s's kernel set in place: FlashInfer would download "
                     "the set at the first request (LAB: not simulated; the lab has no route off its bridge)",
                     flashinfer.__version__)
        else:
            LOG.info("attention backends %s / %s: FlashInfer's attention modules are not used (LAB: kernels of other "
                     "backends are not simulated)", self.prefill_backend, self.decode_backend)

    def generate(self, text: str, params: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
        from sglang.srt.sampling.sampling_params import TOP_K_ALL, SamplingParams  # noqa: PLC0415

        sampling = SamplingParams(**params)
        sampling.normalize(None)
        sampling.verify(32000)
        tokens = text.split()
        with self.lock:
            cached = 0
            for previous in self.prefixes:
                shared = 0
                while shared < min(len(previous), len(tokens) - 1) and previous[shared] == tokens[shared]:
                    shared += 1
                cached = max(cached, shared)
            self.prefixes.append(tokens)
            self.used = []
            # the stand-in's pools hold 512 tokens a request
            self.attend(min(cached, 256), min(max(len(tokens) - cached, 1), 254))
            greedy = sampling.top_k <= 1
            needs_kernel = sampling.top_p != 1.0 or sampling.top_k != TOP_K_ALL or sampling.min_p > 0
            if not greedy and needs_kernel and self.sampling_backend == "flashinfer":
                from flashinfer.sampling import get_sampling_module  # noqa: PLC0415

                self.acquire("sampling", get_sampling_module)
            used = sorted(set(self.used))
        return {"text": " ".join(reversed(tokens)) or "(simulated)", "meta_info": {
            "prefix_cache_hit": cached > 0, "cached_tokens": cached, "greedy": greedy, "flashinfer_modules": used,
            "lab_simulation": True}}


class State:
    def __init__(self) -> None:
        self.ready = False
        self.info: t.Dict[str, t.Any] = {}
        self.name = ""
        self.engine: t.Optional[Engine] = None
        self.server: t.Optional[http.server.ThreadingHTTPServer] = None


def handler_class(state: State) -> t.Type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "sglang-lab-standin"

        def log_message(self, format: str, *args: t.Any) -> None:
            LOG.debug(format, *args)

        def send(self, code: int, body: t.Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path in ("/health", "/health_generate"):
                self.send(200 if state.ready else 503, {"status": "ok" if state.ready else "starting"})
            elif path == "/v1/models":
                self.send(200, {"object": "list", "data": [{"id": state.name, "object": "model", "owned_by": "sglang"}]})
            elif path in ("/model_info", "/get_model_info"):
                loaded = dict(state.engine.loaded) if state.engine else {}
                self.send(200, dict(state.info, flashinfer_modules_loaded=loaded, lab_simulation=True))
            else:
                self.send(404, {"error": "not served by the lab stand-in"})

        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/generate" or not state.ready or state.engine is None:
                self.send(404 if state.ready else 503, {"error": "POST /generate only, once ready"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                result = state.engine.generate(str(body.get("text", "")), body.get("sampling_params") or {})
            except (ValueError, TypeError) as exc:
                self.send(400, {"error": str(exc)})
                return
            except Exception:  # the scheduler dies with the request, as SGLang's does
                LOG.error("Scheduler hit an exception:\n%s", traceback.format_exc())
                self.send(500, {"error": "the scheduler died; see the journal"})
                if state.server is not None:
                    threading.Thread(target=state.server.shutdown).start()
                state.ready = False
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            self.send(200, result)

    return Handler


def main(argv: t.Optional[t.List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", stream=sys.stderr)
    LOG.warning("LAB SIMULATION: SGLang stand-in: SGLang's own argument parsing and decisions, a simulated model and GPU "
                "(inferops.blackwell lab); no weights are loaded, no kernel runs")
    driver = "/usr/lib/inferops-lab/libcuda.so.1"
    if os.path.exists(driver):
        # LAB SIMULATION: the driver's library (every call: no device), loaded before any FlashInfer module, so one that
        # links the driver (trtllm's fmha_gen) loads as on a GPU node; its kernels never run
        import ctypes  # noqa: PLC0415

        ctypes.CDLL(driver, mode=ctypes.RTLD_GLOBAL)
        LOG.warning("LAB SIMULATION: the NVIDIA driver's libcuda.so.1 is a stand-in without a GPU (%s)", driver)
    import sglang  # noqa: PLC0415
    from sglang.srt.server_args import prepare_server_args  # noqa: PLC0415

    LOG.info("SGLang %s; CUDA_HOME=%s PATH=%s", getattr(sglang, "__version__", "?"), os.environ.get("CUDA_HOME", "(unset)"),
             os.environ.get("PATH", ""))
    server_args = prepare_server_args(sys.argv[1:] if argv is None else argv)  # SGLang's parser: exits 2 on a bad flag
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
        resolved = server_args.resolved_dict()
    else:  # SGLang 0.5.15 resolved the record in ServerArgs.__post_init__
        resolved = {name: getattr(server_args, name) for name in server_args.__dataclass_fields__}
    import torch  # noqa: PLC0415

    gpus = torch.cuda.device_count()
    wanted = int(resolved.get("tp_size") or 1) * int(resolved.get("dp_size") or 1) * int(resolved.get("pp_size") or 1)
    if wanted + int(resolved.get("base_gpu_id") or 0) > gpus:
        # The scheduler processes bind GPUs base_gpu_id .. +tp*dp*pp; fewer visible GPUs fail there.
        raise SystemExit("LAB SIMULATION of the scheduler: tp x dp x pp = %d GPUs from base_gpu_id %s; %d visible"
                         % (wanted, resolved.get("base_gpu_id"), gpus))
    engine = Engine(server_args, resolved)
    LOG.info("GPUs (torch): %d x %s; attention backend %s (prefill %s, decode %s), sampling backend %s, speculative %s",
             gpus, ".".join(map(str, torch.cuda.get_device_capability(0))) if gpus else "-", resolved.get("attention_backend"),
             engine.prefill_backend, engine.decode_backend, engine.sampling_backend, resolved.get("speculative_algorithm") or "off")

    state = State()
    state.engine = engine
    state.name = resolved.get("served_model_name") or resolved.get("model_path")
    state.info = {key: resolved.get(key) for key in ("model_path", "served_model_name", "tp_size", "attention_backend",
                                                     "sampling_backend", "kv_cache_dtype", "speculative_algorithm")}
    state.info["sglang_version"] = getattr(sglang, "__version__", None)
    load_seconds = float(os.environ.get("INFEROPS_LAB_MODEL_LOAD_SECONDS", "1"))
    LOG.info("loading model %s (simulated: %.0f s)", resolved.get("model_path"), load_seconds)
    time.sleep(load_seconds)

    server = http.server.ThreadingHTTPServer((resolved.get("host") or "127.0.0.1", int(resolved.get("port") or 30000)),
                                             handler_class(state))
    state.server = server
    died = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=server.shutdown).start())
    signal.signal(signal.SIGUSR1, lambda signum, frame: died.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    LOG.info("listening on %s:%s; warming up (a greedy request)", resolved.get("host"), resolved.get("port"))
    try:
        engine.warm_up()
    except Exception:  # reported in the journal, the unit fails
        LOG.error("warm-up failed:\n%s", traceback.format_exc())
        server.shutdown()
        return 1
    state.ready = True
    state.info["warm_up_modules"] = dict(engine.loaded)
    LOG.info("The server is fired up and ready to roll!")
    thread.join()
    return 1 if died.is_set() else 0
