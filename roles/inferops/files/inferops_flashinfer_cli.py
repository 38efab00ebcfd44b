# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""inferops-flashinfer: FlashInfer on this node, exactly as the SGLang services see it.

The command's front (arguments, output, exit status), installed by inferops.blackwell.inferops beside the tool's
logic (inferops_flashinfer.py, the collection's module_utils) and run by /usr/local/sbin/inferops-flashinfer.
Every subcommand runs the SGLang venv's Python in the one environment file the
services load (cuda_env), and nothing else of the caller's environment, so what it
reports is what a service would get.

  probe   print FlashInfer's view as JSON: version, resolved arch set, the CUDA
          version and CUDA_HOME it detects, the JIT workspace, each module's state
  warm    derive the JIT modules the SGLang services will ask for -- from their
          --config files (sglang_config_dir), by SGLang's own parser, resolution
          (backends, KV cache dtype) and ModelConfig, named by FlashInfer's own spec
          functions -- add the configured ones (modules), and compile those not in
          the cache (compile only: no GPU needed); clear stale lock files and
          half-built modules first; rebuild everything when the toolkit changed
          since the last warm-up; record what was derived from which file contents
  plan    what warm would do: the derived and configured modules and their
          state, the node's fingerprint, and what check would say, as JSON;
          builds nothing
  parse   SGLang's own parser and resolution of the configurations (with
          --sglang-config, candidate files): the backends it picks, or its
          refusal; exit 1 on a refusal
  check   the preflight (ExecStartPre=): in seconds, exit 0 when nvcc at CUDA_HOME
          satisfies the GPUs, the arch set matches them, every module is cached
          and was derived from the services' configurations as they are now;
          otherwise exit 1 with the cause and the fix. --unit NAME (a unit's
          ExecStartPre=, %n): the environment systemd gave it (drop-ins
          included) must hold every pinned value; --units: the same for each
          enabled or running SGLang unit, seen from outside it
  metrics (--output FILE [--user NAME]) the check's verdict as node_exporter
          textfile metrics, written atomically (ready, each cause, modules
          cached vs expected, versions, archs), the units' environment
          included (as check --units); run as root, the check itself runs as
          NAME (the services' user); exit 0 whatever the verdict

  export  (--output FILE) pack the compiled modules of this node's plan, their
          generated sources, ninja's records and the warm-up record, with a
          manifest (the fingerprint: FlashInfer, SGLang, archs, nvcc, CUDA_HOME,
          workspace, module names; each file's sha256), for the build store
  import  (--archive FILE --sha256 HEX) put a store artifact in place after
          checking it: its checksum, its fingerprint against this node's, each
          file against the manifest, then ninja's own dry run (nothing to
          rebuild); exit 3 when refused (nothing of it is left in the cache)

Configuration: /etc/inferops/flashinfer.json (written by the roles).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pwd
import subprocess
import sys
import time
import typing as t

sys.dont_write_bytecode = True  # nothing written beside the installed files when they are imported
LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inferops_flashinfer.py")


def run(argv: t.List[str]) -> t.Tuple[int, str, str]:
    """The logic's runner here (the modules give theirs, AnsibleModule.run_command): argv, no shell."""
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
    return done.returncode, done.stdout, done.stderr


def load_tool(path: str) -> t.Any:
    """The tool's logic from its installed file (inferops_tool_lib), whatever its name; the files it imports are beside it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("inferops_flashinfer", path)
    if spec is None or spec.loader is None:
        raise SystemExit("inferops-flashinfer: cannot load %s: run the inferops.blackwell roles first" % path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["inferops_flashinfer"] = module
    spec.loader.exec_module(module)
    return module


def verdict_as(user: t.Optional[str], config_path: str, lib: str = LIB) -> t.Dict[str, t.Any]:
    """The preflight's view and causes, computed as the services' user (what their ExecStartPre= sees): this program
    run again as that user, so that nothing FlashInfer touches in the user's cache becomes root's."""
    command = [sys.executable, os.path.abspath(__file__), "--lib", lib, "--config", config_path, "verdict"]
    if user and os.geteuid() == 0:
        account = pwd.getpwnam(user)
        done = subprocess.run(command, user=account.pw_uid, group=account.pw_gid, extra_groups=os.getgrouplist(user, account.pw_gid),
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}, cwd="/",
                              capture_output=True, text=True, check=False)
    else:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        return json.loads(done.stdout)
    except ValueError:
        output = (done.stderr or done.stdout).strip()[-500:]
        return {"view": {}, "problems": [["flashinfer_error", "the preflight exited %d: %s" % (done.returncode, output)]]}


def main(argv: t.Optional[t.List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="inferops-flashinfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="the tool's configuration (default: the logic's own, /etc/inferops/flashinfer.json)")
    parser.add_argument("--lib", default=LIB, help="the tool's logic as installed (inferops_tool_lib)")
    parser.add_argument("--sglang-config", action="append", default=[], metavar="FILE",
                        help="plan, parse: these SGLang configurations instead of sglang_config_dir's")
    parser.add_argument("--output", metavar="FILE", help="export: where the artifact is written")
    parser.add_argument("--archive", metavar="FILE", help="import: the artifact from the store")
    parser.add_argument("--sha256", metavar="HEX", help="import: its checksum as the store lists it")
    parser.add_argument("--user", metavar="NAME", help="metrics: the services' user, whom the preflight runs as")
    parser.add_argument("--unit", metavar="NAME", help="check: run as NAME's ExecStartPre= (%%n): the environment systemd "
                        "gave this process must hold the pinned values")
    parser.add_argument("--units", action="store_true", help="check: also the environment each enabled or running SGLang "
                        "unit runs with, or would start with")
    parser.add_argument("command", choices=("probe", "plan", "parse", "warm", "check", "export", "import", "metrics", "verdict"))
    args = parser.parse_args(argv)
    tool = load_tool(args.lib)
    config_path = args.config or tool.CONFIG
    if args.command == "metrics":
        if not args.output:
            parser.error("metrics needs --output")
        started = time.monotonic()
        found = verdict_as(args.user, config_path, args.lib)
        problems = [(str(cause), str(text)) for cause, text in found["problems"]]
        tool.write_atomically(args.output, tool.render_metrics(found["view"], problems, time.time(), time.monotonic() - started))
        for _cause, text in problems:
            print("inferops-flashinfer metrics: not ready: " + text)
        print("inferops-flashinfer metrics: %s written to %s" % ("not ready" if problems else "ready", args.output))
        return 0
    try:
        config = tool.read_config(config_path)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if args.command == "verdict":
        view, causes = tool.verdict(run, config, units=True)
        print(json.dumps({"view": view, "problems": causes}, sort_keys=True))
        return 0
    if (args.unit or args.units) and args.command != "check":
        parser.error("--unit and --units go with check only")
    if args.sglang_config and args.command not in ("plan", "parse"):
        parser.error("--sglang-config goes with plan and parse only")
    if args.command in ("export", "import"):
        if (args.command == "export" and not args.output) or (args.command == "import" and not (args.archive and args.sha256)):
            parser.error("export needs --output; import needs --archive and --sha256")
        done, result = tool.artifact(run, config, args.command, args.output or args.archive, sha256=args.sha256)
        print(json.dumps(result, sort_keys=True))
        return 0 if done else 3 if args.command == "import" else 1
    if args.command in ("probe", "plan", "parse"):
        view = tool.view_of(run, config, args.command, sglang_config_files=args.sglang_config)
        print(json.dumps(view, indent=2, sort_keys=True))
        return 1 if args.command in ("plan", "parse") and view.get("error") else 0
    if args.command == "warm":
        view = tool.warm(run, config, max_jobs=os.environ.get("INFEROPS_MAX_JOBS"))
        print(json.dumps(view, indent=2, sort_keys=True))
        return 1 if view.get("error") else 0
    view, causes = tool.verdict(run, config, unit=args.unit, unit_env=dict(os.environ), units=args.units)
    if causes:
        for _cause, text in causes:
            print("inferops-flashinfer check: FAIL: " + text, file=sys.stderr)
        return 1
    print("\n".join(tool.verdict_lines(view, args.unit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
