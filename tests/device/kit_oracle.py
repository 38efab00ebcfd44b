# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An oracle we did not write: SGLang's own attention test kit (sglang.test.kits.attention_unittest), run on a GPU
host for the shapes and modes of each service, from the JIT cache the role's derivation and warm-up filled, with the
JIT tripwire (FlashInfer's cache watched: an object or library added or rewritten during a case was compiled then).

    python kit_oracle.py [--dry-run] SGLANG_CONFIG.yaml ...

For each --config: SGLang parses and resolves it (its attention backend, KV cache dtype, page size), its ModelConfig
gives the model's shapes, and its parallel widths the heads of one rank at the service's TP size (the kit runs one
rank: its modules pin the attention TP size to 1 when imported, so the shapes are taken first). Then, per the kit's
own runner modes, with the kit's own assertions (its reference attention in float32):
- dense or MLA attention, eager: run_dense_attention_case / run_mla_attention_case (new prompts, prefix hits, decode);
- CUDA-graph decode: run_*_cuda_graph_decode_case;
- a speculative target: the verify step, eager and CUDA graph (run_dense_spec_verify_case / _cuda_graph_case,
  run_mla_eagle_verify_case / _cuda_graph_case; EAGLE's tree or DFLASH's block), and a DFLASH draft's block the same way;
- an EAGLE-family draft: draft extend (run_*_draft_extend_v2_cuda_graph_case) and the multi-step draft
  (run_*_eagle_draft_cuda_graph_runner_case).
The kit's cases keep its own batch shapes; the model's per-rank heads, head dims, dtype and, for MLA, its latent
rank and rope dims are the service's. A service whose KV cache dtype the kit's fixture cannot hold (its dense fixture
keeps the cache in the model's dtype: an FP8 cache) has its cases named and not run (KIT_KV_DTYPE). No code here is
shared with the role's planner.

--dry-run (no GPU: this machine, CI) does everything but run a case: it parses and resolves each service, takes its
shapes, imports the kit, builds each case and binds it to the kit function's own signature, and prints the plan.
Prints one JSON report; exit 0 when every case passed (or, in a dry run, bound) and nothing was compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import os
import sys
import time
import traceback
import typing as t
import unittest

KIT = "sglang.test.kits.attention_unittest"
# The kit's verify-through-CUDA-graph case fails its own comparison at page size 1 -- for FlashInfer and Triton, dense
# and MLA, in the eager leg it runs on its graph fixture before any capture, on the shapes of SGLang's own dense suite as
# well (verify_graph_probe.py; tests/device/results/2026-12-05-h100-verify-graph) -- and passes at page 16, where SGLang's
# suites run it. At page 1 it is run and reported (nothing may be built), its comparison not counted; the page-16 run is.
KIT_VERIFY_GRAPH_PAGE = 16
KIT_PAGE_1 = "the kit's verify-through-CUDA-graph fixture disagrees with its own reference at page size 1 (not counted)"
# The kit's dense fixture keeps its KV cache in the model's dtype (it has no KV cache dtype); its MLA fixture takes
# fp8_kv_cache where a runner mode passes it on. A case that cannot hold the service's KV cache dtype is a different
# service (its modules are not the service's: a bf16 paged prefill for an FP8-cache service): reported, not run.
KIT_KV_DTYPE = "the kit's %s fixture cannot hold this service's KV cache dtype (%s): not run"


class Oracle(unittest.TestCase):
    """The TestCase the kit's runner functions assert with (their testcase argument)."""

    def runTest(self) -> None:  # pragma: no cover - never run as a test; unittest wants one method
        """Unused."""


def shapes_of(path: str) -> t.Dict[str, t.Any]:
    """The service as SGLang decides it: backends, speculative shape, and each model's shapes on one rank."""
    # pylint: disable=import-outside-toplevel,import-error
    from sglang.srt import runtime_context
    from sglang.srt.arg_groups.model_override_base import model_config_of, resolving_view
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(["--config", path])
    server_args.resolve_once()
    resolved = server_args.resolved_dict()
    runtime_context.publish(server_args, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0, dp_rank=0, gpu_id=0))
    tp = int(runtime_context.parallel_widths_of(resolving_view(server_args))["attn_tp_size"])
    algorithm = str(resolved.get("speculative_algorithm") or "")
    models = []
    for draft, config in ((False, model_config_of(server_args)),) + (
            ((True, ModelConfig.from_server_args(server_args, model_path=resolved["speculative_draft_model_path"])),)
            if resolved.get("speculative_draft_model_path") else ()):
        mla = config.attention_arch == AttentionArch.MLA
        kv = configure_kv_cache_dtype(
            server_args_kv_cache_dtype=resolved.get("kv_cache_dtype") or "auto", model=None, model_dtype=config.dtype,
            is_draft_worker=draft, is_dflash=algorithm.upper() == "DFLASH",
            speculative_draft_attention_backend=resolved.get("speculative_draft_attention_backend"),
            speculative_draft_kv_cache_dtype=resolved.get("speculative_draft_kv_cache_dtype"))[1]
        models.append({"path": config.model_path, "draft": draft, "mla": mla, "dtype": config.dtype, "kv": kv,
                       "heads": int(config.num_attention_heads) // tp,
                       "kv_heads": 1 if mla else int(config.get_num_kv_heads(tp)),
                       "head_dim": int(config.head_dim), "hidden_size": int(config.hidden_size),
                       "kv_lora_rank": int(getattr(config, "kv_lora_rank", 0) or 0),
                       "qk_rope_head_dim": int(getattr(config, "qk_rope_head_dim", 0) or 0)})
    return {"config": path, "backend": resolved.get("decode_attention_backend") or resolved.get("attention_backend"),
            "page_size": int(resolved.get("page_size") or 1), "algorithm": algorithm, "tp": tp,
            "topk": int(resolved.get("speculative_eagle_topk") or 1),
            "steps": int(resolved.get("speculative_num_steps") or 1),
            "draft_tokens": int(resolved.get("speculative_num_draft_tokens") or 1), "models": models}


HELD: t.List[t.Any] = []


def one_rank() -> None:
    """The world the kit was written for: one rank of TP 1, entered for the rest of the process (kept here: an override
    restores when collected); the kit's modules check it when imported."""
    from sglang.srt import runtime_context  # pylint: disable=import-outside-toplevel,import-error

    wanted = {"tp_size": 1, "tp_rank": 0, "attn_tp_size": 1, "attn_tp_rank": 0, "attn_dp_size": 1, "attn_dp_rank": 0,
              "attn_cp_size": 1, "attn_cp_rank": 0, "moe_ep_size": 1, "moe_dp_size": 1, "moe_tp_size": 1}
    override = runtime_context.get_parallel().override(**wanted)
    override.__enter__()  # pylint: disable=unnecessary-dunder-call
    HELD.append(override)


def kit_case(kit: t.Any, model: t.Dict[str, t.Any], name: str, backend: str, page: int, *, mode: t.Any,
             prefixes: t.Tuple[int, ...], news: t.Tuple[int, ...]) -> t.Any:
    """The kit's case (MLAAttentionCase or DenseAttentionCase) for a batch of len(prefixes) requests of this model."""
    if model["mla"]:
        return kit.MLAAttentionCase(name=name, backend=backend, forward_mode=mode, num_heads=model["heads"], page_size=page,
                                    prefix_lens=prefixes, extend_lens=news)
    return kit.DenseAttentionCase(name=name, backend=backend, forward_mode=mode, num_heads=model["heads"],
                                  num_kv_heads=model["kv_heads"], page_size=page, prefix_lens=prefixes, extend_lens=news)


def cases(service: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, t.Any, t.Any, t.Dict[str, t.Any], t.Dict[str, t.Any]]]:
    """(what, kit function, kit case, keyword arguments, the model) for every mode of every model of the service."""
    found = []
    for model in service["models"]:
        found += [entry + (model,) for entry in model_cases(service, model)]
    return found


def model_cases(service: t.Dict[str, t.Any], model: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, t.Any, t.Any, t.Dict[str, t.Any]]]:
    """(what, kit function, kit case, keyword arguments) for every mode of one model of the service."""
    # pylint: disable=import-outside-toplevel,import-error
    import importlib

    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    dense = importlib.import_module(KIT + ".attention_methods.dense_attention")
    mla = importlib.import_module(KIT + ".attention_methods.mla_attention")
    graphs = importlib.import_module(KIT + ".runner_modes.cuda_graph_decode_runner")
    verify = importlib.import_module(KIT + ".runner_modes.speculative_target_verify_runner")
    extend = importlib.import_module(KIT + ".runner_modes.speculative_draft_extend_runner")
    drafts = importlib.import_module(KIT + ".runner_modes.speculative_draft_runner")
    found: t.List[t.Tuple[str, t.Any, t.Any, t.Dict[str, t.Any]]] = []
    name = "%s %s" % ("draft" if model["draft"] else "model", os.path.basename(model["path"]))
    case = functools.partial(kit_case, mla if model["mla"] else dense, model, name, service["backend"],
                             service["page_size"])
    if model["mla"]:
        shape = {"kv_lora_rank": model["kv_lora_rank"], "qk_rope_head_dim": model["qk_rope_head_dim"],
                 "dtype": model["dtype"], "device": "cuda"}
        if model["kv"] != model["dtype"]:
            shape["fp8_kv_cache"] = True
        kit = {"eager": mla.run_mla_attention_case, "graph": graphs.run_mla_cuda_graph_decode_case,
               "verify": verify.run_mla_eagle_verify_case, "verify graph": verify.run_mla_eagle_verify_cuda_graph_case,
               "draft extend": extend.run_mla_draft_extend_v2_cuda_graph_case,
               "draft": drafts.run_mla_eagle_draft_cuda_graph_runner_case}
    else:
        # the model's hidden size feeds the kit's projections, as SGLang's own tests give one with the head dim
        shape = {"head_dim": model["head_dim"], "hidden_size": model["hidden_size"], "dtype": model["dtype"], "device": "cuda"}
        kit = {"eager": dense.run_dense_attention_case, "graph": graphs.run_dense_cuda_graph_decode_case,
               "verify": verify.run_dense_spec_verify_case, "verify graph": verify.run_dense_spec_verify_cuda_graph_case,
               "draft extend": extend.run_dense_draft_extend_v2_cuda_graph_case,
               "draft": drafts.run_dense_eagle_draft_cuda_graph_runner_case}
    found += [("%s: new prompts" % name, kit["eager"], case(mode=ForwardMode.EXTEND, prefixes=(0, 0), news=(16, 9)), shape),
              ("%s: prefix hits" % name, kit["eager"], case(mode=ForwardMode.EXTEND, prefixes=(16, 7), news=(8, 5)), shape),
              ("%s: decode" % name, kit["eager"], case(mode=ForwardMode.DECODE, prefixes=(24, 13), news=()), shape),
              ("%s: CUDA-graph decode" % name, kit["graph"], case(mode=ForwardMode.DECODE, prefixes=(24, 13), news=()), shape)]
    if not service["algorithm"]:
        return found
    dflash = service["algorithm"].upper() == "DFLASH"
    if not model["draft"] or dflash:
        # the target's verify; a DFLASH draft runs its block the same way. The kit's EAGLE tree for topk > 1 has 3
        # draft tokens; a chain (topk 1, DFLASH's block) the service's
        tokens = 3 if service["topk"] > 1 else service["draft_tokens"]
        kind = {"spec_kind": "dflash" if dflash else "eagle", "topk": service["topk"]}
        verify_case = case(mode=ForwardMode.TARGET_VERIFY, prefixes=(24, 13), news=(tokens, tokens))
        what = "draft block" if model["draft"] else "target verify"
        found += [("%s: %s" % (name, what), kit["verify"], verify_case, dict(shape, **kind)),
                  ("%s: %s, CUDA graph" % (name, what), kit["verify graph"], verify_case, dict(shape, **kind))]
        if service["page_size"] == 1:
            # the kit's verify-through-CUDA-graph fixture disagrees with its own reference at page size 1 for every
            # backend, on its own test's shapes too (KIT_PAGE_1); its suites run it at page 16: so does this, beside
            found.append(("%s: %s, CUDA graph, page %d" % (name, what, KIT_VERIFY_GRAPH_PAGE), kit["verify graph"],
                          kit_case(mla if model["mla"] else dense, model, name, service["backend"], KIT_VERIFY_GRAPH_PAGE,
                                   mode=ForwardMode.TARGET_VERIFY, prefixes=(24, 13), news=(tokens, tokens)),
                          dict(shape, **kind)))
    else:
        draft_extend = getattr(ForwardMode, "DRAFT_EXTEND_V2", ForwardMode.EXTEND)
        found += [("%s: draft extend" % name, kit["draft extend"],
                   case(mode=draft_extend, prefixes=(24, 13), news=(service["draft_tokens"],) * 2), shape),
                  ("%s: multi-step draft" % name, kit["draft"], case(mode=ForwardMode.DECODE, prefixes=(24, 13), news=()),
                   dict(shape, topk=service["topk"], speculative_num_steps=service["steps"],
                        speculative_num_draft_tokens=service["draft_tokens"]))]
    return found


def built_files() -> t.Dict[str, t.Tuple[int, int]]:
    """FlashInfer's JIT cache's objects and libraries with their mtime and size (the tripwire's snapshot)."""
    from flashinfer.jit import env as jit_env  # pylint: disable=import-outside-toplevel,import-error
    from sglang_backend_check import files_under  # pylint: disable=import-outside-toplevel  # tests/device, beside this file

    return files_under(str(jit_env.FLASHINFER_JIT_DIR), (".o", ".so"))


def run(paths: t.List[str], dry_run: bool, backend: t.Optional[str] = None, only: t.Optional[str] = None,
        capture_batch_size: t.Optional[int] = None) -> t.Dict[str, t.Any]:
    services = [shapes_of(path) for path in paths]
    for service in services:
        service["resolved_backend"] = service["backend"]
        service["backend"] = backend or service["backend"]
    one_rank()
    testcase = Oracle()
    report: t.Dict[str, t.Any] = {"dry_run": dry_run, "services": [], "ok": True}
    for service in services:
        entry = {"config": service["config"], "backend": service["backend"], "resolved_backend": service["resolved_backend"],
                 "tp": service["tp"],
                 "algorithm": service["algorithm"] or None, "cases": []}
        for what, function, case, given, model in cases(service):
            if only and only not in what:
                continue
            kwargs = dict(given, cuda_graph_capture_batch_size=capture_batch_size) if capture_batch_size else given
            record: t.Dict[str, t.Any] = {"case": what, "kit": "%s.%s" % (function.__module__, function.__name__),
                                          "heads": case.num_heads, "forward_mode": case.forward_mode.name}
            # the kit function's own signature takes this call, or the plan is wrong
            accepted = inspect.signature(function).parameters
            call = {key: value for key, value in kwargs.items() if key in accepted}
            record["ignored"] = sorted(set(kwargs) - set(call))
            inspect.signature(function).bind(testcase, case, **call)
            if model["kv"] != model["dtype"] and (not model["mla"] or "fp8_kv_cache" in record["ignored"]):
                record["not_run"] = KIT_KV_DTYPE % ("MLA" if model["mla"] else "dense", str(model["kv"]).replace("torch.", ""))
            elif not dry_run:
                started, before = time.monotonic(), built_files()
                try:
                    function(testcase, case, **call)
                    record["passed"] = True
                except unittest.SkipTest as exc:
                    record["skipped"] = str(exc)
                except Exception as exc:  # pylint: disable=broad-exception-caught
                    record["passed"] = False
                    record["error"] = "%s: %s" % (type(exc).__name__, exc)
                    record["traceback"] = traceback.format_exc()[-2000:]
                after = built_files()
                record["flashinfer_built_at_run_time"] = sorted(path for path, stamp in after.items()
                                                                if before.get(path) != stamp)
                record["seconds"] = round(time.monotonic() - started, 2)
                if what.endswith(", CUDA graph") and case.page_size == 1 and case.forward_mode.name == "TARGET_VERIFY":
                    record["not_counted"] = KIT_PAGE_1
                counted = record.get("passed", True) is not False or "not_counted" in record
                report["ok"] = report["ok"] and counted \
                    and not record["flashinfer_built_at_run_time"]
            entry["cases"].append(record)
        report["services"].append(entry)
    return report


def main(argv: t.Optional[t.List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dry-run", action="store_true", help="everything but running a case (no GPU needed)")
    parser.add_argument("--attention-backend", help="the kit's backend for every case instead of SGLang's choice for this "
                        "GPU (a Hopper host runs FlashInfer's where SGLang would pick fa3)")
    parser.add_argument("--only", help="only the cases whose name contains this (a probe of one mode)")
    parser.add_argument("--capture-batch-size", type=int, help="the batch size the kit's CUDA-graph cases capture at "
                        "(its default: 4, replayed with the case's requests padded up to it)")
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):
        report = run(args.configs, args.dry_run, args.attention_backend, args.only, args.capture_batch_size)
    print(json.dumps(report, indent=1, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
