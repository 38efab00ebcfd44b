# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""On a real GPU: load FlashInfer's sampling module from the warm cache and check its top-k/top-p draws.

Run as the service user in the services' environment (tests/device/run-h200.sh does). Prints one JSON line.
"""

from __future__ import annotations

import json
import time

started = time.monotonic()
import flashinfer  # noqa: E402 -- timed: import is part of what a service pays
import torch  # noqa: E402
from flashinfer.sampling import get_sampling_module  # noqa: E402

module_started = time.monotonic()
get_sampling_module()  # from the cache: ninja finds nothing to do, the .so is loaded
load_seconds = time.monotonic() - module_started
import_seconds = module_started - started

torch.manual_seed(0)
rows, vocab, top_k, top_p = 4096, 32000, 50, 0.9
probs = torch.softmax(torch.randn(rows, vocab, device="cuda") * 3, dim=-1)
draws = []
for _ in range(8):
    draws.append(flashinfer.sampling.top_k_top_p_sampling_from_probs(probs, top_k, top_p))
torch.cuda.synchronize()
samples = torch.stack(draws)  # 8 x rows
allowed = torch.topk(probs, top_k, dim=-1).indices  # rows x top_k
inside = (samples.unsqueeze(-1) == allowed.unsqueeze(0)).any(dim=-1)
distinct = torch.tensor([len(set(samples[:, r].tolist())) for r in range(0, rows, 64)], dtype=torch.float)
print(json.dumps({
    "flashinfer_version": flashinfer.__version__,
    "device": torch.cuda.get_device_name(0),
    "capability": list(torch.cuda.get_device_capability(0)),
    "rows": rows, "draws_per_row": 8, "top_k": top_k, "top_p": top_p,
    "inside_top_k": int(inside.sum()), "total": int(inside.numel()),
    "all_inside_top_k": bool(inside.all()),
    "mean_distinct_draws_per_row": round(float(distinct.mean()), 2),
    "import_seconds": round(import_seconds, 2), "warm_load_seconds": round(load_seconds, 3),
}))
