# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""On a real GPU: FlashInfer's wrappers called the way SGLang's FlashInfer backend calls them, for three model
shapes, plus merge_state and sampling, from the modules jit_cache warmed, compiling nothing.

Run as the service user in the services' environment after jit_cache warmed (tests/device/run-h200.sh does).
SGLang's calls (sglang/srt/layers/attention/flashinfer_backend.py, 0.5.21): a paged prefill wrapper with backend
"fa2", a ragged prefill wrapper with backend "auto" (FlashInfer picks), a paged decode wrapper with backend "fa2"
and tensor cores when the GQA group is >= 4 (bf16 KV); a model with a sliding window gets a second set of
wrappers with window_left; a model with a logit soft-cap passes it to every plan; merge_state at a prefix-cache
hit; top_k_top_p_sampling_from_probs(..., filter_apply_order="joint") for top-k / top-p requests.
Every object and library in FlashInfer's JIT cache is noted (mtime, size) before and after each call: one added
or rewritten means that call compiled or linked at run time, and fails the check. (FLASHINFER_DISABLE_JIT=1 cannot
serve here: in FlashInfer 0.6.18 it refuses every JIT-cache module, warmed or not -- JitSpecNvcc.try_load returns
only AOT artifacts -- measured on this host: 14 of 14 calls raised MissingJITCacheError with all 9 modules cached.)
Records, per shape, the modules each call loaded, and each output's error against float32 torch. Prints one JSON line.
"""

from __future__ import annotations

import json
import math
import os
import time
import traceback
import typing as t

import flashinfer
import torch
from flashinfer.jit import core as jit_core
from flashinfer.jit import env as jit_env

torch.manual_seed(0)
LOADED: t.List[str] = []
_original_build_and_load = jit_core.JitSpec.build_and_load


def recording_build_and_load(self: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
    LOADED.append(self.name)
    return _original_build_and_load(self, *args, **kwargs)


jit_core.JitSpec.build_and_load = recording_build_and_load  # type: ignore[method-assign]


class Shape(t.NamedTuple):
    name: str
    qo_heads: int
    kv_heads: int
    dim: int
    window: t.Optional[int]  # sliding window in tokens
    cap: float  # logit soft-cap, 0 for none


class Mask(t.NamedTuple):
    causal: bool
    window_left: int
    cap: float


SHAPES = [
    Shape("gqa4_llama_like", 32, 8, 128, None, 0.0),
    Shape("gqa2", 16, 8, 128, None, 0.0),
    Shape("gqa4_window_and_softcap", 32, 8, 128, 64, 30.0),
]
BATCH, KV_LEN, PAGE = 4, 200, 16
DT = torch.bfloat16
WORKSPACE = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask_spec: Mask) -> torch.Tensor:
    """float32 attention of one request: q [qo, H, D], k/v [kv, Hkv, D]."""
    causal, window_left, cap = mask_spec
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) / math.sqrt(q.shape[-1])
    if cap > 0:
        scores = cap * torch.tanh(scores / cap)
    qo, kv = q.shape[0], k.shape[0]
    position = torch.arange(qo, device="cuda")[:, None] + kv - qo
    key = torch.arange(kv, device="cuda")[None, :]
    mask = torch.zeros(qo, kv, dtype=torch.bool, device="cuda")
    if causal:
        mask |= key > position
    if window_left >= 0:
        mask |= key < position - window_left
    scores = scores.masked_fill(mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)


def built_files() -> t.Dict[str, t.Tuple[int, int]]:
    found = {}
    for directory, _dirs, files in os.walk(str(jit_env.FLASHINFER_JIT_DIR)):
        for name in files:
            if name.endswith((".o", ".so")):
                status = os.stat(os.path.join(directory, name))
                found[os.path.join(directory, name)] = (status.st_mtime_ns, status.st_size)
    return found


def call(record: t.Dict[str, t.Any], label: str, function: t.Callable[[], float]) -> None:
    before = len(LOADED)
    files = built_files()
    started = time.monotonic()
    try:
        error = function()
        torch.cuda.synchronize()
        built = sorted(path for path, stamp in built_files().items() if files.get(path) != stamp)
        record[label] = {"max_abs_error": round(error, 5), "seconds": round(time.monotonic() - started, 3),
                         "modules": LOADED[before:], "built_at_run_time": built, "ok": error < 0.05 and not built}
    except Exception as exc:  # a module missing from the cache (JIT disabled) or a kernel failure: recorded, not fatal
        record[label] = {"error": "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""),
                         "modules": LOADED[before:], "ok": False, "trace": traceback.format_exc().splitlines()[-3:]}


def run_shape(shape: Shape) -> t.Dict[str, t.Any]:
    _name, qo_heads, kv_heads, dim, window, cap = shape
    pages_per = math.ceil(KV_LEN / PAGE)
    kv_cache = torch.randn(BATCH * pages_per, 2, PAGE, kv_heads, dim, dtype=DT, device="cuda")
    kv_indptr = torch.arange(0, BATCH + 1, dtype=torch.int32, device="cuda") * pages_per
    kv_indices = torch.arange(BATCH * pages_per, dtype=torch.int32, device="cuda")
    last_len = torch.full((BATCH,), KV_LEN - (pages_per - 1) * PAGE, dtype=torch.int32, device="cuda")
    qo_indptr = torch.arange(0, BATCH + 1, dtype=torch.int32, device="cuda") * KV_LEN
    keys = [kv_cache[r * pages_per:(r + 1) * pages_per, 0].reshape(-1, kv_heads, dim)[:KV_LEN] for r in range(BATCH)]
    values = [kv_cache[r * pages_per:(r + 1) * pages_per, 1].reshape(-1, kv_heads, dim)[:KV_LEN] for r in range(BATCH)]
    tensor_cores = qo_heads // kv_heads >= 4  # SGLang's should_use_tensor_core for a bf16 KV cache
    record: t.Dict[str, t.Any] = {"query_heads": qo_heads, "kv_heads": kv_heads, "head_dim": dim, "sliding_window": window,
                                  "logit_cap": cap, "decode_tensor_cores": tensor_cores}
    soft_cap = cap if cap > 0 else None
    for window_left in ([window - 1, -1] if window else [-1]):
        suffix = "_window" if window_left >= 0 else ""

        def paged_prefill(window_left: int = window_left) -> float:
            wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, "NHD", backend="fa2")
            wrapper.plan(qo_indptr, kv_indptr, kv_indices, last_len, qo_heads, kv_heads, dim, PAGE, causal=True,
                         window_left=window_left, logits_soft_cap=soft_cap, q_data_type=DT, kv_data_type=DT)
            q = torch.randn(BATCH * KV_LEN, qo_heads, dim, dtype=DT, device="cuda")
            out = wrapper.run(q, kv_cache)
            return max(float((out[r * KV_LEN:(r + 1) * KV_LEN].float() - reference(
                q[r * KV_LEN:(r + 1) * KV_LEN], keys[r], values[r], Mask(True, window_left, cap))).abs().max()) for r in range(BATCH))

        def ragged_prefill(window_left: int = window_left) -> float:
            wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(WORKSPACE, "NHD", backend="auto")
            wrapper.plan(qo_indptr, qo_indptr, qo_heads, kv_heads, dim, causal=True, window_left=window_left,
                         logits_soft_cap=soft_cap, q_data_type=DT, kv_data_type=DT)
            q = torch.randn(BATCH * KV_LEN, qo_heads, dim, dtype=DT, device="cuda")
            k, v = torch.cat(keys), torch.cat(values)
            out = wrapper.run(q, k, v)
            return max(float((out[r * KV_LEN:(r + 1) * KV_LEN].float() - reference(
                q[r * KV_LEN:(r + 1) * KV_LEN], keys[r], values[r], Mask(True, window_left, cap))).abs().max()) for r in range(BATCH))

        def decode(window_left: int = window_left) -> float:
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD", use_tensor_cores=tensor_cores, backend="fa2")
            wrapper.plan(kv_indptr, kv_indices, last_len, qo_heads, kv_heads, dim, PAGE, window_left=window_left,
                         logits_soft_cap=soft_cap, q_data_type=DT, kv_data_type=DT)
            q = torch.randn(BATCH, qo_heads, dim, dtype=DT, device="cuda")
            out = wrapper.run(q, kv_cache)
            return max(float((out[r].float() - reference(q[r:r + 1], keys[r], values[r], Mask(False, window_left, cap))[0]).abs().max())
                       for r in range(BATCH))

        call(record, "paged_prefill" + suffix, paged_prefill)
        call(record, "ragged_prefill" + suffix, ragged_prefill)
        call(record, "decode" + suffix, decode)
    return record


def merge_state_check() -> float:
    v_a, v_b = (torch.randn(512, 32, 128, dtype=DT, device="cuda") for _pair in range(2))
    s_a, s_b = (torch.randn(512, 32, dtype=torch.float32, device="cuda") for _pair in range(2))
    v, s = flashinfer.merge_state(v_a, s_a, v_b, s_b)
    errors = []
    for base in (2.0, math.e):  # FlashInfer keeps its log-sum-exp in base 2; either reading is checked
        m = torch.maximum(s_a, s_b)
        w_a, w_b = torch.pow(base, s_a - m), torch.pow(base, s_b - m)
        ref = (w_a[..., None] * v_a.float() + w_b[..., None] * v_b.float()) / (w_a + w_b)[..., None]
        ref_s = m + torch.log(w_a + w_b) / math.log(base)
        errors.append(max(float((v.float() - ref).abs().max()), float((s - ref_s).abs().max())))
    return min(errors)


def sampling_check() -> float:
    rows, vocab, top_k, top_p = 1024, 32000, 50, 0.9
    probs = torch.softmax(torch.randn(rows, vocab, device="cuda") * 3, dim=-1)
    tokens = flashinfer.sampling.top_k_top_p_sampling_from_probs(probs, top_k, top_p, filter_apply_order="joint")
    allowed = torch.topk(probs, top_k, dim=-1).indices
    outside = (~(allowed == tokens[:, None].long()).any(dim=-1)).sum().item()
    return float(outside)  # draws outside their row's top-k set: must be 0


def main() -> None:
    result: t.Dict[str, t.Any] = {"flashinfer_version": flashinfer.__version__, "device": torch.cuda.get_device_name(0),
                                  "cache": str(jit_env.FLASHINFER_JIT_DIR), "files_in_cache": len(built_files()), "shapes": {}}
    for shape in SHAPES:
        result["shapes"][shape.name] = run_shape(shape)
    extra: t.Dict[str, t.Any] = {}
    call(extra, "merge_state", merge_state_check)
    call(extra, "sampling_top_k_top_p_joint", sampling_check)
    result.update(extra)
    calls = [c for s in result["shapes"].values() for c in s.values() if isinstance(c, dict)] + list(extra.values())
    result["modules_loaded"] = sorted(set(LOADED))
    result["calls"] = len(calls)
    result["ok"] = all(c["ok"] for c in calls)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
