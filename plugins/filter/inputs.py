# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side checks of operator input, before anything on a node changes.

Operators feed the roles from inventories, AWX surveys and CMDBs. Every value that
reaches a unit file, an environment file or a shell is checked here against one
rule per kind, with a message that names the variable and says what to give instead.
Patterns are matched whole (re.fullmatch): a `$`-anchored regex lets "FOO\\n" through.
"""

from __future__ import annotations

import re
import typing as t

from ansible.errors import AnsibleFilterError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_RELEASE = re.compile(r"[0-9]+\.[0-9]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# Absolute paths that are safe in a unit file's ExecStart=, an EnvironmentFile= value and a shell word unquoted.
_PATH = re.compile(r"/[A-Za-z0-9._+@/-]*")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL_PATH = re.compile(r"/[A-Za-z0-9._~/-]*")
# A store's base URL: http(s), a host name or IPv4 address, an optional port and path; no credentials, query or spaces.
_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?")
# A JIT module named by the operator: a short name, or a recipe for FlashInfer's attention spec functions.
_MODULE_NAME = re.compile(r"(sampling|cascade|norm|batch_(decode|prefill):(bf16|fp16):(64|128|256|512))")
_MODULE_DTYPES = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
_MODULE_HEAD_DIMS = (64, 128, 192, 256, 512)
_MODULE_HINT = ("use sampling, cascade, norm, <batch_decode|batch_prefill>:<bf16|fp16>:<head_dim>, or a recipe "
                "{kind: batch_prefill|batch_decode, q, kv, o: %s, head_dim_qk, head_dim_vo: %s, backend: fa2|fa3 "
                "(batch_prefill), sliding_window, logits_soft_cap: true|false}"
                % ("|".join(_MODULE_DTYPES), "|".join(map(str, _MODULE_HEAD_DIMS))))

# Names cuda_env_extra may not set: they would override what the roles pin, or what each unit sets per service,
# or let a value load code into every consumer (the loader's and Python's own search paths).
_ENV_RESERVED = frozenset((
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
    "PYTHONEXECUTABLE", "HOME", "USER", "LOGNAME", "SHELL", "NVIDIA_VISIBLE_DEVICES", "BASH_ENV", "ENV",
))
_ENV_RESERVED_PREFIXES = ("LD_",)


def show(value: t.Any) -> str:
    """A value as the operator wrote it, with control characters visible (a newline shows as \\n)."""
    if isinstance(value, str):
        return repr(value)[1:-1] if _CONTROL.search(value) or "\\" in value else value
    return repr(value)


def kind_of(value: t.Any) -> str:
    """What the operator gave, in YAML's words (Ansible's lazy containers have internal class names)."""
    for kind, name in ((bool, "boolean"), (int, "number"), (float, "number"), (str, "string"), (dict, "mapping"),
                       (list, "list"), (tuple, "list")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _is_int(value: t.Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value.isdigit())


def _module_problem(value: t.Mapping[str, t.Any]) -> t.Optional[str]:
    kind = value.get("kind")
    allowed = {"kind", "q", "kv", "o", "head_dim_qk", "head_dim_vo", "sliding_window", "logits_soft_cap", "why"}
    if kind in ("sampling", "cascade", "norm"):
        return None if set(value) <= {"kind", "why"} else "%s takes no other keys" % kind
    if kind not in ("batch_prefill", "batch_decode"):
        return "unknown kind %s" % show(kind)
    if kind == "batch_prefill":
        allowed.add("backend")
        if value.get("backend", "fa2") not in ("fa2", "fa3"):
            return "backend %s" % show(value.get("backend"))
    unknown = sorted(set(map(str, value)) - allowed)
    if unknown:
        return "unknown key(s) %s" % ", ".join(unknown)
    for key in ("q", "kv", "o"):
        if value.get(key) not in _MODULE_DTYPES:
            return "%s=%s" % (key, show(value.get(key)))
    for key in ("head_dim_qk", "head_dim_vo"):
        if value.get(key) not in _MODULE_HEAD_DIMS or isinstance(value.get(key), bool):
            return "%s=%s" % (key, show(value.get(key)))
    for key in ("sliding_window", "logits_soft_cap"):
        if not isinstance(value.get(key, False), bool):
            return "%s=%s: give true or false" % (key, show(value.get(key)))
    return None


def _sha256_map_problem(var: str, value: t.Any) -> t.Optional[str]:
    """A mapping of exact pins to lists of sha256 digests (64 lower-case hex digits), or the problem with it."""
    hint = 'give {"name==version": ["<sha256>", ...]}, each digest 64 lower-case hex digits'
    if not isinstance(value, dict):
        return "%s=%s: %s, not a %s" % (var, show(value), hint, kind_of(value))
    for pin, digests in value.items():
        if (not isinstance(digests, (list, tuple)) or not digests
                or not all(isinstance(digest, str) and _SHA256.fullmatch(digest) for digest in digests)):
            return "%s[%s]=%s: %s" % (var, show(pin), show(digests), hint)
    return None


def _check(var: str, value: t.Any, kind: str, low: int, high: int) -> t.Optional[str]:
    """One problem with one value, or None."""
    shown = show(value)
    if kind == "jit_module":
        problem = (_module_problem(value) if isinstance(value, dict)
                   else None if isinstance(value, str) and _MODULE_NAME.fullmatch(value) else "not understood")
        return "%s: %s: %s; %s" % (var, shown, problem, _MODULE_HINT) if problem else None
    if kind == "sha256_map":
        return _sha256_map_problem(var, value)
    if kind == "release":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return ('%s=%s was read as a number: quote it, %s: "%s" (YAML turns 13.10 into 13.1)'
                    % (var, shown, var, value))
        if not isinstance(value, str) or not _RELEASE.fullmatch(value):
            return '%s=%s: give MAJOR.MINOR, for example "13.0"' % (var, shown)
        return None
    if kind == "int":
        if not _is_int(value):
            return "%s=%s: give a whole number from %d to %d" % (var, shown, low, high)
        if not low <= int(value) <= high:
            return "%s=%s is out of range: give a whole number from %d to %d" % (var, shown, low, high)
        return None
    if not isinstance(value, str):
        return "%s=%s: give a string, not a %s" % (var, shown, kind_of(value))
    if _CONTROL.search(value):
        return "%s=%s holds a control character (newline, tab, ...): remove it" % (var, shown)
    if kind == "text":
        return None
    if kind == "path":
        if not _PATH.fullmatch(value):
            return ("%s=%s: give an absolute path of letters, digits and . _ - + @ / only (no spaces, quotes, %%, $ or "
                    "backslashes: it goes into unit and environment files)" % (var, shown))
        return None
    if kind == "user":
        if not _USER.fullmatch(value):
            return "%s=%s: give a system user name (lower case letters, digits, _ and -)" % (var, shown)
        if value == "root":
            return ("%s=root: the services and the JIT cache must not run as root; give an unprivileged user "
                    "(default: sglang, created by inferops.blackwell.flashinfer)" % var)
        return None
    if kind == "url_path":
        if not _URL_PATH.fullmatch(value):
            return "%s=%s: give a URL path such as /health (letters, digits, . _ ~ - /)" % (var, shown)
        return None
    if kind == "url":
        if not _URL.fullmatch(value):
            return ("%s=%s: give an http:// or https:// URL of a host, an optional port and a path (letters, digits, "
                    ". _ ~ - /; credentials go in headers, not in the URL)" % (var, shown))
        return None
    raise AnsibleFilterError("input_problems: unknown kind %r for %s" % (kind, var))


def input_problems(checks: t.Sequence[t.Mapping[str, t.Any]]) -> t.List[str]:
    """Problems with operator input, each naming the variable and the fix; empty when all is well.

    Each check is {var, value, kind} with kind one of release (MAJOR.MINOR as a string), int (with
    min and max), text (a string without control characters), path (absolute, safe in unit and
    environment files), user (an unprivileged user name), url_path, url (http(s), host, port, path), sha256_map (exact
    pins to lists of sha256 digests), jit_module (a module name or recipe).
    With each: true the value is a list, and every element is checked.
    """
    if not isinstance(checks, (list, tuple)):
        raise AnsibleFilterError("input_problems expects a list of {var, value, kind}")
    problems = []
    for check in checks:
        values = [check.get("value")]
        if check.get("each"):
            values = check.get("value")
            if not isinstance(values, (list, tuple)):
                problems.append("%s=%s: give a list" % (check["var"], show(values)))
                continue
        for value in values:
            problem = _check(str(check["var"]), value, str(check["kind"]),
                             int(check.get("min", 0)), int(check.get("max", 2 ** 31 - 1)))
            if problem:
                problems.append(problem)
    return problems


def env_extra_problems(extra: t.Any, managed: t.Sequence[str], var: str = "cuda_env_extra", secret: bool = False) -> t.List[str]:
    """Problems with extra environment variables (NAME: value) for a systemd EnvironmentFile= and a shell script.

    Names must be shell variable names that neither override what the roles pin (managed) nor load code into
    every consumer (LD_*, PYTHONPATH, ...); values must be scalars without control characters or single quotes
    (both files quote values in single quotes). secret: the values are secrets (sglang_service_secrets): no message
    shows a value, only the name and what is wrong with it.
    """
    if not isinstance(extra, dict):
        return ["%s must be a mapping of NAME: value, not a %s" % (var, kind_of(extra))]
    problems = []
    for name, value in extra.items():
        key = str(name)
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(key):
            problems.append("%s: %s is not a variable name (letters, digits and _, not starting with a digit; no =, "
                            "spaces or newlines)" % (var, show(name)))
        elif key in managed:
            problems.append("%s sets %s, which the roles pin: use the cuda_env variable for it" % (var, key))
        elif key in _ENV_RESERVED or key.startswith(_ENV_RESERVED_PREFIXES):
            problems.append("%s sets %s, which would change what every service loads or which GPUs it sees (per service: "
                            "sglang_service_ar / sglang_service_spec gpus): remove it" % (var, key))
        shown = "" if secret else "=" + show(value)
        if isinstance(value, (dict, list)) or value is None or (secret and isinstance(value, bool)):
            wanted, given = ("a string", kind_of(value)) if secret else ("a string or a number", show(value))
            problems.append("%s.%s: give %s, not %s" % (var, show(name), wanted, given))
        elif _CONTROL.search(str(value)) or "'" in str(value):
            problems.append("%s.%s%s holds a control character or a single quote: remove it" % (var, show(name), shown))
    return problems


def pip_hash_requirements(pins: t.Sequence[str], hashes: t.Mapping[str, t.Sequence[str]]) -> str:
    """pip's requirements in hash-checking mode: one line per exact pin with each of its sha256 digests (a pin without any
    is written bare, and pip then refuses the whole set: the roles' input checks name such pins first)."""
    return "".join("%s%s\n" % (pin, "".join(" --hash=sha256:%s" % sha for sha in hashes.get(pin, []))) for pin in pins)


class FilterModule:
    """inferops.blackwell input checks, and the pip requirements they vouch for."""

    def filters(self) -> t.Dict[str, t.Callable[..., t.Any]]:
        return {"input_problems": input_problems, "env_extra_problems": env_extra_problems,
                "pip_hash_requirements": pip_hash_requirements}
