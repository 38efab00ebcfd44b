# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""INTERNAL to site.yml: the digests its converged check compares (inferops.blackwell.converged)."""

from __future__ import annotations

import hashlib
import json
import os
import typing as t

from ansible.errors import AnsibleFilterError

# A variable's role, by its name's prefix (inferops_: the settings every role shares).
ROLES = ("cuda_toolkit", "cuda_env", "flashinfer", "jit_cache", "sglang_service", "inferops")
# The collection's root (plugins/filter/ -> ../..) and what of it is code, per role and for the playbook.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CODE: t.Dict[str, str] = {}


def _digest(value: t.Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _tree_digest(paths: t.Iterable[str]) -> str:
    digest = hashlib.sha256()
    for top in paths:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(name for name in dirnames if name != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(dirpath, name)
                digest.update(os.path.relpath(full, ROOT).encode() + b"\0")
                with open(full, "rb") as handle:
                    digest.update(handle.read())
    return digest.hexdigest()[:16]


def _code(owner: str) -> str:
    """The digest of a role's files, or (site.yml) of the playbooks and plugins; once per controller process."""
    if owner not in _CODE:
        if owner == "site.yml":
            paths = [os.path.join(ROOT, "playbooks"), os.path.join(ROOT, "plugins")]
        else:
            paths = [os.path.join(ROOT, "roles", owner)]
        _CODE[owner] = _tree_digest(paths)
    return _CODE[owner]


def converged_key(settings: t.Mapping[str, t.Any], node: t.Any) -> t.Dict[str, t.Dict[str, str]]:
    """Per role, a digest of each of its settings on this host and of its code; site.yml: the node and the playbooks."""
    if not isinstance(settings, t.Mapping):
        raise AnsibleFilterError("converged_key: expected a dict of settings, got %s" % type(settings).__name__)
    key: t.Dict[str, t.Dict[str, str]] = {role: {"code": _code(role)} for role in ROLES}
    key["site.yml"] = {"code": _code("site.yml"), "node": _digest(node)}
    for name, value in settings.items():
        role = next((role for role in ROLES if str(name).startswith(role + "_")), None)
        if role is None:
            raise AnsibleFilterError("converged_key: %s is no setting of this collection's roles" % name)
        key[role][str(name)] = _digest(value)
    return key


def converged_line(drift: t.Mapping[str, t.Any]) -> str:
    """One difference of inferops.blackwell.converged, for a person: role: what: recorded -> now."""
    try:
        return "  %s: %s: %s -> %s" % (drift["role"], drift["what"], drift["want"], drift["have"])
    except (KeyError, TypeError) as error:
        raise AnsibleFilterError("converged_line: expected an entry of inferops.blackwell.converged's drift: %s" % error) from error


class FilterModule:
    def filters(self) -> t.Dict[str, t.Callable[..., t.Any]]:
        return {"converged_key": converged_key, "converged_line": converged_line}
