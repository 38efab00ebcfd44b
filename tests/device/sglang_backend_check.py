# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's own attention backends on a real GPU, from the cache jit_cache's derivation warmed (tests/device).

For each --config given: SGLang's parser and resolution, then the attention backend its registry picks
(FlashInferAttnBackend, or FlashInferMLAAttnBackend for an MLA model) over the planner's runner on device "cuda"
(plugins/module_utils/inferops_sglang_plan.py: the same fields, on the GPU), and three requests as a server runs them:
a new prompt (forward_extend, KV saved by the backend), a prompt whose first tokens are the first one's (forward_extend
after a cached prefix) and a decode step (forward_decode). Each output is compared with attention computed by torch in
float32 from the same Q, K and V. Around every call FlashInfer's JIT cache is watched: an object or library added or
rewritten is a compile at run time and fails the check. Triton's and SGLang's own JIT caches are listed before and after
(what SGLang's own kernels build at the first requests). Prints one JSON document.

Test equipment: runs in the H200 harness only, with sgl_kernel answered by an import stub (tests/device/stubs).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "plugins", "module_utils"))


def files_under(root: str, suffixes: t.Tuple[str, ...] = ()) -> t.Dict[str, t.Tuple[int, int]]:
    found = {}
    for directory, _dirs, names in os.walk(root):
        for name in names:
            if not suffixes or name.endswith(suffixes):
                path = os.path.join(directory, name)
                status = os.stat(path)
                found[path] = (status.st_mtime_ns, status.st_size)
    return found


def reference(q: t.Any, keys: t.Any, values: t.Any, scale: float, *, offset: int, window: int, cap: float) -> t.Any:
    """Causal attention in float32: query i (at position offset + i) sees keys 0 .. offset + i (and, with a window, only
    the last window + 1 of them); GQA by repeating KV heads; an optional tanh soft-cap."""
    import torch

    q32, k32, v32 = q.float(), keys.float(), values.float()
    group = q32.shape[1] // k32.shape[1]
    k32, v32 = k32.repeat_interleave(group, dim=1), v32.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q32, k32) * scale
    if cap > 0:
        scores = cap * torch.tanh(scores / cap)
    rows = torch.arange(q32.shape[0], device=q.device)[:, None] + offset
    cols = torch.arange(k32.shape[0], device=q.device)[None, :]
    mask = cols > rows
    if window >= 0:
        mask = mask | (cols < rows - window)
    scores = scores.masked_fill(mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v32)


def dense(planner: t.Any, node: t.Any, widths: t.Any, backend: t.Any, watch: t.Callable[[str], t.Dict[str, t.Any]]) -> t.List[t.Any]:
    import torch

    results = []
    for layer in planner.layers(node, widths):
        heads, kv_heads, dim = layer.tp_q_head_num, layer.tp_k_head_num, layer.head_dim
        generator = torch.Generator(device="cuda").manual_seed(0)

        def rand(*shape: int, generator: t.Any = generator) -> t.Any:
            return torch.randn(*shape, device="cuda", dtype=node.dtype, generator=generator)

        total = 25
        q, k, v = rand(total, heads, dim), rand(total, kv_heads, dim), rand(total, kv_heads, dim)
        window = int(layer.sliding_window_size)
        for what, mode, prefix, new in (("a new prompt", "EXTEND", 0, 16), ("a prefix-cache hit", "EXTEND", 16, 8),
                                        ("a decode step", "DECODE", 24, 1)):
            forward_batch = planner.batch(node, mode, [prefix], [new])
            span = slice(prefix, prefix + new)
            stamp = watch("before")
            backend.init_forward_metadata(forward_batch)
            run = backend.forward_decode if mode == "DECODE" else backend.forward_extend
            # as RadixAttention.forward hands them over: Q flat, K and V per head
            out = run(q[span].reshape(new, -1).contiguous(), k[span].contiguous(), v[span].contiguous(), layer, forward_batch,
                      save_kv_cache=True)
            torch.cuda.synchronize()
            changed = watch("after", since=stamp)
            out = out.view(new, heads, dim).float()
            plain = reference(q[span], k[:prefix + new], v[:prefix + new], layer.scaling, offset=prefix, window=window, cap=0.0)
            capped = reference(q[span], k[:prefix + new], v[:prefix + new], layer.scaling, offset=prefix, window=window,
                               cap=layer.logit_cap)
            results.append({"layer": "window %d, logit cap %s" % (window, layer.logit_cap), "request": what,
                            "kv_cache_dtype": str(node.kv_cache_dtype),
                            "max_abs_error": round(float((out - plain).abs().max()), 5),
                            "max_abs_error_vs_soft_capped": round(float((out - capped).abs().max()), 5),
                            "flashinfer_built_at_run_time": changed["flashinfer"], "new_in_other_caches": changed["others"]})
    return results


def mla(planner: t.Any, node: t.Any, widths: t.Any, backend: t.Any, watch: t.Callable[..., t.Dict[str, t.Any]]) -> t.List[t.Any]:
    """DeepSeek-V2's two attention layers as its model code makes them: the ragged MHA one (qk 192 / v 128) for a new
    prompt, the absorbed one over the latent cache (576 = kv_lora_rank 512 + rope 64, one KV head) for a prefix hit and
    decode. The latent cache is written directly (DeepSeek's model writes it, not the backend)."""
    import torch
    from sglang.srt.layers.radix_attention import RadixAttention

    config = node.model_config
    heads = int(config.num_attention_heads) // int(widths["attn_tp_size"])
    qk, vd = int(config.qk_nope_head_dim) + int(config.qk_rope_head_dim), int(config.v_head_dim)
    latent, rope = int(config.kv_lora_rank), int(config.qk_rope_head_dim)
    scale = float(config.scaling)  # DeepSeek's: qk_head_dim ** -0.5 with YaRN's mscale squared; the MLA backend plans with it
    mha = RadixAttention(heads, qk, scale, heads, layer_id=0, v_head_dim=vd)
    mqa = RadixAttention(heads, latent + rope, scale, 1, layer_id=0, v_head_dim=latent)
    generator = torch.Generator(device="cuda").manual_seed(0)
    total = 25
    cache = torch.randn(total, 1, latent + rope, device="cuda", dtype=node.dtype, generator=generator)
    pool = node.token_to_kv_pool
    pool.get_key_buffer(0)[node.page_size:node.page_size + total] = cache.to(pool.get_key_buffer(0).dtype)
    results = []
    # a new prompt: ragged MHA attention of the new tokens' own q, k, v
    q = torch.randn(16, heads, qk, device="cuda", dtype=node.dtype, generator=generator)
    k = torch.randn(16, heads, qk, device="cuda", dtype=node.dtype, generator=generator)
    v = torch.randn(16, heads, vd, device="cuda", dtype=node.dtype, generator=generator)
    for what, mode, prefix, new in (("a new prompt", "EXTEND", 0, 16), ("a prefix-cache hit", "EXTEND", 16, 8),
                                    ("a decode step", "DECODE", 24, 1)):
        forward_batch = planner.batch(node, mode, [prefix], [new])
        stamp = watch("before")
        backend.init_forward_metadata(forward_batch)
        if prefix == 0:
            out = backend.forward_extend(q.reshape(16, -1), k, v, mha, forward_batch, save_kv_cache=False).view(new, heads, vd)
            expected = reference(q, k, v, scale, offset=0, window=-1, cap=0.0)
        else:
            query = torch.randn(new, heads, latent + rope, device="cuda", dtype=node.dtype, generator=generator)
            run = backend.forward_decode if mode == "DECODE" else backend.forward_extend
            out = run(query.reshape(new, -1), None, None, mqa, forward_batch, save_kv_cache=False).view(new, heads, latent)
            keys = cache[:prefix + new]
            expected = reference(query, keys, keys[:, :, :latent], scale, offset=prefix, window=-1, cap=0.0)
        torch.cuda.synchronize()
        changed = watch("after", since=stamp)
        results.append({"layer": "MLA %s" % ("ragged MHA" if prefix == 0 else "absorbed, latent cache"), "request": what,
                        "max_abs_error": round(float((out.float() - expected).abs().max()), 5),
                        "flashinfer_built_at_run_time": changed["flashinfer"], "new_in_other_caches": changed["others"]})
    return results


def main(paths: t.List[str]) -> int:
    import inferops_sglang_plan as planner
    import torch
    from flashinfer.jit import env as jit_env
    from sglang.srt.arg_groups.model_override_base import model_config_of
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.server_args import prepare_server_args

    others = [os.environ.get("TRITON_CACHE_DIR", ""), os.environ.get("SGLANG_JIT_CACHE_DIR", "")]

    def watch(phase: str, since: t.Optional[t.Dict[str, t.Any]] = None) -> t.Dict[str, t.Any]:
        now = {"flashinfer": files_under(str(jit_env.FLASHINFER_JIT_DIR), (".o", ".so")),
               "others": {path: stamp for root in others if root for path, stamp in files_under(root).items()}}
        if since is None:
            return now
        return {key: sorted(path for path, stamp in now[key].items() if since[key].get(path) != stamp) for key in now}

    report: t.Dict[str, t.Any] = {"gpu": torch.cuda.get_device_name(0), "checks": {}, "ok": True}
    for path in paths:
        started = time.monotonic()
        try:
            server_args = prepare_server_args(["--config", path])
            server_args.resolve_once()
            resolved = server_args.resolved_dict()
            widths = planner.publish(server_args, contextlib.ExitStack())
            node = planner.runner(server_args, resolved, model_config_of(server_args), False, widths, device="cuda")
            backend = ATTENTION_BACKENDS[node.decode_attention_backend_str](node)
            check = mla if node.use_mla_backend else dense
            results = check(planner, node, widths, backend, watch)
            # bf16/fp16 against float32 torch; an FP8 KV cache rounds K and V to 3 mantissa bits
            bound = 0.25 if "float8" in str(node.kv_cache_dtype) else 0.05
            ok = all(not item["flashinfer_built_at_run_time"] and item["max_abs_error"] < bound for item in results)
            report["checks"][path] = {"backend": type(backend).__name__, "results": results, "ok": ok,
                                      "seconds": round(time.monotonic() - started, 1)}
        except Exception as exc:  # pylint: disable=broad-exception-caught
            report["checks"][path] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc),
                                      "traceback": traceback.format_exc()[-3000:]}
        report["ok"] = report["ok"] and report["checks"][path]["ok"]
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
