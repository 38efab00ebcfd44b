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
- attention: whichever attention backend SGLang resolves for the service (no list of backends here), built as SGLang's
  ModelRunner builds it (get_attention_backend; its registry before 0.5.23) over the model runner of SGLang's own
  attention test kit (sglang.test.kits.attention_unittest: MockModelRunner, MockMLAModelRunner), holding the model's
  shapes on one rank (heads, KV heads, head dims), dtype, KV cache dtype and window as SGLang decided them. The kit
  makes the batches (_make_forward_batch) and a speculative target's verify input (_make_spec_verify_input), and
  drives the CUDA graphs' metadata (capture and replay); the backend plans (init_forward_metadata) and runs the
  model's attention layers (a dense model's RadixAttention layers; an MLA model's through SGLang's own MLA layer,
  which picks its forward method per batch), with the service's settings as the process's (SGLang's scheduler's), at
  start-up (the CUDA graphs of an autoregressive service's decode, or a speculative service's verify step, then the
  greedy warm-up request) and at each request (its extend after its cached prefix, and a decode step). Every
  FlashInfer module the backend asks for is really loaded by FlashInfer (from its cache, or JIT-built), then handed
  back as a stand-in whose kernels do nothing (no GPU); Triton kernels are not launched; a kernel-set file FlashInfer
  would download is said, not fetched (the lab has no route off its bridge). This harness is the lab's own, written
  apart from the role's planner (roles/inferops/files/inferops_sglang_plan.py), so that a disagreement fails here.
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
import dataclasses
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

    OPTIONAL = ("plan_with_staged_workspace_bytes",)

    def __getattr__(self, attr: str) -> t.Any:
        absent = attr.startswith("__") or attr in self.OPTIONAL
        if absent:
            raise AttributeError(attr)
        return self  # stateless: any attribute, and any call's result, is this same stand-in

    def __call__(self, *args: t.Any, **kwargs: t.Any) -> Stub:
        return self


@dataclasses.dataclass
class Shape:
    """What SGLang decides of one model of the service, before SGLang's attention test kit is imported (its modules pin
    the attention TP size to 1 when imported): the model config, its heads and KV heads on one rank, window, KV dtype,
    page size and backends."""

    config: t.Any
    tp: int
    window: t.Optional[int]
    kv: t.Any
    page: int
    prefill: str
    decode: str
    draft: bool
    server_args: t.Any = None

    @property
    def heads(self) -> int:
        return int(self.config.num_attention_heads) // self.tp

    @property
    def kv_heads(self) -> int:
        # an MLA model's cache holds one latent head
        return 1 if self.mla else int(self.config.get_num_kv_heads(self.tp))

    @property
    def mla(self) -> bool:
        from sglang.srt.configs.model_config import AttentionArch  # noqa: PLC0415

        return self.config.attention_arch == AttentionArch.MLA


HELD: t.List[t.Any] = []


def hold(override: t.Any) -> None:
    """Enter one of SGLang's runtime-context overrides for the rest of the process (it restores on exit, and on being
    collected: it is kept here)."""
    override.__enter__()  # pylint: disable=unnecessary-dunder-call
    HELD.append(override)


def shape_of(server_args: t.Any, resolved: t.Mapping[str, t.Any], draft: bool) -> Shape:
    """One model of the service as SGLang's own code sees it: its ModelConfig, parallel widths, KV cache dtype and
    sliding window."""
    # pylint: disable=import-outside-toplevel
    import torch  # noqa: PLC0415
    from sglang.srt import runtime_context  # noqa: PLC0415
    from sglang.srt.configs.model_config import ModelConfig  # noqa: PLC0415
    from sglang.srt.models.registry import ModelRegistry  # noqa: PLC0415

    modern = release_has("sglang.srt.arg_groups.model_override_base")  # SGLang 0.5.21 and later; else 0.5.15
    draft_path = resolved.get("speculative_draft_model_path")
    prefill, decode = attention_backends(resolved)
    algorithm = resolved.get("speculative_algorithm")
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
        hold(runtime_context.get_parallel().override(
            tp_size=server_args.tp_size, tp_rank=0, attn_tp_size=tp, attn_tp_rank=0, attn_dp_size=dp, attn_dp_rank=0,
            attn_cp_size=cp, attn_cp_rank=0))
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
    if draft and resolved.get("speculative_draft_attention_backend"):
        prefill = decode = resolved["speculative_draft_attention_backend"]
    return Shape(config=config, tp=int(tp), window=window, kv=kv, page=int(resolved.get("page_size") or 1),
                 prefill=prefill, decode=decode, draft=draft, server_args=server_args)


def one_rank() -> None:
    """LAB: the stand-in's process becomes a world of one rank before SGLang's attention test kit is imported (the kit's
    modules pin the attention TP size to 1 when imported, and SGLang checks the world against it). What SGLang decided
    for one rank of the service (Shape: its heads on a rank) was taken before."""
    from sglang.srt import runtime_context  # noqa: PLC0415

    wanted = {"tp_size": 1, "tp_rank": 0, "attn_tp_size": 1, "attn_tp_rank": 0, "attn_dp_size": 1, "attn_dp_rank": 0,
              "attn_cp_size": 1, "attn_cp_rank": 0, "moe_ep_size": 1, "moe_dp_size": 1, "moe_tp_size": 1}
    fields = getattr(runtime_context, "_parallel_fields", None)
    if callable(fields):
        wanted = {key: value for key, value in wanted.items() if key in fields()}
    else:  # SGLang 0.5.15: the attention widths only
        wanted = {key: value for key, value in wanted.items() if not key.startswith("moe_")}
    hold(runtime_context.get_parallel().override(**wanted))


class Attention:
    """One model's attention as SGLang drives it, on a node without a GPU: the attention backend SGLang resolves for the
    service (whichever it is: SGLang's get_attention_backend, or its registry before 0.5.23), over the model runner of
    SGLang's own attention test kit (sglang.test.kits.attention_unittest: MockModelRunner, MockMLAModelRunner) holding
    the model's shapes on one rank, its dtype, KV cache dtype and window; batches made by the kit (_make_forward_batch);
    a speculative target's verify input made by the kit (_make_spec_verify_input); CUDA graphs' metadata through the
    kit's capture and replay calls. The forward of a dense model's attention layers follows."""

    CONTEXT = 512  # tokens a request may hold in the stand-in's pools
    REQUESTS = 4

    def __init__(self, shape: Shape, mode: str = "EXTEND", draft_tokens: int = 0) -> None:
        # pylint: disable=import-outside-toplevel
        from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: PLC0415

        self.shape = shape
        self.mode = getattr(ForwardMode, mode)
        self.kit = self.kit_module()
        config = shape.config
        case = self.case(self.mode, (0,) * 2, (max(draft_tokens, 1),) * 2)
        if shape.mla:
            tiny = self.kit.TinyMLAModelConfig(
                num_heads=shape.heads, kv_lora_rank=int(config.kv_lora_rank), qk_rope_head_dim=int(config.qk_rope_head_dim),
                hidden_size=int(config.hidden_size), context_len=self.CONTEXT)
            # the model's own head dims where the kit's tiny model has its own (its MHA path: qk_nope + rope, v)
            tiny.qk_nope_head_dim, tiny.v_head_dim = int(config.qk_nope_head_dim), int(config.v_head_dim)
            tiny.hf_config.qk_nope_head_dim, tiny.hf_config.v_head_dim = tiny.qk_nope_head_dim, tiny.v_head_dim
            tiny.scaling = getattr(config, "scaling", tiny.scaling)
            self.runner = self.kit.MockMLAModelRunner(
                case=case, model_config=tiny, dtype=config.dtype, device="cpu", max_context_len=self.CONTEXT,
                kv_lora_rank=int(config.kv_lora_rank), qk_rope_head_dim=int(config.qk_rope_head_dim),
                runner_batch_size=self.REQUESTS, **self.takes(self.kit.MockMLAModelRunner, fp8_kv_cache="float8" in str(shape.kv)))
        else:
            tiny = self.kit.TinyModelConfig(num_heads=shape.heads, num_kv_heads=shape.kv_heads, head_dim=int(config.head_dim),
                                            hidden_size=int(config.hidden_size), context_len=self.CONTEXT,
                                            sliding_window_size=shape.window)
            self.runner = self.kit.MockModelRunner(case=case, model_config=tiny, dtype=config.dtype, device="cpu",
                                                   max_context_len=self.CONTEXT, head_dim=int(config.head_dim),
                                                   runner_batch_size=self.REQUESTS)
            if shape.kv != config.dtype:
                # the service's KV cache dtype (FP8): the kit's runner stores the compute dtype
                self.runner.kv_cache_dtype = shape.kv
                self.runner.token_to_kv_pool = type(self.runner.token_to_kv_pool)(**self.takes(
                    type(self.runner.token_to_kv_pool), size=self.runner.token_to_kv_pool.size, page_size=shape.page,
                    dtype=shape.kv, head_num=shape.kv_heads, head_dim=int(config.head_dim), layer_num=1, device="cpu",
                    enable_memory_saver=False, enable_alt_stream=False))
                if hasattr(self.runner, "init_kv_index_translator"):
                    self.runner.init_kv_index_translator()
        self.runner.prefill_attention_backend_str = shape.prefill
        self.runner.decode_attention_backend_str = shape.decode
        self.runner.is_draft_worker = shape.draft
        # the process's settings are the service's, as in SGLang's scheduler (the kit's runner published its test
        # settings: e.g. an MLA backend's chunked prefix cache and ragged prefill off)
        from sglang.srt.server_args import set_global_server_args_for_scheduler  # noqa: PLC0415

        set_global_server_args_for_scheduler(shape.server_args)
        self.backend = self.build()
        self.mla_attention = self.sglang_mla_layer() if shape.mla else None
        self.label = "%s %s (%s%s)" % ("draft" if shape.draft else "model", config.model_path, type(self.backend).__name__,
                                       "" if mode == "EXTEND" else ", " + mode)

    def kit_module(self) -> t.Any:
        # pylint: disable=import-outside-toplevel
        if self.shape.mla:
            from sglang.test.kits.attention_unittest.attention_methods import mla_attention  # noqa: PLC0415

            return mla_attention
        from sglang.test.kits.attention_unittest.attention_methods import dense_attention  # noqa: PLC0415

        return dense_attention

    @staticmethod
    def takes(kind: t.Any, **offered: t.Any) -> t.Dict[str, t.Any]:
        """The keyword arguments the release's class takes."""
        parameters = inspect.signature(kind).parameters
        return {key: value for key, value in offered.items() if key in parameters}

    def case(self, mode: t.Any, prefixes: t.Tuple[int, ...], news: t.Tuple[int, ...]) -> t.Any:
        """The kit's case for a batch of len(prefixes) requests."""
        extend = () if mode.is_decode() else tuple(news)
        if self.shape.mla:
            return self.kit.MLAAttentionCase(name="lab", backend=self.shape.decode, forward_mode=mode,
                                             num_heads=self.shape.heads, page_size=self.shape.page,
                                             prefix_lens=tuple(prefixes), extend_lens=extend)
        return self.kit.DenseAttentionCase(name="lab", backend=self.shape.decode, forward_mode=mode,
                                           num_heads=self.shape.heads, num_kv_heads=self.shape.kv_heads,
                                           page_size=self.shape.page, prefix_lens=tuple(prefixes), extend_lens=extend,
                                           sliding_window_size=self.shape.window)

    def build(self) -> t.Any:
        """SGLang's attention backend for the runner, as its ModelRunner makes it."""
        # pylint: disable=import-outside-toplevel
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS  # noqa: PLC0415

        try:
            from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (  # noqa: PLC0415
                get_attention_backend,
            )
        except ImportError:  # before 0.5.23: the registry's class for the one backend name
            return ATTENTION_BACKENDS[self.shape.decode](self.runner)
        return get_attention_backend(model_runner=self.runner)

    def sglang_mla_layer(self) -> t.Any:
        """The model's attention layer as SGLang's DeepSeek-V2/V3 and Kimi-K2 models hold it (DeepseekV2AttentionMLA),
        each argument its signature names taken from the model's text config, with the heads of one rank; its weights
        on the meta device (never read: the layer picks its forward method for a batch and calls the backend through
        its own attention layers). Built where the backend was (host tensors: without_gpu)."""
        # pylint: disable=import-outside-toplevel
        import torch  # noqa: PLC0415
        from sglang.srt.model_loader.utils import set_default_torch_dtype  # noqa: PLC0415
        from sglang.srt.models.deepseek_v2 import DeepseekV2AttentionMLA  # noqa: PLC0415

        text = self.shape.config.hf_text_config
        rope = dict(getattr(text, "rope_scaling", None) or getattr(text, "rope_parameters", None) or {})
        arguments = {name: getattr(text, name) for name in inspect.signature(DeepseekV2AttentionMLA).parameters
                     if hasattr(text, name)}
        arguments.update(config=text, num_heads=self.shape.heads, quant_config=None, layer_id=0, prefix="model.layers.0.self_attn",
                         rope_theta=getattr(text, "rope_theta", None) or rope.get("rope_theta", 10000.0),
                         rope_scaling=rope if rope.get("rope_type", rope.get("type", "default")) != "default" else None)
        with torch.device("meta"), set_default_torch_dtype(self.shape.config.dtype):
            return DeepseekV2AttentionMLA(**self.takes(DeepseekV2AttentionMLA, **arguments))

    def describe(self) -> str:
        config = self.shape.config
        return "%s: %s, head dim %d, %d heads / %d KV heads per rank, KV cache %s, sliding window %s (runner: SGLang's " \
               "attention test kit, %s)" % (self.label, config.dtype, config.head_dim, self.shape.heads, self.shape.kv_heads,
                                            self.shape.kv, self.shape.window, type(self.runner).__name__)

    def batch(self, mode: t.Any, prefixes: t.Tuple[int, ...], news: t.Tuple[int, ...]) -> t.Any:
        case = self.case(mode, prefixes, news)
        return self.kit._make_forward_batch(case, self.runner, max_context_len=self.CONTEXT, device="cpu")  # pylint: disable=protected-access

    def run(self, forward_batch: t.Any) -> None:
        """A dense model's attention layers (a full-attention one, and a sliding-window one where the model has a
        window) through the backend, as RadixAttention.forward hands them over; an MLA model's through SGLang's own MLA
        layer, which picks its forward method for the batch (an MHA one, its attn_mha, or the absorbed MLA, attn_mqa)."""
        # pylint: disable=import-outside-toplevel
        import torch  # noqa: PLC0415
        from sglang.srt.layers.radix_attention import RadixAttention  # noqa: PLC0415

        if self.mla_attention is not None:
            from sglang.srt.model_executor.forward_context import ForwardContext, forward_context  # noqa: PLC0415

            tokens = int(forward_batch.input_ids.numel())
            with forward_context(ForwardContext(attn_backend=self.backend)), torch.no_grad():
                method = self.mla_attention.dispatch_attn_forward_method(forward_batch)
                layer = getattr(self.mla_attention, "attn_mha" if "MHA" in str(method.name) else "attn_mqa")
                shapes = ((layer.tp_q_head_num, layer.head_dim), (layer.tp_k_head_num, layer.head_dim),
                          (layer.tp_v_head_num, layer.v_head_dim))
                q, k, v = (torch.zeros(tokens, heads, width, dtype=self.shape.config.dtype) for heads, width in shapes)
                LOG.debug("%s: %s for a batch of %d tokens", self.label, method.name, tokens)
                layer(q.flatten(1), k, v, forward_batch, save_kv_cache=False)
            return
        config, new = self.shape.config, int(forward_batch.input_ids.numel())
        cap = float(getattr(config.hf_text_config, "attn_logit_softcapping", None) or 0.0)
        head_dim = int(config.head_dim)
        for window in [-1] + ([int(self.shape.window)] if self.shape.window else []):
            layer = RadixAttention(self.shape.heads, head_dim, head_dim ** -0.5, self.shape.kv_heads, layer_id=0,
                                   logit_cap=cap, sliding_window_size=window)
            q = torch.zeros(new, self.shape.heads * head_dim, dtype=config.dtype)
            k = torch.zeros(new, self.shape.kv_heads, head_dim, dtype=config.dtype)
            go = self.backend.forward_extend if forward_batch.forward_mode.is_extend() else self.backend.forward_decode
            go(q, k, k.clone(), layer, forward_batch, save_kv_cache=False)

    def step(self, prefix: int, new: int, decode: bool) -> None:
        """One request's batch through the backend: its planning, then its layers."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: PLC0415

        forward_batch = self.batch(ForwardMode.DECODE if decode else ForwardMode.EXTEND, (prefix,), (new,))
        self.backend.init_forward_metadata(forward_batch)
        self.run(forward_batch)

    def graphs(self, sizes: t.Sequence[int]) -> None:
        """SGLang's decode CUDA graphs at start-up, as the kit drives them: capture then replay metadata per batch size
        (no graph is recorded here: no GPU), the layers at capture."""
        # pylint: disable=import-outside-toplevel
        from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: PLC0415
        from sglang.test.kits.attention_unittest.runner_modes import cuda_graph_decode_runner as kit_graphs  # noqa: PLC0415

        fill = int(self.backend.get_cuda_graph_seq_len_fill_value())
        for size in sizes:
            capture = self.batch(ForwardMode.DECODE, (max(fill - 1, 0),) * size, (1,) * size)
            kit_graphs._init_cuda_graph_capture_metadata(self.backend, size, capture)  # pylint: disable=protected-access
            self.run(capture)
            replay = self.batch(ForwardMode.DECODE, tuple(4 + index for index in range(size)), (1,) * size)
            kit_graphs._init_cuda_graph_replay_metadata(self.backend, size, replay)  # pylint: disable=protected-access

    def verify(self, draft_tokens: int, topk: int, algorithm: str) -> None:
        """A speculative target's verify step: the kit's verify input (EAGLE's tree, or DFLASH's block) over the draft
        tokens of two requests, planned and run."""
        # pylint: disable=import-outside-toplevel
        from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: PLC0415
        from sglang.test.kits.attention_unittest.runner_modes import speculative_target_verify_runner as kit_verify  # noqa: PLC0415

        case = self.case(ForwardMode.TARGET_VERIFY, (8, 5), (draft_tokens,) * 2)
        forward_batch = self.kit._make_forward_batch(case, self.runner, max_context_len=self.CONTEXT, device="cpu")  # pylint: disable=protected-access
        kind = "dflash" if algorithm.upper() == "DFLASH" else "eagle"
        kit_verify._prepare_spec_verify_batch(case, forward_batch, topk=topk, spec_kind=kind, device="cpu")  # pylint: disable=protected-access
        self.backend.init_forward_metadata(forward_batch)
        self.run(forward_batch)


class NoRoute(RuntimeError):
    """LAB: FlashInfer asked to download a file (a kernel set's) at a request; the lab has no route off its bridge."""


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

    def no_route(source: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
        raise NoRoute(str(source))

    entered = torch.cuda.device
    undo: t.List[t.Tuple[t.Any, str, t.Any]] = []
    replacements = [(core.JitSpec, "build_and_load", load_for_real), (triton_jit.JITFunction, "run", lambda *a, **k: None),
                    # FlashInfer's CUDA-graph plan enters the device of its buffers: host buffers here
                    (torch.cuda, "device", lambda device: contextlib.nullcontext() if str(device) == "cpu" else entered(device))]
    replacements += [(torch, name, host(getattr(torch, name))) for name in ("empty", "zeros", "ones", "full", "arange", "tensor")]
    # a kernel-set file that is not on the node: FlashInfer downloads it here (LAB: no route off the bridge)
    cubin_loader = sys.modules.get("flashinfer.jit.cubin_loader")
    download = getattr(cubin_loader, "download_file", None)
    if callable(download):
        replacements += [(module, attr, no_route) for name, module in list(sys.modules.items())
                         if module is not None and name.startswith("flashinfer")
                         for attr, value in list(vars(module).items()) if value is download]
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

    def through(self, attention: Attention, when: str, call: t.Callable[[], None]) -> None:
        """One step through a model's backend; a kernel-set file FlashInfer would download then is said, not fetched."""
        try:
            call()
        except NoRoute as exc:
            LOG.warning("LAB SIMULATION: %s: FlashInfer downloads %s %s (its kernel set is not on the node); the lab has "
                        "no route off its bridge, so nothing is fetched: a node with a route downloads it then, an "
                        "air-gapped one fails then", attention.label, exc, when)

    def attend(self, prefix: int, new: int) -> None:
        """A request's extend (after its cached prefix) and one decode step, through every model's attention backend."""
        with without_gpu(self):
            for attention in self.attention:
                self.through(attention, "at this request", lambda attention=attention: (
                    attention.step(prefix, new, decode=False), attention.step(prefix + new, 1, decode=True)))

    def warm_up(self) -> None:
        """SGLang's start-up: its attention backends built for the model (and the draft model), whichever SGLang resolved;
        the CUDA graphs of an autoregressive service's decode; a speculative service's verify step; then the greedy
        warm-up request."""
        import flashinfer  # noqa: PLC0415
        from flashinfer.jit import core as jit_core  # noqa: PLC0415

        archs = sorted("%d.%s" % arch for arch in jit_core.current_compilation_context.TARGET_CUDA_ARCHS)
        LOG.info("FlashInfer %s, target archs: %s", flashinfer.__version__, " ".join(archs) or "set()")
        algorithm = str(self.resolved.get("speculative_algorithm") or "")
        with without_gpu(self):
            # what SGLang decides of each model first: SGLang's attention test kit pins the attention TP size when imported
            shapes = [shape_of(self.server_args, self.resolved, draft=False)]
            if self.resolved.get("speculative_draft_model_path"):
                shapes.append(shape_of(self.server_args, self.resolved, draft=True))
            one_rank()
            self.attention = [Attention(shape) for shape in shapes]
            topk = int(self.resolved.get("speculative_eagle_topk") or 1)
            # the kit's EAGLE tree for topk > 1 has 3 draft tokens; a chain (topk 1, DFLASH's block) has the service's
            tokens = 3 if topk > 1 else int(self.resolved.get("speculative_num_draft_tokens") or 1)
            verifier = Attention(shapes[0], mode="TARGET_VERIFY", draft_tokens=tokens) if algorithm else None
        for attention in self.attention + ([verifier] if verifier else []):
            LOG.info("%s", attention.describe())
        with without_gpu(self):
            if verifier is not None:
                self.through(verifier, "at the first verify step", lambda: verifier.verify(tokens, topk, algorithm))
            elif not self.resolved.get("disable_cuda_graph"):
                sizes = (1, Attention.REQUESTS)
                self.through(self.attention[0], "at start-up (CUDA graphs)", lambda: self.attention[0].graphs(sizes))
                LOG.info("CUDA graphs of the decode captured and replayed for batch sizes %s (LAB: their metadata, no "
                         "kernel)", ", ".join(map(str, sizes)))
        self.attend(0, 8)

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
        # SGLang's --api-key and --admin-api-key as its own parser resolved them
        self.api_key: t.Optional[str] = None
        self.admin_api_key: t.Optional[str] = None


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

        def allowed(self, method: str) -> bool:
            """SGLang's own decision on the request (sglang.srt.utils.auth.decide_request_auth, what its HTTP server's
            middleware asks for each request), from its Authorization header and the keys SGLang resolved; a refusal
            answered with SGLang's status. The stand-in's routes carry no admin marking: SGLang's NORMAL level."""
            from sglang.srt.utils.auth import AuthLevel, decide_request_auth  # noqa: PLC0415

            decision = decide_request_auth(method=method, path=self.path.split("?")[0],
                                           authorization_header=self.headers.get("Authorization"), api_key=state.api_key,
                                           admin_api_key=state.admin_api_key, auth_level=AuthLevel.NORMAL)
            if not decision.allowed:
                self.send(decision.error_status_code, {"error": "Unauthorized"})
            return decision.allowed

        def do_GET(self) -> None:
            if not self.allowed("GET"):
                return
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
            if not self.allowed("POST"):
                return
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
    # SGLang's logging as its processes set it up (configure_logger: SGLANG_LOGGING_CONFIG_PATH's configuration when the
    # unit gives one), then the line SGLang's Engine logs at start-up with its module's logger: its resolved arguments.
    # LAB SIMULATION of that line (the Engine is not started here); whether it reaches the journal is the logging
    # configuration's decision.
    from sglang.srt.utils.common import configure_logger  # noqa: PLC0415

    configure_logger(server_args)
    logging.getLogger("sglang.srt.entrypoints.engine").info("server_args=%s", resolved)
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
    state.api_key, state.admin_api_key = resolved.get("api_key"), resolved.get("admin_api_key")
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
