# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The half of inferops-flashinfer that runs inside the SGLang venv's Python: FlashInfer's and SGLang's own code decide
everything it reports.

Run by inferops_flashinfer.py (installed beside it) as `<venv>/bin/python inferops_flashinfer_venv.py ACTION REQUEST`, in
the services' environment; prints one line MARKER + JSON as its last word. ACTION is probe, plan, warm or parse; REQUEST
is JSON: modules (recipes or names), derive (bool), sglang_configs (the --config files). FlashInfer, SGLang and torch are
imported only where they are used, so this file imports on any Python 3 (the tool keeps its MARKER and STAMP: a unit
test holds them equal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import hashlib
import importlib.metadata
import inspect
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import typing as t

# The line the result follows, and the warm-up's record beside FlashInfer's cache (read by the tool and the build store).
MARKER = "INFEROPS-JSON:"
STAMP = "inferops-warm.json"
LEGACY = {"bf16": "bfloat16", "fp16": "float16"}
SPECS: t.Dict[str, t.List[t.Any]] = {}
# What a recorded derivation holds: 4 = FlashInfer's JitSpecs and the kernel sets, Triton and SGLang JIT kernels SGLang's
# backend asked for, whatever the backend, in every mode the server runs (batches of several requests, speculative
# verify and draft decode, CUDA graphs at SGLang's capture sizes); 3: the same for one request, eager; 2: FlashInfer's
# backends only; 1: our recipes
DERIVED_FORMAT = 4

Recipe = t.Union[str, t.Dict[str, t.Any]]


def getter_specs(getter: t.Callable[..., t.Any], *args: t.Any) -> t.List[t.Any]:
    """The JIT modules one of FlashInfer's own getters (the functions SGLang calls) builds and loads, recorded instead of
    built: the names a service will ask for, whatever this FlashInfer release's getter does (0.7.x's fa2 prefill getter
    builds an equal-stride variant with its own name, which the public gen_* spec function does not name)."""
    from flashinfer.jit import core  # pylint: disable=import-error

    recorded: t.List[t.Any] = []

    class Anything:
        def __getattr__(self, name: str) -> t.Any:
            return Anything()

        def __call__(self, *args: t.Any, **kwargs: t.Any) -> t.Any:
            return Anything()

    def record(spec: t.Any) -> Anything:
        recorded.append(spec)
        return Anything()

    original = core.JitSpec.build_and_load
    core.JitSpec.build_and_load = record
    try:
        getattr(getter, "__wrapped__", getter)(*args)
    finally:
        core.JitSpec.build_and_load = original
    if not recorded:
        raise ValueError("FlashInfer's %s built no JIT module here" % getter.__name__)
    return recorded


def make_specs(recipe: Recipe) -> t.List[t.Any]:
    """The JIT modules of one recipe (what the derivation or an operator names), through FlashInfer's own getters; each
    recipe's getter runs once per process (derive() and the plan ask for the same recipes)."""
    key = json.dumps({k: v for k, v in recipe.items() if k != "uris"} if isinstance(recipe, dict) else recipe, sort_keys=True)
    if key not in SPECS:
        SPECS[key] = specs_of(recipe)
    return SPECS[key]


def named_recipe(recipe: str) -> t.Dict[str, t.Any]:
    """An operator's module name (sampling, cascade, norm, <batch_decode|batch_prefill>:<bf16|fp16>:<head_dim>) as a recipe."""
    if recipe in ("sampling", "cascade", "norm"):
        return {"kind": recipe}
    try:
        kind, dtype_name, head_dim = recipe.split(":")
        return {"kind": kind, "q": LEGACY[dtype_name], "kv": LEGACY[dtype_name], "o": LEGACY[dtype_name],
                "head_dim_qk": int(head_dim), "head_dim_vo": int(head_dim), "backend": "fa2"}
    except (ValueError, KeyError):
        raise ValueError("unknown module %r (known: sampling, cascade, norm, "
                         "<batch_decode|batch_prefill>:<bf16|fp16>:<head_dim>)" % recipe) from None


def specs_of(recipe: Recipe) -> t.List[t.Any]:
    # pylint: disable=import-error,import-outside-toplevel
    if isinstance(recipe, str):
        recipe = named_recipe(recipe)
    kind = recipe["kind"]
    if kind == "sampling":
        from flashinfer.sampling import get_sampling_module
        return getter_specs(get_sampling_module)
    if kind == "cascade":
        from flashinfer.cascade import get_cascade_module
        return getter_specs(get_cascade_module)
    if kind == "norm":
        from flashinfer.norm import get_norm_module
        return getter_specs(get_norm_module)
    if kind not in ("batch_decode", "batch_prefill"):
        raise ValueError("unknown module kind %r" % kind)
    import torch
    q, kv, o = (getattr(torch, recipe[key]) for key in ("q", "kv", "o"))
    window, cap = bool(recipe.get("sliding_window")), bool(recipe.get("logits_soft_cap"))
    # SGLang's FlashInfer backend: paged KV cache, int32 indices, no positional encoding in the kernel (NONE = 0).
    if kind == "batch_decode":
        from flashinfer.decode import get_batch_decode_module
        return getter_specs(get_batch_decode_module, q, kv, o, torch.int32, recipe["head_dim_qk"], recipe["head_dim_vo"], 0,
                            window, cap)
    from flashinfer.prefill import get_batch_prefill_module
    return getter_specs(get_batch_prefill_module, recipe.get("backend", "fa2"), q, kv, o, torch.int32,
                        recipe["head_dim_qk"], recipe["head_dim_vo"], 0, window, cap, False)


def digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def parse(path: str) -> t.Tuple[t.Any, t.Dict[str, t.Any]]:
    """SGLang's own parser and resolution of one --config file: what the service would run with, or SGLang's refusal."""
    # pylint: disable=import-error,import-outside-toplevel
    from sglang.srt.server_args import prepare_server_args

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            server_args = prepare_server_args(["--config", path])
        if hasattr(server_args, "resolve_once"):
            # SGLang 0.5.21 and later resolve the parsed record in a step of their own
            server_args.resolve_once()
    except SystemExit:
        raise ValueError("SGLang rejects %s: %s" % (path, (said.getvalue().strip().splitlines() or ["?"])[-1])) from None
    except Exception as exc:  # pylint: disable=broad-exception-caught
        raise ValueError("SGLang rejects %s: %s: %s" % (path, type(exc).__name__, exc)) from None
    if hasattr(server_args, "resolved_dict"):
        resolved = server_args.resolved_dict()
    else:
        # before 0.5.21 (0.5.15): ServerArgs.__post_init__ resolved the record in place; its fields are the result
        resolved = {field.name: getattr(server_args, field.name) for field in dataclasses.fields(server_args)}
    import inferops_sglang_plan as planner
    import torch

    problems = planner.tp_problems(server_args, resolved, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if problems:
        raise ValueError("SGLang rejects %s: %s" % (path, "; ".join(problems)))
    return server_args, resolved


def model_files(model_path: str) -> t.Optional[t.Dict[str, str]]:
    """The model directory's JSON files (config.json, generation_config.json, ...): what ModelConfig reads of a model."""
    if not os.path.isdir(model_path):
        return None
    return {os.path.join(model_path, name): digest(os.path.join(model_path, name))
            for name in sorted(os.listdir(model_path)) if name.endswith(".json")}


def derivation_inputs(paths: t.List[str], models: t.List[str], versions: t.Dict[str, t.Any]) -> t.Optional[t.Dict[str, t.Any]]:
    """Everything a derivation read: the --config files, the models' JSON files, SGLang's and FlashInfer's
    releases, the GPUs and whether the release's trtllm kernel set is in place -- and the planner that asked (this file
    and inferops_sglang_plan.py beside it), so a node whose collection was upgraded asks SGLang again with the new one.
    None when a model is not a local directory (a hub name): such a derivation is not reused."""
    files = {}
    for path in paths:
        files[path] = digest(path)
    for model in models:
        found = model_files(model)
        if found is None:
            return None
        files.update(found)
    here = os.path.dirname(os.path.abspath(__file__))
    planner = {name: digest(os.path.join(here, name)) for name in (os.path.basename(__file__), "inferops_sglang_plan.py")}
    return dict(versions, files=files, planner=planner)


def reusable(previous: t.Optional[t.Dict[str, t.Any]], paths: t.List[str], versions: t.Dict[str, t.Any]) -> bool:
    """A recorded derivation whose inputs are all unchanged: SGLang would decide the same again."""
    recorded = (previous or {}).get("inputs")
    if not recorded or previous is None or previous.get("format") != DERIVED_FORMAT or sorted((previous.get("configs") or {}).keys()) != sorted(paths):
        return False
    try:
        models = [model["path"] for entry in previous["configs"].values() for model in entry["models"]]
        return derivation_inputs(paths, models, versions) == recorded
    except (OSError, KeyError, TypeError):
        return False


def kind_of(uri: str) -> str:
    """A module's short name (batch_prefill, batch_decode, batch_mla_attention, sampling, cascade, ...) from its uri."""
    for separator in ("_with_kv_cache", "_dtype_"):
        if separator in uri:
            return uri.split(separator, 1)[0]
    return uri


def derive(paths: t.List[str], versions: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    """What each SGLang service will ask of FlashInfer, decided by SGLang's own code: its parser and resolution (the
    backends) for the service's --config; its sampler's FlashInfer module when FlashInfer samples; and its attention
    backend's own planning and forward for the batches a server goes through (inferops_sglang_plan.py), for the model
    and the draft model. Nothing here says which module a backend uses."""
    # pylint: disable=import-error,import-outside-toplevel,too-many-locals
    import inferops_sglang_plan as planner

    derived: t.Dict[str, t.Any] = {"format": DERIVED_FORMAT, "configs": {}, "specs": []}
    parsed = [(path,) + parse(path) for path in paths]
    if any(planner.drafts_by_extend(resolved) for _path, _server_args, resolved in parsed):
        # SGLang's attention test kit pins the attention TP size to 1 when first imported, which SGLang refuses once a
        # service's wider topology is published: imported before any service is planned
        planner.kit_draft_extend()
    for path, server_args, resolved in parsed:
        base = resolved.get("attention_backend")
        backends = {resolved.get("prefill_attention_backend") or base, resolved.get("decode_attention_backend") or base}
        entry: t.Dict[str, t.Any] = {"sha256": digest(path), "attention_backends": sorted(map(str, backends)),
                                     "sampling_backend": resolved.get("sampling_backend"), "models": [], "modules": [],
                                     "planned": [], "triton_kernels": [], "not_warmed": []}
        asked: t.List[t.Tuple[t.Any, str]] = []
        if resolved.get("sampling_backend") == "flashinfer":
            from flashinfer.sampling import get_sampling_module
            asked.extend((spec, "top-k / top-p / min-p requests")
                         for spec in getter_specs(get_sampling_module))
        # whatever attention backend SGLang resolved is built and run; a kernel-set file FlashInfer would download is
        # recorded as missing instead (nothing is downloaded while this plans)
        plans, recorder = planner.plan_service(server_args, resolved)
        entry["planned"] = plans
        whys = {}
        for plan in plans:
            for step in plan["batches"]:
                for line in step["asked"]:
                    whys.setdefault(line.split(" ", 1)[-1], "%s (%s) for %s: %s" % (
                        plan["backend"], "draft" if plan["draft"] else "model", os.path.basename(plan["model"]), step["batch"]))
            entry["models"].append({key: plan[key] for key in (
                "model", "backend", "dtype", "kv_cache_dtype", "head_dim", "heads_per_rank", "kv_heads_per_rank", "gqa_group",
                "decode_tensor_cores", "sliding_window", "draft")})
            entry["models"][-1]["path"] = entry["models"][-1].pop("model")
        asked.extend((spec, whys.get(name, plans[0]["backend"])) for kind, name, spec in recorder.asked if kind == "flashinfer")
        entry["triton_kernels"] = sorted({name for kind, name, _spec in recorder.asked if kind == "triton"})
        entry["sglang_jit_kernels"] = sorted({name for kind, name, _spec in recorder.asked if kind == "sglang-jit"})
        entry["kernel_sets"] = kernel_sets(recorder.asked)
        attention = " / ".join(entry["attention_backends"])
        if entry["triton_kernels"]:
            entry["not_warmed"].append("Triton kernels SGLang's attention backend launches at the first requests (%s): "
                                       "Triton compiles them for the GPU at their first launch (TRITON_CACHE_DIR); not "
                                       "built ahead here" % ", ".join(entry["triton_kernels"]))
        if entry["sglang_jit_kernels"]:
            entry["not_warmed"].append("JIT kernels of SGLang that its attention backend builds (%s): SGLang compiles them "
                                       "at their first use (SGLANG_JIT_CACHE_DIR); not built ahead here"
                                       % ", ".join(entry["sglang_jit_kernels"]))
        for found in entry["kernel_sets"]:
            if found["missing"]:
                entry["not_warmed"].append(
                    "attention %s: %s reads FlashInfer's kernel set %s, and the kernel set is not in place (the "
                    "preflight's trtllm_cubins check says why), so FlashInfer downloads the set at the first request and "
                    "an air-gapped node fails then; the module it builds from the set is not warmed: give the set "
                    "(flashinfer-cubin of this release, flashinfer_cubin: true; or FLASHINFER_CUBIN_DIR in cuda_env_extra) "
                    "and warm again" % (attention, ", ".join(found["for"]), found["set"]))
            else:
                entry["notes"] = entry.get("notes", []) + [
                    "attention %s: its kernel binaries are read at run time from FlashInfer's kernel set %s, which the "
                    "preflight checks" % (attention, found["set"])]
        if not any(kind == "flashinfer" for kind, _name, _spec in recorder.asked if _spec is not None) and not entry["kernel_sets"]:
            entry["notes"] = entry.get("notes", []) + [
                "attention %s: SGLang's backend asked FlashInfer for nothing in the batches planned" % attention]
        entry["not_warmed"].append("SGLang's own JIT kernels (SGLANG_JIT_CACHE_DIR): built at first use, not warmed here")
        known = {record["uri"] for record in derived["specs"]}
        for spec, why in asked:
            if spec.name not in entry["modules"]:
                entry["modules"].append(spec.name)
            if spec.name not in known:
                known.add(spec.name)
                derived["specs"].append({"uri": spec.name, "name": kind_of(spec.name), "why": why,
                                         "spec": planner.spec_record(spec)})
                SPECS[spec.name] = [spec]
        derived["configs"][path] = entry
    derived["inputs"] = derivation_inputs(paths, [model["path"] for entry in derived["configs"].values()
                                                  for model in entry["models"]], versions)
    return derived


def kernel_sets(asked: t.List[t.Tuple[str, str, t.Any]]) -> t.List[t.Dict[str, t.Any]]:
    """The FlashInfer kernel sets a plan read (a file's directory up to its set: <hash>/fmha/trtllm-gen), each with the
    getters that read it and whether a file of it was not in place."""
    found: t.Dict[str, t.Dict[str, t.Any]] = {}
    for kind, line, _spec in asked:
        if kind not in ("kernel-set", "kernel-set-missing"):
            continue
        path, _sep, getter = line.partition(" for ")
        directory = os.path.dirname(path.rstrip("/"))
        if os.path.basename(directory) == "include":
            directory = os.path.dirname(directory)
        key = os.path.normpath(directory)
        entry = found.setdefault(key, {"set": key, "for": [], "missing": False})
        if getter and getter not in entry["for"]:
            entry["for"].append(getter)
        entry["missing"] = entry["missing"] or kind == "kernel-set-missing"
    return sorted(found.values(), key=lambda entry: entry["set"])


def derived_specs(derived: t.Optional[t.Dict[str, t.Any]]) -> t.List[t.Tuple[t.Any, t.Dict[str, t.Any]]]:
    """The derivation's modules as FlashInfer's JitSpecs (recorded at the derivation; rebuilt here without SGLang)."""
    import inferops_sglang_plan as planner  # pylint: disable=import-outside-toplevel

    found = []
    for record in (derived or {}).get("specs") or []:
        if record["uri"] not in SPECS:
            SPECS[record["uri"]] = [planner.spec_from_record(record["spec"])]
        found.append((SPECS[record["uri"]][0], record))
    return found


class Progress:
    """What a warm-up is doing, for the jit_cache role's wait (plugins/action/jit_cache_wait.py), beside the cache."""

    def __init__(self, workspace: t.Optional[str]) -> None:
        self.path = os.path.join(workspace, "inferops-warm-progress.json") if workspace else None
        self.state: t.Dict[str, t.Any] = {"done": []}

    def __call__(self, phase: str, **fields: t.Any) -> None:
        if not self.path:
            return
        self.state.update(fields, phase=phase)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path + ".tmp", "w") as handle:
                json.dump(self.state, handle)
            os.replace(self.path + ".tmp", self.path)
        except OSError:
            pass


def up_to_date(spec: t.Any) -> t.Tuple[bool, t.Optional[str]]:
    """FlashInfer loads a JIT module only after ninja found nothing to rebuild (build_and_load -> build -> write_ninja,
    run_ninja): a library older than its sources, headers or build file is rebuilt at the first request. So this asks
    ninja, with the build file FlashInfer would write now, for a dry run. Returns (usable, why not)."""
    if not spec.is_compiled:
        return False, "not built"
    if getattr(spec, "is_aot", False) or not hasattr(spec, "write_ninja"):
        return True, None
    spec.write_ninja()
    try:
        done = subprocess.run(["ninja", "-C", str(spec.build_dir), "-f", str(spec.ninja_path), "-n", "-d", "explain"],
                              capture_output=True, text=True, check=False)
    except OSError as exc:
        return False, "ninja: %s" % exc
    if done.returncode == 0 and "no work to do" in done.stdout:
        return True, None
    return False, ((done.stderr or done.stdout).strip().splitlines() or ["ninja would rebuild it"])[0]


def unheld(path: str) -> bool:
    """Whether nobody holds the lock file at path (a build that was killed left it behind)."""
    try:
        handle = open(path, "a")  # pylint: disable=consider-using-with
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        handle.close()


def release(name: str) -> t.Optional[str]:
    """An installed distribution's version, or None (not installed, or its metadata unreadable)."""
    try:
        return importlib.metadata.version(name)
    except Exception:  # pylint: disable=broad-exception-caught
        return None


def recorded_accepts() -> t.Dict[str, t.Dict[str, t.Any]]:
    """The file contents SGLang accepted at a recorded warm-up whose inputs (models, SGLang's release) are unchanged:
    sha256 -> what it resolved. Read from the warm-up records beside FlashInfer's caches, without importing SGLang."""
    sglang_version = release("sglang")
    if sglang_version is None:
        return {}
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.path.expanduser("~")
    accepted = {}
    for stamp in glob.glob(os.path.join(base, ".cache", "flashinfer", "*", "*", STAMP)):
        try:
            with open(stamp) as handle:
                derived = json.load(handle).get("derived") or {}
            inputs = derived.get("inputs") or {}
            if inputs.get("sglang") != sglang_version or any(digest(path) != sha for path, sha in inputs["files"].items()):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        for entry in (derived.get("configs") or {}).values():
            accepted[entry["sha256"]] = {"attention_backends": entry["attention_backends"],
                                         "sampling_backend": entry["sampling_backend"], "recorded": stamp}
    return accepted


def parse_configs(paths: t.List[str]) -> t.Dict[str, t.Dict[str, t.Any]]:
    """parse: what SGLang resolves for each configuration (or, for one identical to a recorded accepted one, that)."""
    parsed = {}
    accepted = recorded_accepts()
    for path in paths:
        if digest(path) in accepted:
            # Identical to a configuration SGLang accepted at the recorded warm-up, with the same models and release.
            parsed[path] = accepted[digest(path)]
            continue
        resolved = parse(path)[1]
        parsed[path] = {key: resolved.get(key) for key in (
            "attention_backend", "prefill_attention_backend", "decode_attention_backend", "sampling_backend",
            "kv_cache_dtype", "page_size", "speculative_algorithm")}
    return parsed


def kernel_set_pins() -> t.Tuple[str, str, str]:
    """Where this FlashInfer release looks for its trtllm-gen FMHA kernel set and what it pins: the directory (its own
    choice, jit/env.py), the set's path in it and the sha256 of the set's checksums.txt (artifacts.py)."""
    # pylint: disable=import-error,import-outside-toplevel
    from flashinfer import artifacts
    from flashinfer.jit import env as jit_env

    return str(jit_env.FLASHINFER_CUBIN_DIR), artifacts.ArtifactPath.TRTLLM_GEN_FMHA, artifacts.CheckSumHash.TRTLLM_GEN_FMHA


def trtllm_set() -> t.Optional[str]:
    """The sha256 FlashInfer pins for its trtllm-gen FMHA kernel set when the set's checksums.txt where FlashInfer looks
    is that one (a cheap test, for the derivation's inputs: the files themselves are trtllm_cubins' to check), else None."""
    root, subdir, expected = kernel_set_pins()
    try:
        with open(os.path.join(root, subdir, "checksums.txt"), "rb") as handle:
            return expected if hashlib.sha256(handle.read()).hexdigest() == expected else None
    except OSError:
        return None


def trtllm_cubins() -> t.Dict[str, t.Any]:
    """FlashInfer's trtllm-gen FMHA kernel set (the binaries SGLang's trtllm_mha attention loads at its first request on
    SM 10.x), where this FlashInfer release will look for it, checked against what its source pins: the directory is
    FlashInfer's own choice (jit/env.py: an installed flashinfer-cubin, whose release must be FlashInfer's, else
    FLASHINFER_CUBIN_DIR, else its download cache), the set's path and the sha256 of its checksums.txt are the release's
    artifacts.ArtifactPath / CheckSumHash, and every file checksums.txt lists must hash to its line (what FlashInfer's
    cubin loader checks at each load, downloading anything that does not match). Nothing is downloaded here."""
    # pylint: disable=import-error,import-outside-toplevel
    from flashinfer.jit import env as jit_env

    root, subdir, expected = kernel_set_pins()
    # which of its sources FlashInfer took (the order differs between releases: 0.6.x prefers the package, 0.7.x the variable)
    source = "download cache"
    if os.environ.get("FLASHINFER_CUBIN_DIR") and os.path.realpath(os.environ["FLASHINFER_CUBIN_DIR"]) == os.path.realpath(root):
        source = "FLASHINFER_CUBIN_DIR"
    if jit_env.has_flashinfer_cubin():
        import flashinfer_cubin

        if os.path.realpath(flashinfer_cubin.get_cubin_dir()) == os.path.realpath(root):
            source = "flashinfer-cubin %s" % release("flashinfer-cubin")
    found: t.Dict[str, t.Any] = {"dir": root, "set": subdir, "source": source, "checksums_sha256": expected,
                                 "files": 0, "verified": False, "problem": None,
                                 "no_download": bool(os.environ.get("FLASHINFER_NO_DOWNLOAD"))}
    manifest = os.path.join(root, subdir, "checksums.txt")
    try:
        with open(manifest, "rb") as handle:
            listing = handle.read()
    except OSError:
        found["problem"] = "missing: no %s" % manifest
        return found
    if hashlib.sha256(listing).hexdigest() != expected:
        found["problem"] = ("foreign: %s is not the one FlashInfer %s pins (sha256 %s): the set of another release, or "
                            "altered" % (manifest, release("flashinfer-python"), expected))
        return found
    absent, altered = [], []
    for line in listing.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        sha256, name = line.split()
        path = os.path.join(root, subdir, name)
        if not os.path.isfile(path):
            absent.append(name)
            continue
        found["files"] += 1
        if digest(path) != sha256:
            altered.append(name)
    if altered:
        found["problem"] = "tampered: %d file(s) whose sha256 is not the one checksums.txt lists, e.g. %s" % (
            len(altered), os.path.join(root, subdir, altered[0]))
    elif absent:
        found["problem"] = "incomplete: %d of the %d files checksums.txt lists are absent, e.g. %s" % (
            len(absent), len(absent) + found["files"], os.path.join(root, subdir, absent[0]))
    else:
        found["verified"] = True
    return found


def write_json(path: str, data: t.Any, **options: t.Any) -> None:
    """data as JSON at path, whole or not at all."""
    with open(path + ".tmp", "w") as handle:
        json.dump(data, handle, **options)
    os.replace(path + ".tmp", path)


def view(action: str, args: t.Dict[str, t.Any], out: t.Dict[str, t.Any], handler: logging.Handler) -> None:
    """probe, plan, warm: FlashInfer's view of this node (release, archs, CUDA, workspace), the derived and configured
    modules and their state; warm builds the missing ones and records the warm-up."""
    # pylint: disable=import-error,import-outside-toplevel,too-many-locals,too-many-branches,too-many-statements
    import flashinfer
    import torch
    from flashinfer.jit import core, cpp_ext
    from flashinfer.jit import env as jit_env

    out["flashinfer_version"] = flashinfer.__version__
    out["archs"] = sorted("%d.%s" % arch for arch in core.current_compilation_context.TARGET_CUDA_ARCHS)
    out["workspace"] = str(jit_env.FLASHINFER_WORKSPACE_DIR)
    out["cuda_home"] = cpp_ext.get_cuda_path()
    out["cuda_version"] = str(cpp_ext.get_cuda_version())
    out["sglang_version"] = release("sglang")
    progress = Progress(out["workspace"] if action == "warm" else None)
    gpus = sorted(set("%s (%d.%d)" % ((torch.cuda.get_device_name(index),) + tuple(torch.cuda.get_device_capability(index)))
                      for index in range(torch.cuda.device_count()))) if torch.cuda.is_available() else []
    versions = {"sglang": out["sglang_version"], "flashinfer": out["flashinfer_version"], "archs": out["archs"], "gpus": gpus,
                "trtllm_set": trtllm_set()}
    stamp_path = os.path.join(out["workspace"], STAMP)
    current = {"flashinfer_version": out["flashinfer_version"], "cuda_home": out["cuda_home"],
               "cuda_version": out["cuda_version"], "archs": out["archs"]}
    try:
        with open(stamp_path) as handle:
            previous = json.load(handle)
    except (OSError, ValueError):
        previous = None
    out["stamp"] = {key: value for key, value in (previous or {}).items() if key != "derived"} or None
    out["stamp_matches"] = previous is not None and all(previous.get(key) == value for key, value in current.items())
    if action == "warm" and previous is not None and not out["stamp_matches"]:
        shutil.rmtree(str(jit_env.FLASHINFER_JIT_DIR), ignore_errors=True)
        out["cleaned"].append("cache of %s: built with %s, now %s" % (out["workspace"], out["stamp"], current))
        previous = None
    if action in ("warm", "plan") and args.get("derive"):
        # The last derivation: recorded by a warm-up (the stamp), or kept by a plan whose warm-up has not run yet.
        memo_path = os.path.join(out["workspace"], "inferops-derived.json")
        recorded, out["derived_from"] = (previous or {}).get("derived"), "warm-up"
        if not reusable(recorded, args["sglang_configs"], versions):
            try:
                with open(memo_path) as handle:
                    recorded, out["derived_from"] = json.load(handle), "plan"
            except (OSError, ValueError):
                recorded = None
        if reusable(recorded, args["sglang_configs"], versions):
            # The configurations, the models, the releases and the GPUs are those of that derivation: SGLang is not
            # imported again (it takes seconds per run on every node).
            out["derived"] = dict(t.cast(t.Dict[str, t.Any], recorded), reused=True)
        else:
            out["derived_from"] = "SGLang"
            progress("deriving", since=time.time())
            out["derived"] = derive(args["sglang_configs"], versions)
            # SGLang's imports reconfigure logging: listen again
            logging.getLogger().addHandler(handler)
            try:
                os.makedirs(out["workspace"], exist_ok=True)
                write_json(memo_path, out["derived"], sort_keys=True)
            except OSError:
                pass
    elif previous is not None:
        out["derived"] = previous.get("derived")
    trtllm = any(entry.get("kernel_sets") for entry in ((out["derived"] or {}).get("configs") or {}).values())
    if action != "warm" and (trtllm or args.get("cubins") or release("flashinfer-cubin") or os.environ.get("FLASHINFER_CUBIN_DIR")):
        # a service's attention (its derivation's kernel sets) reads these at run time; a set that is there is checked whoever asked (by the
        # probe, the plan and the check: a warm-up builds modules and needs no verdict on the set)
        out["trtllm_cubins"] = dict(trtllm_cubins(), used=trtllm)
    seen: t.Set[str] = set()
    planned = []

    def plan_one(spec: t.Any, name: str, why: str) -> None:
        if spec.name in seen:
            return
        seen.add(spec.name)
        entry = {"name": name, "uri": spec.name, "library": str(spec.get_library_path()), "built": False, "seconds": 0.0,
                 "why": why}
        planned.append((spec, entry, up_to_date(spec)))

    for recipe in args["modules"]:
        for spec in make_specs(recipe):
            plan_one(spec, recipe if isinstance(recipe, str) else recipe["kind"], "flashinfer_jit_modules")
    for spec, record in derived_specs(out["derived"]):
        plan_one(spec, record["name"], record["why"])
    to_build = [entry["name"] for spec, entry, (usable, why) in planned if not usable]
    for spec, entry, state in planned:
        usable, why = state
        if action == "warm" and not usable:
            progress("building", module=entry["name"], why=entry["why"], index=len(progress.state["done"]) + 1,
                     total=len(to_build), since=time.time())
            lock = str(spec.lock_path)
            if os.path.exists(lock) and unheld(lock):
                os.unlink(lock)
                out["cleaned"].append("stale lock %s" % lock)
            build_dir = os.path.dirname(entry["library"])
            if not spec.is_compiled and os.path.isdir(build_dir) and unheld(lock):
                shutil.rmtree(build_dir)
                out["cleaned"].append("half-built %s" % build_dir)
            elif spec.is_compiled:
                out["cleaned"].append("out of date %s (%s): ninja rebuilds it" % (spec.name, why))
            started = time.monotonic()
            if "verbose" in inspect.signature(spec.build).parameters:
                # FlashInfer 0.6.12's JitSpec.build takes verbose without a default (later releases read the variable)
                spec.build(verbose=os.environ.get("FLASHINFER_JIT_VERBOSE", "0") == "1")
            else:
                spec.build()
            entry["built"] = True
            entry["seconds"] = round(time.monotonic() - started, 1)
            progress.state["done"].append({"name": entry["name"], "seconds": entry["seconds"]})
            usable, why = up_to_date(spec)
        entry["compiled"] = usable
        if spec.is_compiled and not usable:
            entry["out_of_date"] = why
        out["modules"].append(entry)
    # What makes a built module valid on a node: a node whose fingerprint matches can use another's build as it is.
    out["fingerprint_fields"] = {"format": 1, "flashinfer": out["flashinfer_version"], "sglang": out["sglang_version"],
                                 "archs": out["archs"], "cuda_home": out["cuda_home"], "nvcc": out["cuda_version"],
                                 "workspace": out["workspace"], "modules": sorted(entry["uri"] for entry in out["modules"])}
    out["fingerprint"] = hashlib.sha256(json.dumps(out["fingerprint_fields"], sort_keys=True).encode()).hexdigest()[:32]
    if action == "warm":
        progress("done")
        os.makedirs(out["workspace"], exist_ok=True)
        record = {key: value for key, value in (out["derived"] or {}).items() if key != "reused"} or None
        write_json(stamp_path, dict(current, derived=record), indent=2, sort_keys=True)
        out["stamp"] = current
        out["stamp_matches"] = True


def main(argv: t.List[str], result: t.TextIO) -> int:
    """One action (argv: ACTION REQUEST); its result written to result as one MARKER line, the caller's to read."""
    action, args = argv[0], json.loads(argv[1])
    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    logging.getLogger().addHandler(handler)
    out: t.Dict[str, t.Any] = {"warnings": [], "modules": [], "cleaned": [], "derived": None}
    try:
        if action == "parse":
            out["parsed"] = {}
            out["parsed"] = parse_configs(args["sglang_configs"])
        else:
            view(action, args, out, handler)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        out["error"] = "%s: %s" % (type(exc).__name__, exc)
    if action != "parse":
        out["warnings"] = [line for line in captured.getvalue().splitlines() if line.strip()]
    result.write(MARKER + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], sys.stdout))
