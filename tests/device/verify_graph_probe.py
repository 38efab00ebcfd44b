# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which shape makes SGLang's attention test kit's verify-through-CUDA-graph case fail on a GPU host.

    python verify_graph_probe.py [--backend triton] [--mla] [--dry-run]

kit_oracle.py found the kit's run_dense_spec_verify_cuda_graph_case failing for every service it was given (FlashInfer
and Triton, dense and MLA) while the kit's eager verify case passed for the same batches. This runs both cases for a
ladder of shapes that starts at one of SGLang's own test cases (its dense FA4 suite's EAGLE chain: 4 heads, 4 KV heads,
head dim 64, hidden 256, page 16, cached (4, 7), 3 draft tokens each, float16) and changes one thing at a time towards
the shapes kit_oracle.py gives (a Llama-3.1-8B rank: 32 heads, 8 KV heads, head dim 128, hidden 4096, page 1, cached
(24, 13), 4 draft tokens, bfloat16). Prints one JSON report; exit 0 (it is a probe: the report says what failed).

--mla walks the same way for MLA (run_mla_eagle_verify_case / _cuda_graph_case): from the kit's own MLA case (its
defaults: 4 heads, latent rank 32, no rope part, hidden 64, float16; page 16, cached (4, 7), 3 tokens, an EAGLE chain)
to one rank of the Kimi-K2.6-shaped model at TP 8 under DFLASH (8 heads, latent rank 512, rope 64, bfloat16, cached
(24, 13), a block of 8), whose CUDA-graph case failed at page 16 with Triton's attention. A failure names the kit's
frame it was raised in, which says whether the graph fixture's eager leg or the replay disagreed.
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

MLA_SHAPE: t.Dict[str, t.Any] = {"heads": 4, "kv_lora_rank": 32, "qk_rope_head_dim": 0, "page": 16, "prefixes": (4, 7),
                                 "news": (3, 3), "spec_kind": "eagle", "dtype": "float16"}
KIMI_RANK: t.Dict[str, t.Any] = {"heads": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "prefixes": (24, 13),
                                 "news": (8, 8), "spec_kind": "dflash", "dtype": "bfloat16"}
MLA_LADDER: t.Tuple[t.Tuple[str, t.Dict[str, t.Any]], ...] = (
    ("the kit's own MLA case", {}),
    ("DFLASH's block", {"spec_kind": "dflash"}),
    ("8 tokens", {"news": (8, 8)}),
    ("cached (24, 13)", {"prefixes": (24, 13)}),
    ("8 heads", {"heads": 8}),
    ("latent rank 512", {"kv_lora_rank": 512}),
    ("rope 64", {"qk_rope_head_dim": 64}),
    ("latent rank 512, rope 64", {"kv_lora_rank": 512, "qk_rope_head_dim": 64}),
    ("bfloat16", {"dtype": "bfloat16"}),
    ("the Kimi rank under DFLASH (kit_oracle.py's failing case)", KIMI_RANK),
    ("the Kimi rank, an EAGLE chain of 8", dict(KIMI_RANK, spec_kind="eagle")),
    ("the Kimi rank in float16", dict(KIMI_RANK, dtype="float16")),
    ("the Kimi rank, latent rank 32, no rope", dict(KIMI_RANK, kv_lora_rank=32, qk_rope_head_dim=0)),
    ("the Kimi rank, cached (4, 7), 3 tokens", dict(KIMI_RANK, prefixes=(4, 7), news=(3, 3))),
)


def kit_frame(exc: BaseException) -> str:
    """The innermost frame of SGLang's test kit the exception passed through: which leg of a case failed."""
    import traceback  # pylint: disable=import-outside-toplevel

    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if "attention_unittest" in frame.filename]
    return "%s:%s %s" % (frames[-1].filename.rsplit("/", 1)[-1], frames[-1].lineno, frames[-1].name) if frames else "-"


def run_both(testcase: unittest.TestCase, case: t.Any, kwargs: t.Dict[str, t.Any], eager: t.Any, graph: t.Any, *,
             dry_run: bool) -> t.Dict[str, str]:
    """The kit's eager and CUDA-graph verify cases on one case: "passed", or the error and the kit frame it came from."""
    found: t.Dict[str, str] = {}
    for what, function in (("eager", eager), ("cuda graph", graph)):
        if dry_run:
            found[what] = "not run"
            continue
        try:
            function(testcase, case, **kwargs)
            found[what] = "passed"
        except Exception as exc:  # pylint: disable=broad-exception-caught
            found[what] = "%s: %s" % (type(exc).__name__, str(exc)[:300])
            found[what + " raised in"] = kit_frame(exc)
    return found


class Probe(unittest.TestCase):
    """The TestCase the kit's runner functions assert with."""

    def runTest(self) -> None:  # pragma: no cover - never run as a test
        """Unused."""


def main(argv: t.Optional[t.List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--mla", action="store_true", help="walk MLA shapes (the Kimi rank) instead of dense ones")
    parser.add_argument("--dry-run", action="store_true", help="build the cases, run none (no GPU)")
    args = parser.parse_args(argv)
    if args.mla:
        return mla(args.backend, args.dry_run)
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
        report.append(dict({"shape": name, "settings": shape}, **run_both(
            testcase, case, kwargs, verify.run_dense_spec_verify_case, verify.run_dense_spec_verify_cuda_graph_case,
            dry_run=args.dry_run)))
    print(json.dumps({"backend": args.backend, "probes": report}, indent=1, default=str))
    return 0


def mla(backend: str, dry_run: bool) -> int:
    """The MLA ladder (--mla)."""
    # pylint: disable=import-outside-toplevel,import-error
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.test.kits.attention_unittest.attention_methods.mla_attention import MLAAttentionCase
    from sglang.test.kits.attention_unittest.runner_modes import speculative_target_verify_runner as verify

    testcase, report = Probe(), []
    for name, change in MLA_LADDER:
        shape = dict(MLA_SHAPE, **change)
        case = MLAAttentionCase(name="probe", backend=backend, forward_mode=ForwardMode.TARGET_VERIFY,
                                num_heads=shape["heads"], page_size=shape["page"], prefix_lens=shape["prefixes"],
                                extend_lens=shape["news"])
        kwargs = {"topk": 1, "spec_kind": shape["spec_kind"], "kv_lora_rank": shape["kv_lora_rank"],
                  "qk_rope_head_dim": shape["qk_rope_head_dim"], "dtype": getattr(torch, shape["dtype"])}
        report.append(dict({"shape": name, "settings": shape}, **run_both(
            testcase, case, kwargs, verify.run_mla_eagle_verify_case, verify.run_mla_eagle_verify_cuda_graph_case,
            dry_run=dry_run)))
    print(json.dumps({"backend": backend, "mla": True, "probes": report}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
