# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- an SGLang stand-in: `python -m sglang.launch_server`.

Test equipment for the inferops.blackwell lab (lab nodes have no GPU, and SGLang needs
one). It takes SGLang's flags for the autoregressive and the speculative services,
refuses what SGLang refuses, and starts FlashInfer the way SGLang does as far as
FlashInfer is concerned: `import flashinfer` (which resolves the target arch set from
the GPUs and the nvcc at CUDA_HOME), then the sampling module -- JIT build or cache
lookup and load -- on the first sampling call of the warm-up, and with FlashInfer
attention the paged decode and prefill modules for the dtype and head dim in the
model directory's config.json. It serves /health,
/health_generate, /v1/models and /model_info. It never loads a model or runs a kernel.
"""

from __future__ import annotations

import argparse
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
SPECULATIVE_KNOBS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")
ATTENTION_BACKENDS = ("flashinfer", "triton", "trtllm_mha", "fa3", "torch_native")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang.launch_server", description="LAB SIMULATION of SGLang's server")
    p.add_argument("--config", help="YAML file with the same keys as the flags")
    p.add_argument("--model-path", "--model")
    p.add_argument("--served-model-name")
    p.add_argument("--tokenizer-path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--attention-backend", choices=ATTENTION_BACKENDS)
    p.add_argument("--sampling-backend", choices=("flashinfer", "pytorch"))
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--context-length", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--log-level", default="info")
    p.add_argument("--speculative-algorithm", choices=ALGORITHMS)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-dflash-block-size", type=int)
    return p


def read_config(path: str) -> t.Dict[str, str]:
    """Flat `key: value` YAML, as --config takes (the stand-in's venv has no YAML library)."""
    values = {}
    with open(path) as handle:
        for number, line in enumerate(handle, start=1):
            text = line.split("#", 1)[0].rstrip()
            if not text.strip() or text.strip() == "---":
                continue
            if ":" not in text or text.startswith((" ", "\t", "-")):
                raise SystemExit("%s:%d: only flat `key: value` lines are understood by the lab stand-in" % (path, number))
            key, value = text.split(":", 1)
            values[key.strip().replace("-", "_")] = value.strip().strip("'\"")
    return values


def parse(argv: t.List[str]) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if args.config:
        for key, value in read_config(args.config).items():
            flag = "--" + key.replace("_", "-")
            if not any(flag in action.option_strings for action in p._actions):
                p.error("unknown key %r in %s" % (key, args.config))
            if getattr(args, key, None) in (None, p.get_default(key), False):
                action = next(a for a in p._actions if flag in a.option_strings)
                setattr(args, action.dest, value.lower() == "true" if action.nargs == 0 else (action.type or str)(value))
    if not args.model_path:
        p.error("--model-path is required")
    return args


def gpu_capabilities() -> t.List[t.Tuple[int, int]]:
    import torch  # noqa: PLC0415 -- imported late, like SGLang's scheduler does

    return [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]


def validate(args: argparse.Namespace, capabilities: t.List[t.Tuple[int, int]]) -> None:
    """What SGLang refuses before it loads anything."""
    if not os.path.isdir(args.model_path):
        raise SystemExit("model path %s does not exist (the lab has no hub access)" % args.model_path)
    if args.tp_size * args.dp_size > len(capabilities) - args.base_gpu_id:
        raise SystemExit("tp_size %d x dp_size %d needs %d GPUs from base_gpu_id %d; %d visible"
                         % (args.tp_size, args.dp_size, args.tp_size * args.dp_size, args.base_gpu_id, len(capabilities)))
    if args.speculative_algorithm:
        given = [knob for knob in SPECULATIVE_KNOBS if getattr(args, knob) is not None]
        if given and len(given) != len(SPECULATIVE_KNOBS):
            raise SystemExit("set all or none of --speculative-num-steps, --speculative-eagle-topk, "
                             "--speculative-num-draft-tokens (got %s)" % ", ".join(given))
        if args.speculative_algorithm != "NGRAM" and not args.speculative_draft_model_path:
            raise SystemExit("--speculative-algorithm %s needs --speculative-draft-model-path" % args.speculative_algorithm)
        if args.speculative_algorithm == "DFLASH" and (args.pp_size != 1 or args.enable_dp_attention):
            raise SystemExit("DFLASH needs --pp-size 1 and no --enable-dp-attention")
    elif args.speculative_draft_model_path or any(getattr(args, knob) is not None for knob in SPECULATIVE_KNOBS):
        raise SystemExit("speculative options given without --speculative-algorithm")
    majors = {major for major, _minor in capabilities}
    if args.attention_backend == "fa3" and majors != {9}:
        raise SystemExit("fa3 attention supports Hopper (SM 9.x) only")
    if args.attention_backend == "trtllm_mha" and 12 in majors:
        raise SystemExit("trtllm_mha attention does not support SM 12.x")


def default_backends(args: argparse.Namespace, capabilities: t.List[t.Tuple[int, int]]) -> None:
    if args.sampling_backend is None:
        args.sampling_backend = "flashinfer"
    if args.attention_backend is None:
        # Hopper gets fa3; SM 10.x trtllm_mha (recent SGLang's pick there for many models; its kernels are not
        # simulated); SM 12.x and the rest FlashInfer's attention, SGLang's default on SM 12.x.
        majors = {major for major, _minor in capabilities}
        args.attention_backend = "fa3" if majors == {9} else "trtllm_mha" if majors == {10} else "flashinfer"


def warm_up_flashinfer(args: argparse.Namespace) -> t.Dict[str, t.Any]:
    """The first sampling call of SGLang's warm-up, as far as FlashInfer is concerned."""
    result: t.Dict[str, t.Any] = {"sampling_backend": args.sampling_backend}
    if args.sampling_backend != "flashinfer":
        LOG.info("sampling backend %s: FlashInfer not used for sampling", args.sampling_backend)
        return result
    import flashinfer  # noqa: PLC0415
    from flashinfer.jit import core as jit_core  # noqa: PLC0415
    from flashinfer.jit.sampling import gen_sampling_module  # noqa: PLC0415

    archs = sorted("%d.%s" % arch for arch in jit_core.current_compilation_context.TARGET_CUDA_ARCHS)
    LOG.info("FlashInfer %s, target archs: %s", flashinfer.__version__, " ".join(archs) or "set()")
    spec = gen_sampling_module()  # raises "FlashInfer requires GPUs with sm75 or higher" on an empty set
    cached = spec.is_compiled
    started = time.monotonic()
    LOG.info("sampling module: %s", "cached at %s" % spec.get_library_path() if cached else "not cached: JIT compiling")
    spec.build_and_load()
    result.update({"flashinfer_version": flashinfer.__version__, "archs": archs, "sampling_cached": cached,
                   "sampling_library": str(spec.get_library_path()), "sampling_seconds": round(time.monotonic() - started, 1)})
    LOG.info("sampling module ready in %.1f s", result["sampling_seconds"])
    if args.attention_backend == "flashinfer":
        result["attention"] = warm_up_attention(args.model_path)
    return result


def model_attention_shape(model_path: str) -> t.Tuple[str, int]:
    """dtype and head dim from the model's config.json, the way SGLang reads them."""
    with open(os.path.join(model_path, "config.json")) as handle:
        config = json.load(handle)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    dtype = {"bfloat16": "bf16", "float16": "fp16"}[config.get("torch_dtype", "bfloat16")]
    return dtype, int(head_dim)


def warm_up_attention(model_path: str) -> t.Dict[str, t.Any]:
    """FlashInfer's paged decode and prefill modules for the model's dtype and head dim: cache lookup, else JIT build."""
    import torch  # noqa: PLC0415
    from flashinfer.jit.attention import gen_batch_decode_module, gen_batch_prefill_module  # noqa: PLC0415

    dtype_name, head_dim = model_attention_shape(model_path)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    specs = {
        "decode": gen_batch_decode_module(dtype, dtype, dtype, torch.int32, head_dim, head_dim, 0, False, False),
        "prefill": gen_batch_prefill_module("fa2", dtype, dtype, dtype, torch.int32, head_dim, head_dim, 0, False, False, False),
    }
    result = {}
    for kind, spec in specs.items():
        cached = spec.is_compiled
        LOG.info("attention %s module (%s, head_dim %d): %s", kind, dtype_name, head_dim,
                 "cached at %s" % spec.get_library_path() if cached else "not cached: JIT compiling")
        spec.build_and_load()
        result[kind] = {"cached": cached, "library": str(spec.get_library_path())}
    return result


class State:
    """What the HTTP handlers report."""

    def __init__(self) -> None:
        self.ready = False
        self.info: t.Dict[str, t.Any] = {}
        self.name = ""


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
                self.send(200, dict(state.info, model_path=state.info.get("model_path"), lab_simulation=True))
            else:
                self.send(404, {"error": "not served by the lab stand-in"})

    return Handler


def main(argv: t.Optional[t.List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", stream=sys.stderr)
    LOG.warning("LAB SIMULATION: SGLang stand-in (inferops.blackwell lab); no model is loaded, no kernel runs")
    args = parse(sys.argv[1:] if argv is None else argv)
    LOG.info("CUDA_HOME=%s PATH=%s", os.environ.get("CUDA_HOME", "(unset)"), os.environ.get("PATH", ""))
    capabilities = gpu_capabilities()
    LOG.info("GPUs (torch): %s", ", ".join("%d.%d" % c for c in capabilities) or "none")
    validate(args, capabilities)
    default_backends(args, capabilities)
    LOG.info("attention backend %s, sampling backend %s, speculative %s", args.attention_backend,
             args.sampling_backend, args.speculative_algorithm or "off")

    state = State()
    state.name = args.served_model_name or args.model_path
    state.info = {"model_path": args.model_path, "served_model_name": state.name, "tp_size": args.tp_size,
                  "speculative_algorithm": args.speculative_algorithm, "attention_backend": args.attention_backend}
    load_seconds = float(os.environ.get("INFEROPS_LAB_MODEL_LOAD_SECONDS", "1"))
    LOG.info("loading model %s (simulated: %.0f s)", args.model_path, load_seconds)
    time.sleep(load_seconds)

    server = http.server.ThreadingHTTPServer((args.host, args.port), handler_class(state))
    signal.signal(signal.SIGTERM, lambda signum, frame: threading.Thread(target=server.shutdown).start())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    LOG.info("listening on %s:%d; warming up", args.host, args.port)
    try:
        state.info.update(warm_up_flashinfer(args))
    except Exception:
        LOG.error("warm-up failed:\n%s", traceback.format_exc())
        server.shutdown()
        return 1
    state.ready = True
    LOG.info("The server is fired up and ready to roll!")
    thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
