# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""On a real GPU: FlashInfer's paged decode and prefill wrappers run from the modules jit_cache warmed.

Run as the service user in the services' environment after jit_cache warmed batch_decode:bf16:128 and
batch_prefill:bf16:128 (tests/device/run-h200.sh does). Checks that the wrappers SGLang's FlashInfer backend
uses build nothing new (the cache keys the role warms are the ones FlashInfer asks for at run time) and
that their output matches a plain torch reference. Prints one JSON line.
"""

from __future__ import annotations

import json
import math
import os
import time
import typing as t

import flashinfer
import torch
from flashinfer.jit import env as jit_env

torch.manual_seed(0)
ops = str(jit_env.FLASHINFER_JIT_DIR)
before = set(os.listdir(ops)) if os.path.isdir(ops) else set()

batch, kv_len, page, qo_heads, kv_heads, dim = 4, 100, 16, 32, 8, 128
pages_per = math.ceil(kv_len / page)
dt = torch.bfloat16
kv = torch.randn(batch * pages_per, 2, page, kv_heads, dim, dtype=dt, device="cuda")
kv_indptr = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * pages_per
kv_indices = torch.arange(batch * pages_per, dtype=torch.int32, device="cuda")
last_len = torch.full((batch,), kv_len - (pages_per - 1) * page, dtype=torch.int32, device="cuda")
workspace = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")


def keys_values(request: int) -> t.Tuple[torch.Tensor, torch.Tensor]:
    pages = kv[request * pages_per:(request + 1) * pages_per]
    k = pages[:, 0].reshape(-1, kv_heads, dim)[:kv_len].float()
    v = pages[:, 1].reshape(-1, kv_heads, dim)[:kv_len].float()
    group = qo_heads // kv_heads
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def reference(q: torch.Tensor, request: int, causal: bool) -> torch.Tensor:
    k, v = keys_values(request)  # kv_len x heads x dim
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) / math.sqrt(dim)
    if causal:
        qo = q.shape[0]
        mask = torch.arange(kv_len, device="cuda")[None, :] > (torch.arange(qo, device="cuda")[:, None] + kv_len - qo)
        scores = scores.masked_fill(mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)


result = {"flashinfer_version": flashinfer.__version__, "device": torch.cuda.get_device_name(0)}

started = time.monotonic()
decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
decode.plan(kv_indptr, kv_indices, last_len, qo_heads, kv_heads, dim, page, q_data_type=dt, kv_data_type=dt)
q_decode = torch.randn(batch, qo_heads, dim, dtype=dt, device="cuda")
out_decode = decode.run(q_decode, kv)
torch.cuda.synchronize()
result["decode_first_call_seconds"] = round(time.monotonic() - started, 3)
result["decode_max_abs_error"] = max(
    float((out_decode[r].float() - reference(q_decode[r:r + 1], r, causal=False)[0]).abs().max()) for r in range(batch))

started = time.monotonic()
prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")
qo_indptr = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * kv_len
prefill.plan(qo_indptr, kv_indptr, kv_indices, last_len, qo_heads, kv_heads, dim, page, causal=True, q_data_type=dt, kv_data_type=dt)
q_prefill = torch.randn(batch * kv_len, qo_heads, dim, dtype=dt, device="cuda")
out_prefill = prefill.run(q_prefill, kv)
torch.cuda.synchronize()
result["prefill_first_call_seconds"] = round(time.monotonic() - started, 3)
result["prefill_max_abs_error"] = max(
    float((out_prefill[r * kv_len:(r + 1) * kv_len].float() - reference(q_prefill[r * kv_len:(r + 1) * kv_len], r, causal=True)).abs().max())
    for r in range(batch))

after = set(os.listdir(ops)) if os.path.isdir(ops) else set()
result["modules_in_cache"] = sorted(before)
result["modules_built_at_run_time"] = sorted(after - before)
result["ok"] = (not result["modules_built_at_run_time"] and result["decode_max_abs_error"] < 0.05
                and result["prefill_max_abs_error"] < 0.05)
print(json.dumps(result))
