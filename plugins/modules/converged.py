#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged
short_description: INTERNAL to site.yml -- record a converged node's state, and ask the node once whether it still holds
version_added: 0.2.0
description:
  - Internal to the collection's C(site.yml); not an interface for other playbooks.
  - C(state=record), at the end of a run that provisioned the node and found its services healthy, writes what the run
    left there to O(path) -- the digest of each role's settings and code (O(key)), and for each managed item
    (O(items)) what it is now, a file's content, a directory's listing, a link's target, a unit's state, a service's health,
    Debian packages' versions.
  - C(state=check) asks the node, in one call, whether every recorded item is still as recorded and the settings of this
    run are those of the record, on the same system (distribution, release, machine). Any difference is returned in
    RV(drift), with the role that would change it; no record, or a record of other settings, is a difference too.
  - Reads only, apart from C(state=record) writing O(path).
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: C(state=check) reads only and runs in check mode; C(state=record) reports whether it would write.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state:
    description: C(check) compares the node with the record; C(record) writes the record.
    type: str
    choices: [check, record]
    default: check
  path:
    description: The record (root only, 0600).
    type: path
    default: /var/lib/inferops/converged.json
  key:
    description:
      - Per role, a digest per setting (and C(code) for the role's own files); compared name by name, so that the drift
        names the setting that changed.
    type: dict
    required: true
  items:
    description:
      - >-
        C(state=record) only. Each a dict with C(role) (the role that would change it) and one of C(paths) (each a file:
        its sha256, or its size and modification time over 4 MiB; a directory: each file's size and modification time,
        C(__pycache__) left out; a link: its target; absent: C(absent); a glob pattern: each match), C(units) (systemd
        units: each one's active state, unit file state and whether it awaits a daemon-reload), C(unit_settings)
        (systemd units: what systemd will run them with, property by property -- their drop-ins, environment files,
        C(Environment=), user, C(ExecStartPre=) and C(ExecStart=) command lines -- as systemd itself reports them, so a
        drop-in added by hand is a difference), C(health) (services, each with C(name) and C(health_url): HTTP 200 now, at
        the record and at every check), C(debs) (Debian packages: their versions and status).
    type: list
    elements: dict
    default: []
  report:
    description: C(state=record) only. Kept as given and returned by C(state=check) (what the fleet report shows).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Ask the node whether it is as the last run left it
  inferops.blackwell.converged:
    key: "{{ _site_converged_key }}"
  register: _site_converged
"""

RETURN = r"""
converged:
  description: C(state=check) -- every recorded item is as recorded and the settings are those of the record.
  returned: always
  type: bool
drift:
  description: The differences, one entry each.
  returned: always
  type: list
  elements: dict
  contains:
    role:
      description: The role that would change it (C(site.yml) for the record itself).
      type: str
    what:
      description: The item (C(file /etc/inferops/cuda.env), C(unit sglang-ar), C(setting cuda_env_extra_vars)).
      type: str
    want:
      description: What the record says.
      type: str
    have:
      description: What the node has now.
      type: str
report:
  description: The record's O(report) (C(state=check), when a record was read).
  returned: always
  type: dict
key:
  description: O(key), as given (C(site.yml) records it at the end of the run).
  returned: when O(state=check)
  type: dict
"""

import glob
import hashlib
import json
import os
import typing as t
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.inferops.blackwell.plugins.module_utils.argv_runner import Run, runner

FORMAT = 1
# Larger files are compared by size and modification time, not read (a check costs milliseconds).
READ_LIMIT = 4 * 1024 * 1024
TREE_LIMIT = 20000


def short(value: str) -> str:
    """A digest shortened for a person; other values as they are."""
    if value.startswith("sha256:"):
        return value[:19]
    if len(value) > 80:
        return "%s... (%d characters, sha256:%s)" % (value[:48], len(value), hashlib.sha256(value.encode()).hexdigest()[:12])
    return value


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def tree_value(root: str) -> str:
    """A directory: every file's relative path, size and modification time (not their content), as one digest."""
    lines: t.List[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if name != "__pycache__")
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                info = os.lstat(full)
            except OSError:
                continue
            lines.append("%s %d %d" % (os.path.relpath(full, root), info.st_size, info.st_mtime_ns))
            if len(lines) > TREE_LIMIT:
                return "too many files (over %d)" % TREE_LIMIT
    return "%d files, sha256:%s" % (len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest())


def path_value(path: str) -> str:
    if any(char in path for char in "*?["):
        matches = sorted(glob.glob(path))
        return "; ".join("%s: %s" % (match, path_value(match)) for match in matches) or "absent"
    if os.path.islink(path):
        return "link to " + os.readlink(path)
    if os.path.isdir(path):
        return "directory of " + tree_value(path)
    if not os.path.exists(path):
        return "absent"
    info = os.stat(path)
    if info.st_size > READ_LIMIT:
        return "%d bytes, modified %d" % (info.st_size, info.st_mtime_ns)
    return file_digest(path)


# A unit's state, and what it runs with as systemd reports it after reading the unit file and every drop-in.
UNIT_STATE = ("ActiveState", "UnitFileState", "NeedDaemonReload")
UNIT_SETTINGS = ("DropInPaths", "EnvironmentFiles", "Environment", "User", "ExecStartPre", "ExecStart")


def unit_name(unit: str) -> str:
    return unit if "." in unit else unit + ".service"


def show_units(run: Run, units: t.List[str]) -> t.Dict[str, t.Any]:
    """Every unit's (full names, each once) state and settings from one systemctl call: per unit, each property's values (a property systemd
    gives once per entry, such as EnvironmentFiles=, has several); or the call's error, as a string."""
    if not units:
        return {}
    try:
        rc, stdout, _stderr = run(["timeout", "30", "systemctl", "show", "--property=" + ",".join(("Id",) + UNIT_STATE + UNIT_SETTINGS), *units])
    except OSError as error:
        return {unit: "unknown (%s)" % error for unit in units}
    if rc == 124:
        return {unit: "unknown (systemctl show: no answer in 30 s)" for unit in units}
    blocks = stdout.strip().split("\n\n")
    found: t.Dict[str, t.Any] = {}
    for unit, block in zip(units, blocks + [""] * (len(units) - len(blocks))):
        props: t.Dict[str, t.List[str]] = {}
        for line in block.splitlines():
            name, separator, value = line.partition("=")
            if separator:
                props.setdefault(name, []).append(value)
        found[unit] = props
    return found


def unit_value(props: t.Any) -> str:
    """A unit's state: active state, unit file state, and whether it awaits a daemon-reload."""
    if isinstance(props, str):
        return props
    value = "%s, %s" % ((props.get("ActiveState") or ["?"])[0], (props.get("UnitFileState") or [""])[0] or "no unit file")
    if (props.get("NeedDaemonReload") or [""])[0] == "yes":
        value += ", its unit file changed since systemd read it"
    return value


def setting_value(name: str, values: t.List[str]) -> str:
    """One property's value: a command line without its run-time fields (pid, times, status), a list in systemd's order."""
    if name.startswith("Exec"):
        kept = []
        for value in values:
            parts = [part.strip().strip("{}").strip() for part in value.split(" ; ")]
            kept.append(" ".join(part for part in parts if part.startswith(("path=", "argv[]="))))
        values = kept
    return "; ".join(value for value in values if value) or "none"


def health_value(url: str) -> str:
    """The service's answer, asked from the node itself (no proxy: the URL is the service's own address)."""
    try:
        status = open_url(url, method="GET", timeout=5, follow_redirects="none", use_proxy=False).getcode()
    except urllib.error.HTTPError as error:
        return "unhealthy (HTTP %d)" % error.code
    except Exception as error:  # refused, reset, timeout: any failure to answer
        return "unhealthy (%s)" % (getattr(error, "reason", None) or error)
    return "healthy" if status == 200 else "unhealthy (HTTP %d)" % status


def debs_value(run: Run, packages: t.List[str]) -> str:
    try:
        rc, stdout, _stderr = run(["timeout", "30", "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n", *packages])
    except OSError as error:
        return "unknown (%s)" % error
    if rc == 124:
        return "unknown (dpkg-query: no answer in 30 s)"
    found = sorted(line.strip() for line in stdout.splitlines() if line.strip())
    missing = sorted(set(packages) - {line.split()[0] for line in found})
    return "; ".join(found + ["%s not installed" % name for name in missing])


def flatten(groups: t.List[t.Dict[str, t.Any]]) -> t.List[t.Dict[str, t.Any]]:
    """The items as given (per role: paths, units, health, debs) -> one entry per path, unit and service."""
    items: t.List[t.Dict[str, t.Any]] = []
    for group in groups:
        role = str(group.get("role") or "?")
        unknown = sorted(set(group) - {"role", "paths", "units", "unit_settings", "health", "debs"})
        if unknown:
            raise ValueError("an item of role %s has %s: give paths, units, unit_settings, health or debs" % (role, ", ".join(unknown)))
        paths = group.get("paths") or []
        if not isinstance(paths, list):
            raise ValueError("the paths of role %s are %s, not a list of absolute paths" % (role, type(paths).__name__))
        relative = [str(path) for path in paths if not str(path).startswith("/")]
        if relative:
            # a relative name is nothing a role writes: a mistyped variable (a dict's keys given as its paths) would
            # otherwise be recorded as 'absent' and never differ
            raise ValueError("the paths of role %s must be absolute: %s" % (role, ", ".join(relative)))
        items += [{"role": role, "path": str(path)} for path in paths]
        items += [{"role": role, "unit": str(unit)} for unit in group.get("units") or []]
        items += [{"role": role, "unit_setting": str(unit), "property": name}
                  for unit in group.get("unit_settings") or [] for name in UNIT_SETTINGS]
        items += [{"role": role, "name": str(service.get("name", "?")), "health_url": str(service["health_url"])}
                  for service in group.get("health") or []]
        if group.get("debs"):
            items.append({"role": role, "debs": sorted(str(name) for name in group["debs"])})
    return items


def item_label(item: t.Dict[str, t.Any]) -> str:
    if item.get("path"):
        return "file " + str(item["path"])
    if item.get("unit"):
        return "unit " + str(item["unit"])
    if item.get("unit_setting"):
        return "unit %s, %s (systemd's account, drop-ins included)" % (item["unit_setting"], item.get("property"))
    if item.get("health_url"):
        return "health of %s (%s)" % (item.get("name", "?"), item["health_url"])
    if item.get("debs"):
        return "packages " + ", ".join(item["debs"])
    raise ValueError("an item needs path, unit, unit_setting, health_url or debs: %s" % json.dumps(item, sort_keys=True))


def current_values(run: Run, items: t.List[t.Dict[str, t.Any]]) -> t.List[str]:
    """What each item is now, in the order given (the units in one systemctl call)."""
    named = {unit_name(str(item.get("unit") or item.get("unit_setting"))) for item in items if item.get("unit") or item.get("unit_setting")}
    units = show_units(run, sorted(named))
    values = []
    for item in items:
        if item.get("path"):
            values.append(path_value(str(item["path"])))
        elif item.get("unit"):
            values.append(unit_value(units[unit_name(str(item["unit"]))]))
        elif item.get("unit_setting"):
            props = units[unit_name(str(item["unit_setting"]))]
            values.append(props if isinstance(props, str) else setting_value(str(item.get("property")), props.get(str(item.get("property"))) or []))
        elif item.get("health_url"):
            values.append(health_value(str(item["health_url"])))
        else:
            values.append(debs_value(run, [str(name) for name in item["debs"]]))
    return values


def key_drift(want: t.Dict[str, t.Dict[str, str]], have: t.Dict[str, t.Dict[str, str]]) -> t.List[t.Dict[str, str]]:
    """Setting by setting: a setting of this run that the record holds otherwise, or not at all, and the reverse."""
    drift = []
    for role in sorted(set(want) | set(have)):
        ours, theirs = want.get(role) or {}, have.get(role) or {}
        for name in sorted(set(ours) | set(theirs)):
            if ours.get(name) != theirs.get(name):
                what = {"code": "its code (the collection's files)", "node": "the node's GPUs"}.get(name, "setting " + name)
                drift.append({"role": role, "what": what, "want": "this run: " + (ours.get(name) or "unset")[:8],
                              "have": "last converged run: " + (theirs.get(name) or "unset")[:8]})
    return drift


def system() -> str:
    """The node's distribution, release and machine (the roles' results depend on them)."""
    release: t.Dict[str, str] = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                name, separator, value = line.strip().partition("=")
                if separator:
                    release[name] = value.strip('"')
    except OSError:
        pass
    return "%s %s %s" % (release.get("ID", "?"), release.get("VERSION_ID", "?"), os.uname().machine)


def read_record(path: str) -> t.Optional[t.Dict[str, t.Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


def check(run: Run, path: str, key: t.Dict[str, t.Dict[str, str]]) -> t.Dict[str, t.Any]:
    record = read_record(path)
    if record is None:
        return {"converged": False, "report": {},
                "drift": [{"role": "site.yml", "what": "the record " + path, "want": "the record of the last converged run",
                           "have": "none (never converged by site.yml, or removed)"}]}
    drift = key_drift(key, record.get("key") or {})
    if record.get("system") != system():
        drift.append({"role": "site.yml", "what": "the node's system", "want": str(record.get("system")), "have": system()})
    items = record.get("items") or []
    for item, now in zip(items, current_values(run, items)):
        # a service must answer now, whatever it answered then
        want = "healthy" if item.get("health_url") else str(item.get("value"))
        if now != want:
            # a unit's settings whole: the drop-in or file a person must find is in them
            shown = str if item.get("unit_setting") else short
            drift.append({"role": str(item.get("role", "?")), "what": item_label(item), "want": shown(want), "have": shown(now)})
    return {"converged": not drift, "drift": drift, "report": record.get("report") or {}}


def record(module: AnsibleModule, path: str, key: t.Dict[str, t.Any], items: t.List[t.Dict[str, t.Any]],
           report: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
    try:
        items = flatten(items)
        labels = [item_label(item) for item in items]
    except (ValueError, KeyError, AttributeError) as error:
        module.fail_json(msg="converged: items: %s" % error)
    entries = [dict(item, value=value) for item, value in zip(items, current_values(runner(module), items))]
    unhealthy = [{"role": str(entry.get("role", "?")), "what": label, "want": "healthy", "have": entry["value"]}
                 for label, entry in zip(labels, entries) if entry.get("health_url") and entry["value"] != "healthy"]
    if unhealthy:
        # a node whose service does not answer is not converged: no record, and the next run takes the whole path
        exists = os.path.exists(path)
        if exists and not module.check_mode:
            os.unlink(path)
        return {"changed": exists, "converged": False, "report": report, "drift": unhealthy}
    new = {"format": FORMAT, "key": key, "items": entries, "report": report, "system": system()}
    text = json.dumps(new, indent=1, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            changed = handle.read() != text
    except OSError:
        changed = True
    if changed and not module.check_mode:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        temp = path + ".tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    return {"changed": changed, "converged": True, "report": report, "drift": []}


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["check", "record"], default="check"),
            path=dict(type="path", default="/var/lib/inferops/converged.json"),
            key=dict(type="dict", required=True, no_log=False),
            items=dict(type="list", elements="dict", default=[]),
            report=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "check":
        module.exit_json(changed=False, key=params["key"], **check(runner(module), params["path"], params["key"]))
    module.exit_json(**record(module, params["path"], params["key"], params["items"], params["report"]))


if __name__ == "__main__":
    main()
