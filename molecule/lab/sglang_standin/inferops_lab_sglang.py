# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- SGLang's server with the model and the GPU simulated.

Test equipment for the inferops.blackwell lab (lab nodes have no GPU and no model weights).
`python -m sglang.launch_server` in the lab venv runs this module. Everything SGLang decides
comes from the real SGLang release installed beside it:
- the command line and --config are parsed by SGLang's own `prepare_server_args` (a flag or a
  value SGLang rejects fails here with SGLang's message), and resolved by `resolve_once`
  (attention and sampling backends, KV cache dtype, page size: SGLang's own code, given the
  node's simulated GPUs, which torch reports through the lab's torch shim);
- the model's shape is SGLang's `ModelConfig` of the model directory (config.json);
- requests are normalised by SGLang's `SamplingParams`; the decode tensor-core choice is
  SGLang's `should_use_tensor_core`.
What is simulated: loading weights (a sleep) and running kernels (none run). FlashInfer's
modules are acquired through FlashInfer's own getters at the moments SGLang's code calls them
(sources: sglang/srt/layers/attention/flashinfer_backend.py, sglang/srt/layers/sampler.py):
- the FlashInfer attention backend's modules at the start-up warm-up request (a greedy one);
- `sampling` at the first request that needs top-k / top-p / min-p (a temperature-only or
  greedy request samples with torch);
- `cascade` (merge_state) at the first request that hits the prefix cache.
Each acquisition logs whether the module came from the cache or was compiled at run time (an object or library
in FlashInfer's cache added or rewritten); a getter that fails fails the request, and the server exits, as
SGLang's scheduler does.
Serves /health, /health_generate, /v1/models, /model_info and POST /generate.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
import typing as t

LOG = logging.getLogger("sglang.launch_server")


def attention_backends(resolved: t.Mapping[str, t.Any]) -> t.Tuple[str, str]:
    """(prefill, decode) as SGLang dispatches them: the split fields fall back to attention_backend."""
    base = resolved.get("attention_backend")
    return (resolved.get("prefill_attention_backend") or base, resolved.get("decode_attention_backend") or base)


class Model:
    """What the FlashInfer backend reads of one model: SGLang's ModelConfig for it."""

    def __init__(self, server_args: t.Any, draft: bool = False) -> None:
        from sglang.srt.arg_groups.model_override_base import model_config_of  # noqa: PLC0415
        from sglang.srt.configs.model_config import ModelConfig  # noqa: PLC0415

        config = (ModelConfig.from_server_args(server_args, model_path=server_args.speculative_draft_model_path) if draft
                  else model_config_of(server_args))
        tp = int(getattr(server_args, "tp_size", 1) or 1)
        self.draft = draft
        self.path = config.model_path
        self.dtype = config.dtype
        self.head_dim = int(config.head_dim)
        self.v_head_dim = int(config.v_head_dim or config.head_dim)
        self.heads = int(config.num_attention_heads) // tp
        self.kv_heads = int(config.get_num_kv_heads(tp))
        self.sliding_window = config.sliding_window_size if config.is_hybrid_swa else None
        self.logit_cap = float(getattr(config.hf_text_config, "attn_logit_softcapping", None) or 0.0)


def kv_dtype(resolved: t.Mapping[str, t.Any], model: Model) -> t.Any:
    """The KV cache's torch dtype, by SGLang's own mapping (ModelRunner.configure_kv_cache_dtype)."""
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype  # noqa: PLC0415

    return configure_kv_cache_dtype(
        server_args_kv_cache_dtype=resolved.get("kv_cache_dtype") or "auto", model=None, model_dtype=model.dtype,
        is_draft_worker=model.draft, is_dflash=str(resolved.get("speculative_algorithm") or "").upper() == "DFLASH",
        speculative_draft_attention_backend=resolved.get("speculative_draft_attention_backend"),
        speculative_draft_kv_cache_dtype=resolved.get("speculative_draft_kv_cache_dtype"))[1]


def flashinfer_attention(resolved: t.Mapping[str, t.Any], model: Model) -> t.List[t.Tuple[str, t.Any]]:
    """The modules SGLang's FlashInfer backend acquires for one model: one paged/ragged prefill module per wrapper
    (a second one with the sliding window), and for decode the prefill module again when tensor cores are used
    (SGLang's own should_use_tensor_core), else the decode module."""
    import torch  # noqa: PLC0415
    from flashinfer.decode import get_batch_decode_module  # noqa: PLC0415
    from flashinfer.prefill import get_batch_prefill_module  # noqa: PLC0415
    from flashinfer.utils import determine_attention_backend  # noqa: PLC0415
    from sglang.srt.layers.attention.flashinfer_backend import should_use_tensor_core  # noqa: PLC0415
    from sglang.srt.runtime_context import get_platform  # noqa: PLC0415

    sm100 = get_platform().is_sm100
    if sm100:
        LOG.warning("LAB SIMULATION: FlashInfer attention on SM 10.x (SGLang's ragged prefill on fa2 / CUTLASS FMHA) is not "
                    "simulated; only the paged prefill and decode modules are acquired")
    kv = kv_dtype(resolved, model)
    tensor_cores = should_use_tensor_core(kv_cache_dtype=kv, num_attention_heads=model.heads, num_kv_heads=model.kv_heads)
    calls: t.List[t.Tuple[str, t.Any]] = []
    windows = [True, False] if model.sliding_window is not None else [False]
    for window in windows:
        args = (model.dtype, kv, model.dtype, torch.int32, model.head_dim, model.v_head_dim, 0, window, model.logit_cap > 0)
        calls.append(("batch_prefill (fa2) for %s" % model.path, lambda args=args: get_batch_prefill_module("fa2", *args, False)))
        if not sm100:
            # the ragged wrapper is made with backend "auto": its plan asks FlashInfer which (on SM 10.x SGLang passes fa2
            # or FlashInfer's CUTLASS FMHA instead)
            ragged = determine_attention_backend(torch.device("cuda", 0), 0, False, False, model.dtype, kv,
                                                 head_dim_qk=model.head_dim, head_dim_vo=model.v_head_dim)
            calls.append(("ragged prefill (%s) for %s" % (ragged, model.path),
                          lambda args=args, ragged=ragged: get_batch_prefill_module(ragged, *args, False)))
        if tensor_cores:
            calls.append(("decode with tensor cores (batch_prefill fa2) for %s" % model.path,
                          lambda args=args: get_batch_prefill_module("fa2", *args, False)))
        else:
            calls.append(("batch_decode for %s" % model.path, lambda args=args: get_batch_decode_module(*args)))
    return calls


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

    def acquire(self, label: str, getter: t.Callable[[], t.Any]) -> None:
        """One FlashInfer module through FlashInfer's own getter: a cache lookup and load, or a JIT build."""
        if label in self.loaded:
            return
        before = built_files()
        started = time.monotonic()
        getter()
        self.loaded[label] = round(time.monotonic() - started, 2)
        after = built_files()
        new = sorted(path for path, stamp in after.items() if before.get(path) != stamp)
        LOG.info("FlashInfer module %s: %s in %.2f s", label,
                 "JIT-BUILT AT RUN TIME (%s)" % ", ".join(new) if new else "loaded from the cache", self.loaded[label])

    def warm_up(self) -> None:
        """SGLang's start-up warm-up request: greedy, one prefill and decode step through the attention backend."""
        import flashinfer  # noqa: PLC0415
        from flashinfer.jit import core as jit_core  # noqa: PLC0415

        archs = sorted("%d.%s" % arch for arch in jit_core.current_compilation_context.TARGET_CUDA_ARCHS)
        LOG.info("FlashInfer %s, target archs: %s", flashinfer.__version__, " ".join(archs) or "set()")
        models = [Model(self.server_args)]
        if self.resolved.get("speculative_draft_model_path"):
            models.append(Model(self.server_args, draft=True))
        if "flashinfer" in (self.prefill_backend, self.decode_backend):
            for model in models:
                LOG.info("model %s: %s, head dim %d, %d heads / %d KV heads per rank, KV cache %s, sliding window %s, "
                         "logit cap %s", model.path, model.dtype, model.head_dim, model.heads, model.kv_heads,
                         kv_dtype(self.resolved, model), model.sliding_window, model.logit_cap or "none")
                for label, getter in flashinfer_attention(self.resolved, model):
                    self.acquire(label, getter)
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
            hit = any(previous[:1] == tokens[:1] and tokens for previous in self.prefixes)
            self.prefixes.append(tokens)
            used = []
            if hit and "flashinfer" in (self.prefill_backend, self.decode_backend):
                # A cached prefix: the extend step merges the prefix's and the new tokens' attention states.
                from flashinfer.cascade import get_cascade_module  # noqa: PLC0415

                self.acquire("cascade (merge_state)", get_cascade_module)
                used.append("cascade")
            greedy = sampling.top_k <= 1
            needs_kernel = sampling.top_p != 1.0 or sampling.top_k != TOP_K_ALL or sampling.min_p > 0
            if not greedy and needs_kernel and self.sampling_backend == "flashinfer":
                from flashinfer.sampling import get_sampling_module  # noqa: PLC0415

                self.acquire("sampling", get_sampling_module)
                used.append("sampling")
        return {"text": " ".join(reversed(tokens)) or "(simulated)", "meta_info": {
            "prefix_cache_hit": hit, "greedy": greedy, "flashinfer_modules": used, "lab_simulation": True}}


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
    import sglang  # noqa: PLC0415
    from sglang.srt.server_args import prepare_server_args  # noqa: PLC0415

    LOG.info("SGLang %s; CUDA_HOME=%s PATH=%s", getattr(sglang, "__version__", "?"), os.environ.get("CUDA_HOME", "(unset)"),
             os.environ.get("PATH", ""))
    server_args = prepare_server_args(sys.argv[1:] if argv is None else argv)  # SGLang's parser: exits 2 on a bad flag
    server_args.resolve_once()
    resolved = server_args.resolved_dict()
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
