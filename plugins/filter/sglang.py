# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side plan of a node's SGLang services: every input checked against its GPUs, one place.

The sglang_service role asserts that the plan has no problems before it changes anything,
then renders units and configuration files from the plan alone.
"""

from __future__ import annotations

import re
import typing as t

from ansible.errors import AnsibleFilterError

# unit name -> the role variable that describes it (for messages that name what to change)
SERVICES = {"sglang-ar": "sglang_service_ar", "sglang-spec": "sglang_service_spec"}
KNOBS = ("num_steps", "eagle_topk", "num_draft_tokens")
# The keys every service's settings carry: the role lays the operator's keys over its base (the argument spec's
# sub-option defaults, vars/main.yml); this filter keeps no defaults of its own. Its unit test checks these names
# against the argument spec's sub-options (tests/unit/plugins/filter/test_sglang.py).
KEYS = ("enabled", "model_path", "served_model_name", "host", "port", "gpus", "tp_size", "dp_size", "attention_backend",
        "sampling_backend", "mem_fraction_static", "extra_args")
SPEC_KEYS = KEYS + ("speculative_algorithm", "draft_model_path") + KNOBS + ("dflash_block_size",)
# flags the role writes itself; extra_args may not set them
MANAGED_FLAGS = frozenset((
    "model-path", "model", "served-model-name", "host", "port", "tp-size", "tp", "tensor-parallel-size", "dp-size", "dp",
    "data-parallel-size", "attention-backend", "sampling-backend", "mem-fraction-static", "speculative-algorithm",
    "speculative-draft-model-path", "speculative-draft-model", "speculative-num-steps", "speculative-eagle-topk",
    "speculative-num-draft-tokens", "speculative-dflash-block-size", "base-gpu-id", "config",
))
# SGLang's API keys: given only through the secrets file (API_KEY_NAME), never in a configuration file (world-readable,
# and SGLang logs its resolved arguments at start-up)
KEY_FLAGS = frozenset(("api-key", "admin-api-key"))
# The secret (sglang_service_secrets) whose value becomes the services' api-key, in a configuration only their user
# reads, made at each start (the units' ExecStartPre=)
API_KEY_NAME = "INFEROPS_SGLANG_API_KEY"
_FLAG_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
# A model directory (absolute, safe in a unit file) or a hub id (org/name).
_MODEL_RE = re.compile(r"/[A-Za-z0-9._+@/-]*|[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HOST_RE = re.compile(r"[A-Za-z0-9.:-]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# The services run as an unprivileged user: ports below this need root (CAP_NET_BIND_SERVICE).
FIRST_UNPRIVILEGED_PORT = 1024


def _strings(value: t.Any) -> t.Iterator[str]:
    """Every string in a setting, keys of mappings included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _integer(var: str, key: str, value: t.Any, problems: t.List[str]) -> t.Optional[int]:
    """value as an int, or None with a problem that names var.key."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, str) and not value.isdigit()):
        problems.append("%s.%s=%r: give a whole number" % (var, key, value))
        return None
    return int(value)


def _capabilities(gpu_facts: t.Mapping[str, t.Any], indexes: t.Iterable[int]) -> t.Set[t.Tuple[int, int]]:
    by_index = {g["index"]: g["compute_capability"] for g in gpu_facts.get("gpus") or []}
    return {(by_index[i]["major"], by_index[i]["minor"]) for i in indexes if i in by_index}


def _attention(var: str, wanted: str, capabilities: t.Set[t.Tuple[int, int]], problems: t.List[str]) -> t.Optional[str]:
    majors = {major for major, _minor in capabilities}
    if wanted == "auto":
        # No --attention-backend: SGLang picks its own (get_default_attn_backend), and jit_cache asks SGLang which.
        return None
    if wanted == "fa3" and majors != {9}:
        problems.append("%s.attention_backend=fa3 runs on Hopper (SM 9.x) only; these GPUs are SM %s: use auto or flashinfer"
                        % (var, ", ".join("%d.%d" % c for c in sorted(capabilities))))
    if wanted == "trtllm_mha" and 12 in majors:
        problems.append("%s.attention_backend=trtllm_mha does not support SM 12.x: use auto (flashinfer) or triton" % var)
    return wanted


def _families(gpu_facts: t.Mapping[str, t.Any], indexes: t.Iterable[int]) -> t.Dict[str, t.List[int]]:
    """SM (MAJOR.MINOR) -> the selected GPU indexes that have it."""
    by_index = {g["index"]: g["compute_capability"] for g in gpu_facts.get("gpus") or []}
    families: t.Dict[str, t.List[int]] = {}
    for index in indexes:
        if index in by_index:
            families.setdefault("%d.%d" % (by_index[index]["major"], by_index[index]["minor"]), []).append(index)
    return families


def _health_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return "[%s]" % host if ":" in host else host


def sglang_health_url(host: t.Any, port: t.Any, health_path: str = "/health") -> str:
    """Where a service's health is asked, from its --config host and port: the one place every health check (the role's
    wait, remediate.yml) takes it from. A wildcard host is asked on loopback; an IPv6 address goes in brackets."""
    return "http://%s:%d%s" % (_health_host(str(host or "")), int(port), health_path)


def _plan_one(name: str, settings: t.Mapping[str, t.Any], gpu_facts: t.Mapping[str, t.Any], health_path: str,
              problems: t.List[str]) -> t.Dict[str, t.Any]:
    var = SERVICES[name]
    gpu_count = int(gpu_facts.get("gpu_count") or 0)
    found = len(problems)
    for key, value in settings.items():
        if any(_CONTROL_RE.search(text) for text in _strings(value)):
            problems.append("%s.%s holds a control character (newline, tab, ...): %r; remove it (it would reach a unit "
                            "or configuration file)" % (var, key, value))
    if len(problems) > found:
        return {}
    # an empty list selects every GPU (documented so)
    raw_gpus = settings["gpus"] or list(range(gpu_count))
    if not isinstance(raw_gpus, (list, tuple)):
        problems.append("%s.gpus=%r: give a list of GPU indexes, for example [0, 1]" % (var, raw_gpus))
        raw_gpus = []
    gpus = [index for index in (_integer(var, "gpus", i, problems) for i in raw_gpus) if index is not None]
    outside = sorted({i for i in gpus if not 0 <= i < gpu_count})
    if outside:
        problems.append("%s.gpus lists GPU %s; this node has GPUs 0-%d" % (var, ", ".join(map(str, outside)), gpu_count - 1))
    if len(set(gpus)) != len(gpus):
        problems.append("%s.gpus lists a GPU twice: %s" % (var, gpus))
    families = _families(gpu_facts, gpus)
    if len(families) > 1:
        problems.append("%s.gpus spans GPUs of different SM (%s): one service runs on one kind of GPU; set %s.gpus to one "
                        "kind (and the other service's gpus to the other)"
                        % (var, "; ".join("SM %s: GPU %s" % (sm, ", ".join(map(str, idx))) for sm, idx in families.items()), var))
    model = settings["model_path"]
    if not model:
        problems.append("%s.model_path is empty: set the model directory (or hub id), or %s.enabled: false" % (var, var))
    elif not isinstance(model, str) or not _MODEL_RE.fullmatch(model):
        problems.append("%s.model_path=%r: give an absolute directory (letters, digits and . _ - + @ /) or a hub id "
                        "such as org/name" % (var, model))
        model = ""
    host = str(settings["host"])
    if not _HOST_RE.fullmatch(host):
        problems.append("%s.host=%r: give an IP address or a host name" % (var, host))
    port = _integer(var, "port", settings["port"], problems)
    if port is not None and not FIRST_UNPRIVILEGED_PORT <= port <= 65535:
        problems.append("%s.port=%d: give a port from %d to 65535 (the service runs unprivileged)"
                        % (var, port, FIRST_UNPRIVILEGED_PORT))
    port = port or 0
    dp = _integer(var, "dp_size", settings["dp_size"], problems)
    tp = _integer(var, "tp_size", settings["tp_size"], problems)
    if dp is None or tp is None or dp < 1 or tp < 0:
        problems.append("%s: dp_size must be >= 1 and tp_size >= 0 (0: derived from gpus)" % var)
        dp, tp = max(dp or 1, 1), max(tp or 0, 0)
    if tp == 0:
        tp = len(gpus) // dp if gpus and len(gpus) % dp == 0 else 0
    if tp * dp != len(gpus) or tp == 0:
        problems.append("%s: tp_size %s x dp_size %d must equal the %d selected GPU(s) %s: change tp_size, dp_size or gpus"
                        % (var, settings["tp_size"] or "(derived)", dp, len(gpus), gpus))
    attention = _attention(var, str(settings["attention_backend"]), _capabilities(gpu_facts, gpus), problems)

    config: t.Dict[str, t.Any] = {"model-path": model}
    if settings["served_model_name"]:
        config["served-model-name"] = str(settings["served_model_name"])
    config.update({"host": host, "port": port, "tp-size": tp})
    if dp > 1:
        config["dp-size"] = dp
    if attention:
        config["attention-backend"] = attention
    config["sampling-backend"] = str(settings["sampling_backend"])
    fraction = settings["mem_fraction_static"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        problems.append("%s.mem_fraction_static=%r: give a fraction from 0 (SGLang's default) to below 1" % (var, fraction))
    elif fraction > 0:
        config["mem-fraction-static"] = float(fraction)
    if name == "sglang-spec":
        _speculative(var, settings, config, problems)
    extra = settings["extra_args"]
    if not isinstance(extra, dict):
        problems.append("%s.extra_args must be a mapping of SGLang flag name to value" % var)
        extra = {}
    for flag, value in extra.items():
        if str(flag).replace("_", "-") in KEY_FLAGS:
            problems.append("%s.extra_args sets %s: a configuration file is readable by every user and SGLang logs it; give the "
                            "key as %s in sglang_service_secrets (from Ansible Vault)" % (var, flag, API_KEY_NAME))
        elif not _FLAG_RE.fullmatch(str(flag)):
            problems.append("%s.extra_args: %r is not an SGLang flag name (lower case, dashes, no leading --)" % (var, flag))
        elif flag in MANAGED_FLAGS or flag.replace("_", "-") in MANAGED_FLAGS:
            problems.append("%s.extra_args sets %s, which the role manages: use the role's own key for it" % (var, flag))
        else:
            config[str(flag)] = value
    if name == "sglang-spec" and config.get("speculative-algorithm") == "DFLASH" and config.get("enable-dp-attention"):
        problems.append("%s: DFLASH needs no enable-dp-attention (and pipeline size 1)" % var)
    return {
        "name": name,
        "variable": var,
        "gpus": gpus,
        "visible_devices": ",".join(map(str, gpus)),
        "config": config,
        "health_url": sglang_health_url(config["host"], port, health_path),
    }


def _speculative(var: str, settings: t.Mapping[str, t.Any], config: t.Dict[str, t.Any], problems: t.List[str]) -> None:
    algorithm = str(settings["speculative_algorithm"])
    if not algorithm:
        problems.append("%s.speculative_algorithm is empty: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM or DFLASH" % var)
        return
    config["speculative-algorithm"] = algorithm
    draft = str(settings["draft_model_path"])
    if draft:
        config["speculative-draft-model-path"] = draft
    elif algorithm != "NGRAM":
        problems.append("%s.draft_model_path is empty: %s needs a draft model" % (var, algorithm))
    knobs = {knob: _integer(var, knob, settings[knob], problems) or 0 for knob in KNOBS}
    given = [knob for knob, value in knobs.items() if value]
    if given and len(given) != len(KNOBS):
        problems.append("%s: set num_steps, eagle_topk and num_draft_tokens all or none (set: %s)" % (var, ", ".join(given)))
    elif given:
        config["speculative-num-steps"] = knobs["num_steps"]
        config["speculative-eagle-topk"] = knobs["eagle_topk"]
        config["speculative-num-draft-tokens"] = knobs["num_draft_tokens"]
    block = _integer(var, "dflash_block_size", settings["dflash_block_size"], problems) or 0
    if block and algorithm != "DFLASH":
        problems.append("%s.dflash_block_size is for DFLASH only (speculative_algorithm is %s)" % (var, algorithm))
    elif block:
        config["speculative-dflash-block-size"] = block


def sglang_plan(services: t.Mapping[str, t.Mapping[str, t.Any]], gpu_facts: t.Mapping[str, t.Any],
                active: t.Sequence[str], health_path: str = "/health") -> t.Dict[str, t.Any]:
    """The units to install and run on one node, or the problems that stop the role before any change.

    services maps a unit name (sglang-ar, sglang-spec) to its settings with every key of the role's base
    (the argument spec's sub-option defaults) present; gpu_facts is the node's inferops_gpu fact; active lists
    the services to run.
    """
    if not isinstance(services, dict) or not isinstance(gpu_facts, dict):
        raise AnsibleFilterError("sglang_plan expects a dict of service settings and the inferops_gpu fact")
    problems: t.List[str] = []
    unknown = sorted(set(services) - set(SERVICES))
    if unknown:
        raise AnsibleFilterError("sglang_plan: unknown service(s) %s" % ", ".join(unknown))
    for name, settings in services.items():
        if not isinstance(settings, dict):
            raise AnsibleFilterError("sglang_plan: the settings of %s are not a mapping" % name)
        keys = SPEC_KEYS if name == "sglang-spec" else KEYS
        missing = [key for key in keys if key not in settings]
        if missing:
            raise AnsibleFilterError("sglang_plan: %s lacks %s: give each service's settings laid over the role's base "
                                     "(vars/main.yml)" % (name, ", ".join(missing)))
        problems.extend("%s.%s is null: give a value, or leave the key out for the role's default" % (SERVICES[name], key)
                        for key in keys if settings[key] is None)
    if not gpu_facts.get("gpu_count"):
        problems.append("no GPU on this host (%s): the SGLang services need GPUs" % (gpu_facts.get("verdict_message") or "gpu_facts found none"))
    enabled = [name for name in SERVICES if name in services and services[name]["enabled"]]
    for name in active:
        if name not in SERVICES:
            problems.append("sglang_service_active lists %r: known services are %s" % (name, ", ".join(SERVICES)))
        elif name not in enabled:
            problems.append("sglang_service_active lists %s, but %s.enabled is false" % (name, SERVICES[name]))
    planned = [] if problems else [_plan_one(name, services[name], gpu_facts, health_path, problems) for name in enabled]
    units = [unit for unit in planned if unit]
    ports: t.Dict[int, str] = {}
    for unit in units:
        port = unit["config"]["port"]
        if port in ports:
            problems.append("%s.port and %s.port are both %d: give each service its own port" % (ports[port], unit["variable"], port))
        ports[port] = unit["variable"]
        unit["active"] = unit["name"] in active
        unit["conflicts"] = [other["name"] for other in units if other is not unit and set(other["gpus"]) & set(unit["gpus"])]
    running = [unit for unit in units if unit["active"]]
    for i, first in enumerate(running):
        for second in running[i + 1:]:
            shared = sorted(set(first["gpus"]) & set(second["gpus"]))
            if shared:
                problems.append("sglang_service_active lists %s and %s, which share GPU %s: run one at a time (their units "
                                "conflict) or give them disjoint gpus" % (first["name"], second["name"], ", ".join(map(str, shared))))
    return {"problems": problems, "units": units}


def _listeners(listing: str) -> t.Dict[int, t.List[t.Tuple[str, int]]]:
    """`ss -Hltnp` output -> port -> [(process, pid)] listening on it."""
    ports: t.Dict[int, t.List[t.Tuple[str, int]]] = {}
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[3]:
            continue
        port = fields[3].rsplit(":", 1)[1]
        if not port.isdigit():
            continue
        owners = [(name, int(pid)) for name, pid in re.findall(r'\("([^"]*)",pid=([0-9]+)', line)]
        ports.setdefault(int(port), []).extend(owners or [("?", 0)])
    return ports


def sglang_port_problems(units: t.Sequence[t.Mapping[str, t.Any]], listing: str, own_pids: t.Iterable[t.Any],
                         node: str = "the node") -> t.List[str]:
    """Ports of the planned units that another process already listens on (our own running services excepted).

    listing is `ss -Hltnp` output from the node; own_pids the MainPIDs of the sglang units there.
    """
    own = {int(pid) for pid in own_pids if str(pid).isdigit() and int(pid) > 0}
    taken = _listeners(listing)
    problems = []
    for unit in units:
        port = unit["config"]["port"]
        others = sorted({owner for owner in taken.get(port, []) if owner[1] not in own})
        if others:
            problems.append("%s.port=%d is taken on %s by %s: give a free port"
                            % (unit["variable"], port, node, ", ".join("%s (pid %d)" % owner for owner in others)))
    return problems


def _loopback(host: str) -> bool:
    return host in {"localhost", "::1"} or host.startswith("127.")


def sglang_key_problems(units: t.Sequence[t.Mapping[str, t.Any]], secrets: t.Any, listen_without_key: bool = False) -> t.List[str]:
    """Services that would answer beyond loopback without an API key, and an API key SGLang could not use.

    units: sglang_plan's; secrets: sglang_service_secrets (its API_KEY_NAME is the services' key; its value is never
    shown); listen_without_key: sglang_service_listen_without_key, the operator's explicit opt-out.
    """
    secrets = secrets if isinstance(secrets, dict) else {}
    problems = []
    key = secrets.get(API_KEY_NAME)
    if API_KEY_NAME in secrets and (not isinstance(key, str) or not key.strip()):
        problems.append("sglang_service_secrets.%s is empty or not a string: give the key (a string from Ansible Vault), or "
                        "remove it" % API_KEY_NAME)
    elif isinstance(key, str) and key != key.strip():
        problems.append("sglang_service_secrets.%s starts or ends with white space, which a client's 'Authorization: Bearer' "
                        "header cannot carry: remove it" % API_KEY_NAME)
    if API_KEY_NAME in secrets or listen_without_key:
        return problems
    for unit in units:
        host = str(unit["config"].get("host") or "")
        if not _loopback(host):
            problems.append("%s.host=%s answers beyond loopback and no API key is set: give one as %s in "
                            "sglang_service_secrets (from Ansible Vault), host 127.0.0.1, or sglang_service_listen_without_key: "
                            "true to serve without a key" % (unit["variable"], host or "(all)", API_KEY_NAME))
    return problems


def sglang_service_paths(names: t.Any, files: t.Any) -> t.List[str]:
    """Each service's own files on the node: every file's path (a pattern, %s the service's name) for every service, in
    the services' order."""
    if not isinstance(names, (list, tuple)) or not isinstance(files, (list, tuple)):
        raise AnsibleFilterError("sglang_service_paths: a list of service names and a list of files, got %r and %r" % (names, files))
    paths = []
    for name in names:
        for entry in files:
            if not isinstance(entry, dict) or "%s" not in str(entry.get("path", "")):
                raise AnsibleFilterError("sglang_service_paths: each file needs a path with %%s for the service's name, got %r" % (entry,))
            paths.append(str(entry["path"]) % str(name))
    return paths


class FilterModule:
    """inferops.blackwell SGLang service filters."""

    def filters(self) -> t.Dict[str, t.Callable[..., t.Any]]:
        return {"sglang_plan": sglang_plan, "sglang_port_problems": sglang_port_problems, "sglang_health_url": sglang_health_url,
                "sglang_key_problems": sglang_key_problems, "sglang_service_paths": sglang_service_paths}
