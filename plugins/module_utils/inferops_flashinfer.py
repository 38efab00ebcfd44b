# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node tool's logic: FlashInfer on this node, exactly as the SGLang services see it.

Every action runs the SGLang venv's Python in the one environment file the services load (cuda_env), and nothing else of
the caller's environment, so what it reports is what a service would get. Used by the collection's modules
(flashinfer_view, flashinfer_verdict, jit_cache_warm, jit_cache_artifact), and installed on the node by
inferops.blackwell.inferops beside its command's front (inferops_flashinfer_cli.py: the units' ExecStartPre=, the
readiness timer, an operator at a shell). Runs on the node's own python3, standard library only; what must run in the
SGLang venv's Python (FlashInfer's and SGLang's own code) is inferops_flashinfer_venv.py (the role's file, never run as
a module), installed beside this file and run as a separate process.

Every process this logic starts goes through the caller's runner (Run): a module gives AnsibleModule.run_command, the
command's front a subprocess. What a process must see of the environment is in its argv (env -i -- NAME=value ...), so
that both runners start the same command.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import pwd
import shlex
import shutil
import struct
import sys
import tarfile
import time
import typing as t

sys.dont_write_bytecode = True  # nothing written beside the installed files when they are imported

CONFIG = "/etc/inferops/flashinfer.json"
# the venv side's result line and its warm-up record (its MARKER and STAMP: a unit test holds them equal)
MARKER = "INFEROPS-JSON:"
STAMP = "inferops-warm.json"
# the sha256 of the venv side as this release ships it (roles/inferops/files/inferops_flashinfer_venv.py): the modules
# run the node's installed copy only when it is this one. A unit test holds it current (it names the new value).
VENV_SIDE_SHA256 = "19c3516e419f518423c4305f7b6ec9d26f90759d4b2f5e66dbced46f5379c3d7"

# runs argv (no shell, the caller's environment: what the process must see is in argv) -> (exit status, stdout, stderr);
# raises OSError when the program cannot be started
Run = t.Callable[[t.List[str]], t.Tuple[int, str, str]]


def with_env(env: t.Dict[str, str], argv: t.List[str]) -> t.List[str]:
    """argv run with exactly env as its environment (env -i: nothing of the caller's; argv[0] found on env's PATH)."""
    if "=" in argv[0]:
        raise ValueError("%r: a program whose name holds '=' cannot follow env's NAME=value arguments" % argv[0])
    return ["env", "-i", "--", *["%s=%s" % item for item in sorted(env.items())], *argv]


def read_config(path: str) -> t.Dict[str, t.Any]:
    """The tool's configuration (written by the flashinfer role); ValueError says why it cannot be read."""
    try:
        with open(path) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError("inferops-flashinfer: cannot read %s (%s): run the inferops.blackwell roles first" % (path, exc)) from None
    config.setdefault("modules", [])
    config.setdefault("derive", True)
    config.setdefault("sglang_config_dir", "/etc/inferops/sglang")
    return config


def sglang_configs(config: t.Dict[str, t.Any]) -> t.List[str]:
    """The services' SGLang configurations (--config files, written by sglang_service): what the warm set is derived from."""
    directory = config.get("sglang_config_dir", "/etc/inferops/sglang")
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".yaml"))
    except OSError:
        return []
    return [os.path.join(directory, name) for name in names]


def digest(path: str) -> str:
    """A file's sha256, as the venv side computes it for the derivation's inputs."""
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


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


def service_env(config: t.Dict[str, t.Any], pinned: t.Optional[t.Dict[str, str]] = None,
                max_jobs: t.Optional[str] = None) -> t.Dict[str, str]:
    """What a unit with EnvironmentFile= gets: the file (pinned: as already read), plus HOME/USER/LANG of the running user;
    max_jobs: the compile parallelism the caller asks for (jit_cache), unless the environment file sets MAX_JOBS itself."""
    user = pwd.getpwuid(os.getuid())
    env = {"HOME": user.pw_dir, "USER": user.pw_name, "LANG": "C.UTF-8", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    env.update(read_env_file(config["env_file"]) if pinned is None else pinned)
    if max_jobs:
        env.setdefault("MAX_JOBS", max_jobs)
    return env


# the half that runs in the SGLang venv's Python, as installed beside this file on the node
VENV_SIDE = "inferops_flashinfer_venv.py"


def inner(run: Run, config: t.Dict[str, t.Any], action: str, script: t.Optional[str] = None,
          max_jobs: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    """Run the venv side (script: its installed file, by default beside this one) for action, in the services'
    environment; its result, or {"error": ...}."""
    python = os.path.join(config["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        return {"error": "no Python at %s: check the SGLang venv path (inferops_sglang_venv)" % python}
    request = {"modules": config["modules"], "derive": bool(config.get("derive", True)),
               "sglang_configs": config.get("sglang_config_files") or sglang_configs(config), "cubins": bool(config.get("cubins"))}
    pinned = read_env_file(config["env_file"])
    script = script or os.path.join(os.path.dirname(os.path.abspath(__file__)), VENV_SIDE)
    rc, stdout, stderr = run(with_env(service_env(config, pinned, max_jobs), [python, script, action, json.dumps(request)]))
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            # the environment file as the services load it: the roles read it from here (the file's one parser)
            return dict(json.loads(line[len(MARKER):]), pinned=pinned)
    return {"error": "the venv's Python exited %d: %s" % (rc, (stderr or stdout).strip()[-2000:])}


def version_tuple(text: t.Optional[str]) -> t.Tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split(".")[:2])
    except ValueError:
        return ()


def tool_problems(config: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """What the services run besides FlashInfer: the venv's Python, and ninja on the pinned PATH (FlashInfer runs it
    even to load a cached module). Each problem as (cause, text): the cause is the label the readiness metrics carry."""
    problems = []
    env = service_env(config)
    if shutil.which("ninja", path=env.get("PATH", "")) is None:
        problems.append(("no_ninja", "no ninja on the PATH of %s (%s): FlashInfer would fail at its first module load. Fix: "
                         "inferops_sglang_venv must be the SGLang venv (its bin/ holds ninja)." % (config["env_file"], env.get("PATH"))))
    python = os.path.join(config["venv"], "bin", "python")
    if not os.access(python, os.X_OK):
        problems.append(("no_python", "no Python at %s: fix inferops_sglang_venv." % python))
    return problems


def coverage_problems(config: t.Dict[str, t.Any], view: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """The warm set was derived from the services' configurations as they are now (no SGLang import here: the
    warm-up recorded what it derived, from which file contents, beside the cache)."""
    if not config.get("derive", True):
        return []
    problems = []
    paths = sglang_configs(config)
    derived = (view.get("derived") or {}).get("configs") or {}
    if paths and not derived:
        problems.append(("not_warmed", "no record of a warm-up for the services' configurations in %s (a wiped cache, or never "
                         "warmed). Fix: inferops-flashinfer warm, or the remediate playbook." % view.get("workspace")))
        return problems
    for path in paths:
        if path not in derived or derived[path].get("sha256") != digest(path):
            problems.append(("config_changed", "%s changed since the cache was warmed (its modules may differ). Fix: "
                             "inferops-flashinfer warm (the jit_cache role), then start the service." % path))
    jit_dir = service_env(config).get("SGLANG_JIT_CACHE_DIR")
    if jit_dir and not creatable(jit_dir):
        problems.append(("sglang_jit_cache", "SGLang's JIT cache %s (SGLANG_JIT_CACHE_DIR in %s) cannot be written by %s. Fix: "
                         "the jit_cache role or the remediate playbook creates it."
                         % (jit_dir, config["env_file"], pwd.getpwuid(os.getuid()).pw_name)))
    return problems


def creatable(path: str) -> bool:
    """A writable directory, or one that os.makedirs can make (as SGLang does): its nearest existing ancestor is a
    writable directory."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.path.isdir(path) and os.access(path, os.W_OK)


def diagnose(config: t.Dict[str, t.Any], view: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """The preflight's verdict: (cause, text with the fix) for each reason the services would not start as warmed;
    empty when they would."""
    problems = tool_problems(config)
    env_file = config["env_file"]
    if view.get("error") and not view.get("archs"):
        fix = ("install flashinfer-cubin of FlashInfer's own release (flashinfer_cubin: true), or uninstall it and use "
               "FLASHINFER_CUBIN_DIR" if "flashinfer-cubin" in str(view["error"]) else
               "re-run the inferops.blackwell site playbook (cuda_env, flashinfer)")
        problems.append(("flashinfer_error", "FlashInfer cannot start in the services' environment: %s. Fix: %s." % (
            view["error"], fix)))
        return problems
    expected = sorted(config.get("expected_archs", "").split())
    if not view.get("archs"):
        problems.append(("no_arch", "FlashInfer resolved no target arch (the incident: nvcc at %s is %s; warnings: %s). Fix: "
                         "CUDA_HOME in %s must be a toolkit >= %s." % (view.get("cuda_home"), view.get("cuda_version"),
                                                                       "; ".join(view.get("warnings", [])) or "none", env_file,
                                                                       config.get("min_cuda"))))
    elif expected and view["archs"] != expected:
        problems.append(("arch_mismatch", "FlashInfer resolved %s, the GPUs need %s. Fix: FLASHINFER_CUDA_ARCH_LIST in %s "
                         "(cuda_env)." % (" ".join(view["archs"]), " ".join(expected), env_file)))
    if config.get("min_cuda") and version_tuple(view.get("cuda_version")) < version_tuple(config["min_cuda"]):
        problems.append(("cuda_too_old", "FlashInfer detects CUDA %s at %s; the GPUs need >= %s. Fix: CUDA_HOME in %s "
                         "(cuda_env, cuda_toolkit)." % (view.get("cuda_version"), view.get("cuda_home"), config["min_cuda"],
                                                        env_file)))
    problems.extend(coverage_problems(config, view))
    problems.extend(cubin_problems(config, view))
    problems.extend(kernel_set_problems(config, view))
    stale = ["%s (%s)" % (module["name"], module["out_of_date"]) for module in view.get("modules", []) if module.get("out_of_date")]
    if stale:
        problems.append(("modules_stale", "JIT modules ninja would rebuild at their first load, as their sources, headers or "
                         "build files are newer than them (FlashInfer or the toolkit reinstalled?): %s. Fix: inferops-flashinfer "
                         "warm, or the remediate playbook." % "; ".join(stale)))
    missing = [module["name"] for module in view.get("modules", []) if not module.get("compiled") and not module.get("out_of_date")]
    if missing:
        problems.append(("modules_missing", "JIT modules not in the cache at %s: %s (a wiped cache?). Fix: inferops-flashinfer "
                         "warm, or the remediate playbook; starting now would compile them at the first request."
                         % (view.get("workspace"), ", ".join(missing))))
    elif view.get("stamp") is not None and not view.get("stamp_matches"):
        problems.append(("toolkit_changed", "the cache at %s was warmed with %s, the environment is now %s. Fix: "
                         "inferops-flashinfer warm." % (view.get("workspace"), view.get("stamp"),
                                                        {k: view.get(k) for k in ("cuda_home", "cuda_version")})))
    return problems


def cubin_problems(config: t.Dict[str, t.Any], view: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """FlashInfer's trtllm-gen kernel set (SGLang's trtllm_mha attention on SM 10.x loads it at its first request): one
    that was provided (flashinfer-cubin in the venv, FLASHINFER_CUBIN_DIR, or flashinfer_cubin asked for) must be
    FlashInfer's own for this release, whole and unaltered. Without one, nothing is refused here: the preflight's note
    says so (an air-gapped node fails at its first request; a connected one downloads the set then)."""
    cubins = view.get("trtllm_cubins")
    if not cubins or cubins.get("verified"):
        return []
    provided = cubins.get("source") != "download cache"
    if not provided and not config.get("cubins"):
        return []
    where = "from %s at %s" % (cubins.get("source"), cubins.get("dir")) if provided else "at %s" % cubins.get("dir")
    return [("trtllm_cubins", "FlashInfer %s's trtllm-gen kernel set %s (%s) is %s. Fix: install flashinfer-cubin of this "
             "very release from the mirror (flashinfer_cubin: true, by sha256), or point FLASHINFER_CUBIN_DIR (cuda_env_extra) "
             "at a set that `python -m flashinfer download-cubin` of this release wrote on a connected host%s." % (
                 view.get("flashinfer_version"), where, cubins.get("set"), cubins.get("problem"),
                 "; then re-run the inferops.blackwell site playbook" if provided else ""))]


def kernel_set_problems(config: t.Dict[str, t.Any], view: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """A FlashInfer kernel set that a service's attention backend reads (the recorded plan's kernel_sets) and that is not
    on the node: FlashInfer would download it at the service's first request, after the model loaded, and an air-gapped
    node fails there. Refused unless the operator lets the set come at the first request (kernel_set_download)."""
    if config.get("kernel_set_download"):
        return []
    problems = []
    for path, entry in sorted(((view.get("derived") or {}).get("configs") or {}).items()):
        for found in entry.get("kernel_sets") or []:
            if not found.get("missing"):
                continue
            problems.append(("kernel_set_missing", "%s: attention %s reads FlashInfer %s's kernel set %s (%s), which is not "
                             "on this node: FlashInfer would download it at the service's first request, after the model "
                             "loaded, and an air-gapped node fails there; re-running the roles cannot place it. Fix: "
                             "flashinfer_cubin: true (this release's flashinfer-cubin from your mirror), or "
                             "FLASHINFER_CUBIN_DIR in cuda_env_extra (a set `python -m flashinfer download-cubin` of this "
                             "release wrote); or another attention backend in the service's extra_args; or, where the node "
                             "may fetch it, flashinfer_kernel_set_at_first_request: true; then re-run the inferops.blackwell "
                             "site playbook." % (os.path.basename(path), " / ".join(entry.get("attention_backends") or []),
                                                 view.get("flashinfer_version"), found.get("set"),
                                                 ", ".join(found.get("for") or []))))
    return problems


# The environment a service really runs with. systemd builds it from every Environment= and EnvironmentFile= of the
# unit, drop-ins included; a drop-in left from a hand fix (EnvironmentFile= of an old CUDA_HOME) changes what FlashInfer
# compiles with while every file the roles wrote is as they wrote it. So the pinned names are compared with what the
# unit gets: in its ExecStartPre= (check --unit %n) the process's own environment, which systemd built; from outside
# (check --units, the readiness metrics) a running unit's main process's environment, or, for a unit not running,
# systemd's own account of its settings (systemctl show: Environment=, then EnvironmentFiles= in order, which override
# Environment=, as systemd.exec(5) says).
UNIT_PROPERTIES = ("Id", "ActiveState", "UnitFileState", "MainPID", "DropInPaths", "EnvironmentFiles", "Environment")


def unit_names(config: t.Dict[str, t.Any]) -> t.List[str]:
    """The SGLang units of this node: one per configuration in sglang_config_dir (sglang_service writes both)."""
    return [os.path.basename(path)[: -len(".yaml")] + ".service" for path in sglang_configs(config)]


def systemd_units(run: Run, units: t.List[str]) -> t.Dict[str, t.Dict[str, t.List[str]]]:
    """systemctl show for the units, each property's values (EnvironmentFiles= comes once per file). systemd unreachable:
    every unit's entry holds only "Error" (the cause), so that no caller takes it for a unit without settings."""
    if not units:
        return {}
    try:
        rc, stdout, stderr = run(["timeout", "30", "systemctl", "show", *["--property=" + name for name in UNIT_PROPERTIES], "--", *units])
    except OSError as error:
        return {unit: {"Error": [str(error)]} for unit in units}
    if rc != 0:
        cause = "no answer in 30 s" if rc == 124 else (stderr or stdout).strip()[-300:] or "exit %d" % rc
        return {unit: {"Error": [cause]} for unit in units}
    found: t.Dict[str, t.Dict[str, t.List[str]]] = {}
    for block in stdout.strip().split("\n\n"):
        props: t.Dict[str, t.List[str]] = {}
        for line in block.splitlines():
            name, separator, value = line.partition("=")
            if separator:
                props.setdefault(name, []).append(value)
        if props.get("Id"):
            found[props["Id"][0]] = props
    return found


def process_environment(pid: int) -> t.Optional[t.Dict[str, str]]:
    """A process's environment as the kernel holds it (the service user may read its own processes')."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    env = {}
    for entry in raw.split(b"\0"):
        name, separator, value = entry.decode("utf-8", "replace").partition("=")
        if separator:
            env[name] = value
    return env


def settings_environment(props: t.Dict[str, t.List[str]]) -> t.Tuple[t.Dict[str, str], t.Dict[str, str], t.List[str]]:
    """A unit's environment from systemd's account of its settings: Environment= assignments, then each EnvironmentFiles=
    entry in order. Returns the environment, where each name came from, and the files that could not be read."""
    env: t.Dict[str, str] = {}
    origin: t.Dict[str, str] = {}
    for value in props.get("Environment") or []:
        for assignment in shlex.split(value):
            name, separator, text = assignment.partition("=")
            if separator:
                env[name], origin[name] = text, "Environment="
    unreadable = []
    for entry in props.get("EnvironmentFiles") or []:
        path, _space, flags = entry.partition(" ")
        try:
            values = read_env_file(path)
        except OSError:
            if "ignore_errors=yes" not in flags:
                unreadable.append(path)
            continue
        for name, text in values.items():
            env[name], origin[name] = text, path
    return env, origin, unreadable


def environment_problems(run: Run, config: t.Dict[str, t.Any], unit: str, env: t.Dict[str, str], how: str, *,
                         props: t.Optional[t.Dict[str, t.List[str]]] = None,
                         origin: t.Optional[t.Dict[str, str]] = None) -> t.List[t.Tuple[str, str]]:
    """The pinned names whose value differs in what the unit runs with (env), named with where they come from."""
    pinned = read_env_file(config["env_file"])
    names = [name for name in sorted(pinned) if env.get(name) != pinned[name]]
    if not names:
        return []
    wrong = ["%s=%s (pinned: %s)" % (name, env[name] if name in env else "<unset>", pinned[name]) for name in names]
    if props is None:
        props = systemd_units(run, [unit]).get(unit) or {}
    if origin is None:
        # which of the unit's settings sets each name (systemd's account of them; the process itself cannot say)
        origin = settings_environment(props)[1]
    dropins = " ".join(props.get("DropInPaths") or []).split()
    files = [entry.partition(" ")[0] for entry in props.get("EnvironmentFiles") or []]
    setters = sorted({origin[name] for name in names if name in origin and origin[name] != config["env_file"]})
    # "its environment differs from the pinned one": the words sglang_service's diagnosis looks for (a cause the roles
    # cannot repair: an operator's file)
    return [("unit_environment", "%s: its environment differs from the pinned one (%s): it %s %s. FlashInfer and SGLang "
             "would use another toolkit or setting than the one the cache was warmed with. Set by: %s; the unit's drop-ins "
             "(systemd's DropInPaths): %s; its environment files, in the order systemd reads them (a later one wins): %s. "
             "Fix: remove these names from the drop-in (or the drop-in) or the file that sets them, then systemctl "
             "daemon-reload and restart the unit; a value this node needs goes in cuda_env_extra, which pins it for every "
             "consumer (the roles do not delete an operator's file)." % (
                 unit, config["env_file"], how, "; ".join(wrong), ", ".join(setters) or "a drop-in (systemd's account)",
                 ", ".join(dropins) or "none", ", ".join(files) or "none"))]


def units_environment_problems(run: Run, config: t.Dict[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    """Each SGLang unit that is enabled or running, from outside it: what its main process runs with, if it runs, and
    what it would start with now (a drop-in added since its start shows there before a restart makes it fail)."""
    problems: t.List[t.Tuple[str, str]] = []
    units = unit_names(config)
    shown = systemd_units(run, units)
    for unit in units:
        props = shown.get(unit)
        if not props:
            continue
        if props.get("Error"):
            problems.append(("unit_environment", "%s: its environment differs from the pinned one, or may: systemd could "
                             "not be asked what it runs with (systemctl show: %s). Fix: the node's D-Bus system bus must "
                             "answer %s." % (unit, props["Error"][0], pwd.getpwuid(os.getuid()).pw_name)))
            continue
        state = (props.get("ActiveState") or [""])[0]
        if (props.get("UnitFileState") or [""])[0] != "enabled" and state not in ("active", "activating", "reloading"):
            continue
        env, origin, unreadable = settings_environment(props)
        pid = int((props.get("MainPID") or ["0"])[0] or 0)
        running = process_environment(pid) if pid > 0 and state == "active" else None
        if running is not None:
            problems += environment_problems(run, config, unit, running, "runs with", props=props, origin=origin)
        files = [entry.partition(" ")[0] for entry in props.get("EnvironmentFiles") or []]
        # root-only files (sglang_service_secrets) come before the pinned file, which wins over them: only a file read
        # after the pinned one could change a pinned name
        later = set(files[files.index(config["env_file"]) + 1:] if config["env_file"] in files else files)
        if set(unreadable) & later:
            problems.append(("unit_environment", "%s: its environment differs from the pinned one, or may: it would start "
                             "with %s, which %s cannot read. Fix: make them readable, or move their names to cuda_env_extra."
                             % (unit, ", ".join(sorted(set(unreadable) & later)), pwd.getpwuid(os.getuid()).pw_name)))
        problems += [problem for problem in environment_problems(run, config, unit, env, "would start with", props=props, origin=origin)
                     if problem not in problems]
    return problems


def check(config: t.Dict[str, t.Any], view: t.Dict[str, t.Any]) -> t.List[str]:
    """Causes and fixes; empty when the services would start."""
    return [text for _cause, text in diagnose(config, view)]


# Readiness for a fleet's dashboards: the preflight's verdict in node_exporter's text format (its textfile collector
# reads every *.prom file of one directory). Causes are fixed words, so an alert can group by them.
CAUSES = ("no_ninja", "no_python", "flashinfer_error", "no_arch", "arch_mismatch", "cuda_too_old", "not_warmed",
          "config_changed", "sglang_jit_cache", "modules_stale", "modules_missing", "toolkit_changed", "trtllm_cubins",
          "kernel_set_missing", "unit_environment")


def label_value(text: t.Any) -> str:
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(view: t.Dict[str, t.Any], problems: t.List[t.Tuple[str, str]], now: float, seconds: float) -> str:
    """The verdict as node_exporter textfile metrics: every cause has a series (0 or 1), so an alert on a cause needs no
    absent()."""
    found = {cause for cause, _text in problems}
    modules = view.get("modules", [])
    lines = [
        "# HELP inferops_sglang_ready 1 when the SGLang services' preflight passes: they would start and serve without "
        "building a JIT module.",
        "# TYPE inferops_sglang_ready gauge",
        "inferops_sglang_ready %d" % (0 if problems else 1),
        "# HELP inferops_sglang_preflight_problem 1 for each cause the preflight found (inferops-flashinfer check says the fix).",
        "# TYPE inferops_sglang_preflight_problem gauge",
    ]
    lines.extend('inferops_sglang_preflight_problem{cause="%s"} %d' % (cause, 1 if cause in found else 0) for cause in CAUSES)
    lines.extend([
        "# HELP inferops_flashinfer_jit_modules_expected JIT modules the services will ask for (the warm set).",
        "# TYPE inferops_flashinfer_jit_modules_expected gauge",
        "inferops_flashinfer_jit_modules_expected %d" % len(modules),
        "# HELP inferops_flashinfer_jit_modules_cached JIT modules of the warm set in the cache and up to date.",
        "# TYPE inferops_flashinfer_jit_modules_cached gauge",
        "inferops_flashinfer_jit_modules_cached %d" % sum(1 for module in modules if module.get("compiled")),
        "# HELP inferops_flashinfer_info FlashInfer as the services see it: releases, the toolkit it resolves, its target archs.",
        "# TYPE inferops_flashinfer_info gauge",
        'inferops_flashinfer_info{flashinfer_version="%s",sglang_version="%s",cuda_version="%s",cuda_home="%s",archs="%s"} 1'
        % tuple(label_value(value) for value in (view.get("flashinfer_version") or "", view.get("sglang_version") or "",
                                                 view.get("cuda_version") or "", view.get("cuda_home") or "",
                                                 " ".join(view.get("archs") or []))),
        "# HELP inferops_sglang_preflight_timestamp_seconds When this verdict was made.",
        "# TYPE inferops_sglang_preflight_timestamp_seconds gauge",
        "inferops_sglang_preflight_timestamp_seconds %.3f" % now,
        "# HELP inferops_sglang_preflight_duration_seconds How long the preflight took.",
        "# TYPE inferops_sglang_preflight_duration_seconds gauge",
        "inferops_sglang_preflight_duration_seconds %.3f" % seconds,
    ])
    return "\n".join(lines) + "\n"


def write_atomically(path: str, text: str) -> None:
    """Beside the target, then renamed over it: node_exporter never reads half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    try:
        with open(temporary, "w") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


# The build store (jit_cache): one node per fingerprint compiles, the others import its build. An artifact is a gzip'd
# tar of manifest.json (the fingerprint, sha256 and size of every file) and, relative to FlashInfer's workspace, each
# module's build directory (cached_ops/<uri>/: objects, library, build.ninja, ninja's logs), its generated sources
# (generated/<uri>/) and the warm-up record.
ARTIFACT_FORMAT = 1


def artifact_members(view: t.Dict[str, t.Any]) -> t.List[str]:
    """The workspace-relative files of the modules in view (regular files only; lock files left out)."""
    workspace = view["workspace"]
    members = [STAMP] if os.path.isfile(os.path.join(workspace, STAMP)) else []
    for module in view.get("modules", []):
        for sub in ("cached_ops", "generated"):
            top = os.path.join(workspace, sub, module["uri"])
            for folder, _dirs, files in os.walk(top):
                for name in sorted(files):
                    path = os.path.join(folder, name)
                    if os.path.isfile(path) and not os.path.islink(path) and not name.endswith(".lock"):
                        members.append(os.path.relpath(path, workspace))
    return sorted(members)


def export_artifact(view: t.Dict[str, t.Any], output: str) -> t.Dict[str, t.Any]:
    """Pack the compiled modules of view (a plan of this node) into output, atomically."""
    missing = [module["name"] for module in view.get("modules", []) if not module.get("compiled")]
    if missing or not view.get("stamp_matches"):
        raise ValueError("nothing to export: modules not compiled (%s) or no warm-up record for this environment; run "
                         "inferops-flashinfer warm first" % (", ".join(missing) or "none"))
    workspace = view["workspace"]
    files = {}
    for member in artifact_members(view):
        path = os.path.join(workspace, member)
        files[member] = {"sha256": digest(path), "size": os.path.getsize(path)}
    manifest = {"format": ARTIFACT_FORMAT, "fingerprint": view["fingerprint"], "fields": view["fingerprint_fields"],
                "files": files, "built_on": os.uname().nodename}
    blob = json.dumps(manifest, indent=1, sort_keys=True).encode()
    partial = output + ".partial"
    with tarfile.open(partial, "w:gz", compresslevel=1) as archive:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(blob)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(blob))
        for member in sorted(files):
            archive.add(os.path.join(workspace, member), arcname=member, recursive=False)
    os.replace(partial, output)
    return {"artifact": output, "sha256": digest(output), "fingerprint": view["fingerprint"], "files": len(files)}


def retime_deps_log(path: str, mtime_ns: int) -> int:
    """Set the output mtime of every record in a ninja deps log (format 4) to mtime_ns; returns the records changed.
    ninja holds recorded deps as stale when the output is newer than the mtime stored with them."""
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    header = b"# ninjadeps\n"
    if not data.startswith(header) or struct.unpack_from("<i", data, len(header))[0] != 4:
        raise ValueError("%s is not a ninja deps log of format 4" % path)
    position, changed = len(header) + 4, 0
    while position + 4 <= len(data):
        size = struct.unpack_from("<I", data, position)[0]
        if size & 0x80000000:
            # a deps record: output id (int32), then the output's mtime as two uint32 (low, high), then the inputs
            struct.pack_into("<II", data, position + 8, mtime_ns & 0xFFFFFFFF, mtime_ns >> 32)
            changed += 1
        position += 4 + (size & 0x7FFFFFFF)
    with open(path + ".tmp", "wb") as handle:
        handle.write(data)
    os.replace(path + ".tmp", path)
    return changed


def import_artifact(run: Run, config: t.Dict[str, t.Any], view: t.Dict[str, t.Any], archive_path: str, sha256: str) -> t.Dict[str, t.Any]:
    """Check an artifact from the store against this node and put it in place; ValueError says why it is refused.

    Refused unless: the file's sha256 is the store's, its fingerprint is this node's, every member is a regular file
    under a module directory of this node's plan and matches the manifest's sha256 and size, and afterwards ninja
    itself (the tool FlashInfer runs before every load) finds nothing to rebuild."""
    if digest(archive_path) != sha256:
        raise ValueError("checksum mismatch: %s is not the artifact the store lists (sha256 %s)" % (archive_path, sha256))
    workspace = view["workspace"]
    uris = [module["uri"] for module in view.get("modules", [])]
    allowed = tuple("%s/%s/" % (sub, uri) for uri in uris for sub in ("cached_ops", "generated"))
    staging = os.path.join(workspace, ".inferops-import.%d" % os.getpid())
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            handle = archive.extractfile("manifest.json")
            manifest = json.load(handle) if handle else {}
            if manifest.get("format") != ARTIFACT_FORMAT or manifest.get("fingerprint") != view.get("fingerprint"):
                raise ValueError("fingerprint %s is not this node's %s" % (manifest.get("fingerprint"), view.get("fingerprint")))
            files = manifest.get("files") or {}
            seen = set()
            for member in archive:
                if member.name == "manifest.json":
                    continue
                name = os.path.normpath(member.name)
                if (not member.isfile() or name != member.name or name.startswith(("/", "..")) or name not in files
                        or not (name == STAMP or name.startswith(allowed))):
                    raise ValueError("unexpected member %r" % member.name)
                source = archive.extractfile(member)
                target = os.path.join(staging, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                hasher, size = hashlib.sha256(), 0
                with open(target, "wb") as out:
                    chunk = source.read(1 << 20) if source else b""
                    while chunk:
                        hasher.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
                        chunk = source.read(1 << 20) if source else b""
                if hasher.hexdigest() != files[name]["sha256"] or size != files[name]["size"]:
                    raise ValueError("%s does not match the manifest's checksum" % name)
                os.chmod(target, member.mode & 0o755)
                seen.add(name)
            if seen != set(files):
                raise ValueError("members missing: %s" % ", ".join(sorted(set(files) - seen)))
        # Into place, module by module (a module's old, half-built or stale directory is replaced whole).
        now = time.time_ns()
        for folder, _dirs, names in os.walk(staging):
            for name in names:
                os.utime(os.path.join(folder, name), ns=(now, now))
        for top in sorted({"/".join(name.split("/")[:2]) for name in files if name != STAMP}):
            os.makedirs(os.path.dirname(os.path.join(workspace, top)), exist_ok=True)
            shutil.rmtree(os.path.join(workspace, top), ignore_errors=True)
            os.replace(os.path.join(staging, top), os.path.join(workspace, top))
        if STAMP in files:
            os.replace(os.path.join(staging, STAMP), os.path.join(workspace, STAMP))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # ninja's records of the build are from the node that built it: the outputs (now newer than this node's inputs) are
    # restated in the build log and the deps log, then ninja says whether anything would be rebuilt.
    env = service_env(config)
    stale = []
    for uri in uris:
        build_dir = os.path.join(workspace, "cached_ops", uri)
        deps_log = os.path.join(build_dir, ".ninja_deps")
        if os.path.isfile(deps_log):
            retime_deps_log(deps_log, now)
        ninja = ["ninja", "-C", build_dir, "-f", os.path.join(build_dir, "build.ninja")]
        run(with_env(env, ninja + ["-t", "restat"]))
        rc, stdout, stderr = run(with_env(env, ninja + ["-n", "-d", "explain"]))
        if rc != 0 or "no work to do" not in stdout:
            stale.append("%s: %s" % (uri, (stderr or stdout).strip().splitlines()[:1]))
    if stale:
        for uri in uris:
            for sub in ("cached_ops", "generated"):
                shutil.rmtree(os.path.join(workspace, sub, uri), ignore_errors=True)
        raise ValueError("ninja would rebuild after the import, so it was removed again: %s" % "; ".join(stale))
    return {"imported": len(files), "fingerprint": view["fingerprint"], "built_on": manifest.get("built_on")}


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


# What the modules (inferops.blackwell.flashinfer_view, flashinfer_verdict, jit_cache_warm, jit_cache_artifact) and the
# command below call: each returns what it found, the command prints it.
def view_of(run: Run, config: t.Dict[str, t.Any], action: str, script: t.Optional[str] = None,
            sglang_config_files: t.Optional[t.List[str]] = None) -> t.Dict[str, t.Any]:
    """probe, plan or parse (read only). sglang_config_files: candidate configurations instead of sglang_config_dir's
    (plan, parse). A plan of the services' own configurations also says what the preflight would say of the node as it
    is (its problems: meaningful when the plan has nothing to do, the derivation then being the recorded one), so that a
    no-op run needs no second FlashInfer start."""
    if action not in ("probe", "plan", "parse"):
        raise ValueError("view_of: probe, plan or parse, not %r" % action)
    if sglang_config_files:
        config = dict(config, sglang_config_files=[os.path.abspath(path) for path in sglang_config_files])
    view = inner(run, config, action, script)
    if action == "plan" and not sglang_config_files:
        view["problems"] = check(config, view)
    return view


def workspace_base(env: t.Dict[str, str]) -> str:
    """Where FlashInfer's workspace lies for the services (FLASHINFER_WORKSPACE_BASE of their environment file, else the
    running user's home): the warm-up's lock is there."""
    return env.get("FLASHINFER_WORKSPACE_BASE") or pwd.getpwuid(os.getuid()).pw_dir


def warm(run: Run, config: t.Dict[str, t.Any], script: t.Optional[str] = None, max_jobs: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    """Build what the cache lacks and record the derivation (one warm-up per node at a time); the venv side's report."""
    env = read_env_file(config["env_file"])
    for name in ("SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR"):
        # SGLang's own caches (its JIT kernels, and Triton's and the driver's under SGLANG_CACHE_DIR): made here, by
        # the service user, so that a wiped cache is back before a service starts.
        if env.get(name):
            os.makedirs(env[name], mode=0o755, exist_ok=True)
    with WarmLock(workspace_base(env)):
        return inner(run, config, "warm", script, max_jobs)


def verdict(run: Run, config: t.Dict[str, t.Any], script: t.Optional[str] = None, *, unit: t.Optional[str] = None,
            unit_env: t.Optional[t.Dict[str, str]] = None,
            units: bool = False) -> t.Tuple[t.Dict[str, t.Any], t.List[t.Tuple[str, str]]]:
    """The preflight: FlashInfer's view and each (cause, text with the fix) that would stop a service; none when it
    would start. unit (with unit_env, the environment systemd gave it): that unit's environment must hold every pinned
    value; units: the same for each enabled or running SGLang unit, seen from outside it."""
    view = inner(run, config, "probe", script)
    problems = diagnose(config, view)
    if unit:
        problems += environment_problems(run, config, unit, dict(unit_env or {}), "starts with")
    if units:
        problems += units_environment_problems(run, config)
    return view, problems


def verdict_lines(view: t.Dict[str, t.Any], unit: t.Optional[str] = None) -> t.List[str]:
    """What a passing preflight says: FlashInfer's release, archs, toolkit and cache, the kernel set, and what the
    recorded derivation says the services will still build or fetch at run time."""
    lines = ["inferops-flashinfer check: ok: FlashInfer %s, archs %s, CUDA %s at %s, %d module(s) cached in %s%s" % (
        view.get("flashinfer_version"), " ".join(view.get("archs") or []), view.get("cuda_version"), view.get("cuda_home"),
        len(view.get("modules", [])), view.get("workspace"),
        "; %s starts with the pinned environment" % unit if unit else "")]
    cubins = view.get("trtllm_cubins") or {}
    if cubins.get("verified"):
        lines.append("inferops-flashinfer check: ok: FlashInfer's trtllm-gen kernel set %s from %s at %s, %d files as its "
                     "checksums.txt lists%s" % (cubins.get("set"), cubins.get("source"), cubins.get("dir"), cubins.get("files", 0),
                                                "" if cubins.get("used") else " (no service's attention reads it)"))
    lines.extend("inferops-flashinfer check: not warmed: " + note for note in not_warmed(view))
    return lines


def artifact(run: Run, config: t.Dict[str, t.Any], action: str, path: str, *, sha256: t.Optional[str] = None,
             script: t.Optional[str] = None) -> t.Tuple[bool, t.Dict[str, t.Any]]:
    """The build store's two ends: export (pack this node's build into path) or import (check the artifact at path,
    whose store checksum is sha256, and put it in place). (True, what was done) or (False, {error, fingerprint}): a
    refused import leaves nothing of it in the cache."""
    if action not in ("export", "import") or (action == "import" and not sha256):
        raise ValueError("artifact: export, or import with the store's sha256")
    view = inner(run, config, "plan", script)
    try:
        if view.get("error"):
            raise ValueError("FlashInfer cannot start in the services' environment: %s" % view["error"])
        if action == "export":
            return True, export_artifact(view, path)
        with WarmLock(workspace_base(read_env_file(config["env_file"]))):
            return True, import_artifact(run, config, view, path, str(sha256))
    except (ValueError, OSError) as exc:
        return False, {"error": str(exc), "fingerprint": view.get("fingerprint")}


def not_warmed(view: t.Dict[str, t.Any]) -> t.List[str]:
    """What the recorded derivation says the services will build or fetch at run time (SGLang's own JIT kernels,
    trtllm's kernels on SM 10.x, ...): reported by the preflight, not a failure."""
    configs = ((view.get("derived") or {}).get("configs") or {}).items()
    notes: t.List[str] = []
    for path, entry in sorted(configs):
        for note in entry.get("not_warmed") or []:
            line = "%s: %s" % (os.path.basename(path), note)
            if line not in notes:
                notes.append(line)
    return notes
