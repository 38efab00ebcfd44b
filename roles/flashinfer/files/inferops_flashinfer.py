# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""inferops-flashinfer: FlashInfer on this node, exactly as the SGLang services see it.

Installed by inferops.blackwell.flashinfer as /usr/local/sbin/inferops-flashinfer.
Every subcommand runs the SGLang venv's Python in the one environment file the
services load (cuda_env), and nothing else of the caller's environment, so what it
reports is what a service would get.

  probe   print FlashInfer's view as JSON: version, resolved arch set, the CUDA
          version and CUDA_HOME it detects, the JIT workspace, each module's state
  warm    compile the configured JIT modules that are not in the cache (compile
          only: no GPU needed); clear stale lock files and half-built modules first;
          rebuild everything when the toolkit changed since the last warm-up
  check   the preflight (ExecStartPre=): in seconds, exit 0 when nvcc at CUDA_HOME
          satisfies the GPUs, the arch set matches them and every module is cached;
          otherwise exit 1 with the cause and the fix

Configuration: /etc/inferops/flashinfer.json (written by the roles).
Runs on the node's own python3, standard library only.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pwd
import shutil
import subprocess
import sys
import typing as t

CONFIG = "/etc/inferops/flashinfer.json"
MARKER = "INFEROPS-JSON:"
STAMP = "inferops-warm.json"

# Runs inside the SGLang venv's Python: FlashInfer's own code decides everything reported.
INNER = r'''
import io, json, logging, os, shutil, sys, time, fcntl
action, args = sys.argv[1], json.loads(sys.argv[2])
captured = io.StringIO()
handler = logging.StreamHandler(captured)
logging.getLogger().addHandler(handler)
out = {"warnings": [], "modules": [], "cleaned": []}

def make_spec(name):
    if name == "sampling":
        from flashinfer.jit.sampling import gen_sampling_module
        return gen_sampling_module()
    kind, dtype_name, head_dim = name.split(":")
    import torch
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    head_dim = int(head_dim)
    # SGLang's FlashInfer attention backend: paged KV cache, int32 indices, no positional encoding in the kernel,
    # no sliding window, no logits soft cap (a model that uses them builds other variants at its first request).
    if kind == "batch_decode":
        from flashinfer.jit.attention import gen_batch_decode_module
        return gen_batch_decode_module(dtype, dtype, dtype, torch.int32, head_dim, head_dim, 0, False, False)
    if kind == "batch_prefill":
        from flashinfer.jit.attention import gen_batch_prefill_module
        return gen_batch_prefill_module("fa2", dtype, dtype, dtype, torch.int32, head_dim, head_dim, 0, False, False, False)
    raise ValueError("unknown module %r (known: sampling, <batch_decode|batch_prefill>:<bf16|fp16>:<head_dim>)" % name)

def unheld(path):
    try:
        handle = open(path, "a")
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        handle.close()

try:
    import flashinfer
    from flashinfer.jit import core, cpp_ext
    from flashinfer.jit import env as jit_env
    out["flashinfer_version"] = flashinfer.__version__
    out["archs"] = sorted("%d.%s" % arch for arch in core.current_compilation_context.TARGET_CUDA_ARCHS)
    out["workspace"] = str(jit_env.FLASHINFER_WORKSPACE_DIR)
    out["cuda_home"] = cpp_ext.get_cuda_path()
    out["cuda_version"] = str(cpp_ext.get_cuda_version())
    stamp_path = os.path.join(out["workspace"], "@STAMP@")
    current = {"flashinfer_version": out["flashinfer_version"], "cuda_home": out["cuda_home"],
               "cuda_version": out["cuda_version"], "archs": out["archs"]}
    try:
        with open(stamp_path) as handle:
            previous = json.load(handle)
    except (OSError, ValueError):
        previous = None
    out["stamp"] = previous
    out["stamp_matches"] = previous == current
    if action == "warm" and previous is not None and previous != current:
        shutil.rmtree(str(jit_env.FLASHINFER_JIT_DIR), ignore_errors=True)
        out["cleaned"].append("cache of %s: built with %s, now %s" % (out["workspace"], previous, current))
    for name in args["modules"]:
        spec = make_spec(name)
        entry = {"name": name, "uri": spec.name, "library": str(spec.get_library_path()), "built": False, "seconds": 0.0}
        if action == "warm" and not spec.is_compiled:
            lock = str(spec.lock_path)
            if os.path.exists(lock) and unheld(lock):
                os.unlink(lock)
                out["cleaned"].append("stale lock %s" % lock)
            build_dir = os.path.dirname(entry["library"])
            if os.path.isdir(build_dir) and unheld(lock):
                shutil.rmtree(build_dir)
                out["cleaned"].append("half-built %s" % build_dir)
            started = time.monotonic()
            spec.build()
            entry["built"] = True
            entry["seconds"] = round(time.monotonic() - started, 1)
        entry["compiled"] = spec.is_compiled
        out["modules"].append(entry)
    if action == "warm":
        os.makedirs(out["workspace"], exist_ok=True)
        with open(stamp_path, "w") as handle:
            json.dump(current, handle, indent=2, sort_keys=True)
        out["stamp_matches"] = True
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
out["warnings"] = [line for line in captured.getvalue().splitlines() if line.strip()]
print("@MARKER@" + json.dumps(out))
'''.replace("@STAMP@", STAMP).replace("@MARKER@", MARKER)


def load_config(path: str) -> t.Dict[str, t.Any]:
    try:
        with open(path) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SystemExit("inferops-flashinfer: cannot read %s (%s): run the inferops.blackwell roles first" % (path, exc)) from None
    config.setdefault("modules", ["sampling"])
    return config


def read_env_file(path: str) -> t.Dict[str, str]:
    """systemd EnvironmentFile= lines: NAME=value, NAME='value' or NAME="value"; comments and blanks skipped."""
    env = {}
    with open(path) as handle:
        for line in handle:
            text = line.strip()
            if not text or text.startswith("#") or "=" not in text:
                continue
            name, value = text.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            env[name.strip()] = value
    return env


def service_env(config: t.Dict[str, t.Any]) -> t.Dict[str, str]:
    """What a unit with EnvironmentFile= gets: the file, plus HOME/USER/LANG of the running user."""
    user = pwd.getpwuid(os.getuid())
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LANG": "C.UTF-8", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    env.update(read_env_file(config["env_file"]))
    if os.environ.get("INFEROPS_MAX_JOBS"):
        # Compile parallelism from the caller (jit_cache), unless the environment file sets MAX_JOBS itself.
        env.setdefault("MAX_JOBS", os.environ["INFEROPS_MAX_JOBS"])
    return env


def inner(config: t.Dict[str, t.Any], action: str) -> t.Dict[str, t.Any]:
    python = os.path.join(config["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        return {"error": "no Python at %s: check the SGLang venv path (flashinfer_venv)" % python}
    done = subprocess.run([python, "-c", INNER, action, json.dumps({"modules": config["modules"]})],
                          env=service_env(config), capture_output=True, text=True, check=False)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    return {"error": "the venv's Python exited %d: %s" % (done.returncode, (done.stderr or done.stdout).strip()[-2000:])}


def version_tuple(text: t.Optional[str]) -> t.Tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split(".")[:2])
    except ValueError:
        return ()


def tool_problems(config: t.Dict[str, t.Any]) -> t.List[str]:
    """What the services run besides FlashInfer: the venv's Python, and ninja on the pinned PATH (FlashInfer runs it
    even to load a cached module)."""
    problems = []
    env = service_env(config)
    if shutil.which("ninja", path=env.get("PATH", "")) is None:
        problems.append("no ninja on the PATH of %s (%s): FlashInfer would fail at its first module load. Fix: "
                        "cuda_env_sglang_venv must be the SGLang venv (its bin/ holds ninja)." % (config["env_file"], env.get("PATH")))
    python = os.path.join(config["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        problems.append("no Python at %s: fix flashinfer_venv / sglang_service_venv." % python)
    return problems


def check(config: t.Dict[str, t.Any], view: t.Dict[str, t.Any]) -> t.List[str]:
    """Causes and fixes; empty when the services would start."""
    problems = tool_problems(config)
    env_file = config["env_file"]
    if view.get("error") and not view.get("archs"):
        problems.append("FlashInfer cannot start in the services' environment: %s. Fix: re-run the inferops.blackwell site "
                        "playbook (cuda_env, flashinfer)." % view["error"])
        return problems
    expected = sorted(config.get("expected_archs", "").split())
    if not view.get("archs"):
        problems.append("FlashInfer resolved no target arch (the incident: nvcc at %s is %s; warnings: %s). Fix: CUDA_HOME "
                        "in %s must be a toolkit >= %s." % (view.get("cuda_home"), view.get("cuda_version"),
                                                            "; ".join(view.get("warnings", [])) or "none", env_file,
                                                            config.get("min_cuda")))
    elif expected and view["archs"] != expected:
        problems.append("FlashInfer resolved %s, the GPUs need %s. Fix: FLASHINFER_CUDA_ARCH_LIST in %s (cuda_env)."
                        % (" ".join(view["archs"]), " ".join(expected), env_file))
    if config.get("min_cuda") and version_tuple(view.get("cuda_version")) < version_tuple(config["min_cuda"]):
        problems.append("FlashInfer detects CUDA %s at %s; the GPUs need >= %s. Fix: CUDA_HOME in %s (cuda_env, cuda_toolkit)."
                        % (view.get("cuda_version"), view.get("cuda_home"), config["min_cuda"], env_file))
    missing = [module["name"] for module in view.get("modules", []) if not module.get("compiled")]
    if missing:
        problems.append("JIT modules not in the cache at %s: %s (a wiped cache?). Fix: inferops-flashinfer warm, or the "
                        "remediate playbook; starting now would compile them at the first request."
                        % (view.get("workspace"), ", ".join(missing)))
    elif view.get("stamp") is not None and not view.get("stamp_matches"):
        problems.append("the cache at %s was warmed with %s, the environment is now %s. Fix: inferops-flashinfer warm."
                        % (view.get("workspace"), view.get("stamp"), {k: view.get(k) for k in ("cuda_home", "cuda_version")}))
    return problems


class WarmLock:
    """One warm-up per node at a time (a second waits)."""

    def __init__(self, workspace_base: str) -> None:
        self.path = os.path.join(workspace_base, ".inferops-warm.lock")
        self.handle: t.Optional[t.IO[str]] = None

    def __enter__(self) -> WarmLock:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.handle = open(self.path, "a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.close()


def main(argv: t.Optional[t.List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="inferops-flashinfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("command", choices=("probe", "warm", "check"))
    args = parser.parse_args(argv)
    config = load_config(args.config)
    if args.command == "probe":
        print(json.dumps(inner(config, "probe"), indent=2, sort_keys=True))
        return 0
    if args.command == "warm":
        base = read_env_file(config["env_file"]).get("FLASHINFER_WORKSPACE_BASE") or pwd.getpwuid(os.getuid()).pw_dir
        with WarmLock(base):
            view = inner(config, "warm")
        print(json.dumps(view, indent=2, sort_keys=True))
        return 1 if view.get("error") else 0
    view = inner(config, "probe")
    problems = check(config, view)
    if problems:
        for problem in problems:
            print("inferops-flashinfer check: FAIL: " + problem, file=sys.stderr)
        return 1
    print("inferops-flashinfer check: ok: FlashInfer %s, archs %s, CUDA %s at %s, %d module(s) cached in %s" % (
        view.get("flashinfer_version"), " ".join(view["archs"]), view.get("cuda_version"), view.get("cuda_home"),
        len(view.get("modules", [])), view.get("workspace")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
