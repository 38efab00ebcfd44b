# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which shape makes SGLang's attention test kit's verify-through-CUDA-graph case fail on a GPU host.

    python verify_graph_probe.py [--backend triton] [--dry-run]

kit_oracle.py found the kit's run_dense_spec_verify_cuda_graph_case failing for every service it was given (FlashInfer
and Triton, dense and MLA) while the kit's eager verify case passed for the same batches. This runs both cases for a
ladder of shapes that starts at one of SGLang's own test cases (its dense FA4 suite's EAGLE chain: 4 heads, 4 KV heads,
head dim 64, hidden 256, page 16, cached (4, 7), 3 draft tokens each, float16) and changes one thing at a time towards
the shapes kit_oracle.py gives (a Llama-3.1-8B rank: 32 heads, 8 KV heads, head dim 128, hidden 4096, page 1, cached
(24, 13), 4 draft tokens, bfloat16). Prints one JSON report; exit 0 (it is a probe: the report says what failed).
"""

from __future__ import annotations

import argparse
import json
import sys
import typing as t
import unittest

KIT_SHAPE: t.Dict[str, t.Any] = {"heads": 4, "kv_heads": 4, "head_dim": 64, "hidden_size": 256, "page": 16,
                                 "prefixes": (4, 7), "news": (3, 3), "dtype": "float16"}
LADDER: t.Tuple[t.Tuple[str, t.Dict[str, t.Any]], ...] = (
    ("the kit's own case", {}),
    ("page 1", {"page": 1}),
    ("cached (24, 13), 4 draft tokens", {"prefixes": (24, 13), "news": (4, 4)}),
    ("32 heads, 8 KV heads", {"heads": 32, "kv_heads": 8}),
    ("head dim 128, hidden 4096", {"head_dim": 128, "hidden_size": 4096}),
    ("bfloat16", {"dtype": "bfloat16"}),
    ("all of them (kit_oracle.py's Llama-3.1-8B rank)", {"page": 1, "prefixes": (24, 13), "news": (4, 4), "heads": 32,
                                                         "kv_heads": 8, "head_dim": 128, "hidden_size": 4096,
                                                         "dtype": "bfloat16"}),
    ("all of them in float16", {"page": 1, "prefixes": (24, 13), "news": (4, 4), "heads": 32, "kv_heads": 8,
                                "head_dim": 128, "hidden_size": 4096}),
)


class Probe(unittest.TestCase):
    """The TestCase the kit's runner functions assert with."""

    def runTest(self) -> None:  # pragma: no cover - never run as a test
        """Unused."""


def main(argv: t.Optional[t.List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--dry-run", action="store_true", help="build the cases, run none (no GPU)")
    args = parser.parse_args(argv)
    # pylint: disable=import-outside-toplevel,import-error
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods.dense_attention import DenseAttentionCase
    from sglang.test.kits.attention_unittest.runner_modes import speculative_target_verify_runner as verify

    testcase, report = Probe(), []
    for name, change in LADDER:
        shape = dict(KIT_SHAPE, **change)
        case = DenseAttentionCase(name="probe", backend=args.backend, forward_mode=ForwardMode.TARGET_VERIFY,
                                  num_heads=shape["heads"], num_kv_heads=shape["kv_heads"], page_size=shape["page"],
                                  prefix_lens=shape["prefixes"], extend_lens=shape["news"])
        kwargs = {"topk": 1, "spec_kind": "eagle", "head_dim": shape["head_dim"], "hidden_size": shape["hidden_size"],
                  "dtype": getattr(torch, shape["dtype"])}
        entry: t.Dict[str, t.Any] = {"shape": name, "settings": shape}
        for what, function in (("eager", verify.run_dense_spec_verify_case),
                               ("cuda graph", verify.run_dense_spec_verify_cuda_graph_case)):
            if args.dry_run:
                entry[what] = "not run"
                continue
            try:
                function(testcase, case, **kwargs)
                entry[what] = "passed"
            except Exception as exc:  # pylint: disable=broad-exception-caught
                entry[what] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
        report.append(entry)
    print(json.dumps({"backend": args.backend, "probes": report}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
