#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: service_health
short_description: Wait until systemd services answer their health URL, and stop waiting for one that died
version_added: 0.2.0
description:
  - Polls each service's health URL from the node until it answers HTTP 200, and reads the unit's state from systemd on
    every round.
  - A unit that fails, stops, or falls into systemd's automatic restart after a crash ends its wait at once, with the
    unit's state and its journal tail, instead of polling until O(timeout); so does a unit that restarted since the wait
    began.
  - Never fails by itself; the caller decides (the sglang_service role rolls back a change whose services are not
    healthy).
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: none
    details: Reads state only, but waits for services a check run did not start; the role skips it in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  services:
    description: The services to wait for, each a dict with C(name) (the unit, without C(.service)) and C(health_url).
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds to wait for all of them together.
    type: int
    default: 1800
  delay:
    description: Seconds between rounds.
    type: int
    default: 5
  journal_lines:
    description: Journal lines returned for a service that is not healthy.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Wait for the SGLang services
  inferops.blackwell.service_health:
    services:
      - name: sglang-ar
        health_url: http://127.0.0.1:30000/health
    timeout: 1800
  register: health

- name: Fail when one is not healthy
  ansible.builtin.fail:
    msg: "{{ health.services | rejectattr('healthy') | map(attribute='reason') | join('; ') }}"
  when: not health.healthy
"""

RETURN = r"""
healthy:
  description: Whether every service answered 200.
  returned: always
  type: bool
services:
  description: One entry per service, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The unit, without C(.service).
      type: str
    healthy:
      description: Whether it answered 200.
      type: bool
    reason:
      description: Why not (empty when healthy).
      type: str
      sample: "the unit is failed (exit-code) 12 s after the wait began"
    seconds:
      description: Seconds until it answered or the wait for it ended.
      type: float
    state:
      description: The unit's ActiveState, SubState, Result and NRestarts when the wait for it ended.
      type: dict
    journal:
      description: The unit's journal tail (empty when healthy).
      type: str
"""

import time
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts")


def parse_show(text: str) -> t.Dict[str, str]:
    """`systemctl show -p A -p B` output (A=value lines) as a dict."""
    state = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            state[key] = value
    return state


def died(state: t.Mapping[str, str], restarts_before: int, waiting_before: bool = False) -> t.Optional[str]:
    """Why a unit can no longer become healthy without another start, or None while it may still.

    waiting_before: the unit was already waiting for its automatic restart when the wait began (a start request does not
    cut that wait short), so that restart is given its chance.
    """
    active, sub = state.get("ActiveState", ""), state.get("SubState", "")
    restarts = int(state.get("NRestarts") or 0)
    if active in ("failed", "inactive", "deactivating"):
        return "the unit is %s (%s)" % (active, state.get("Result") or sub)
    if sub == "auto-restart" and not (waiting_before and restarts == restarts_before):
        return "the unit exited (%s) and systemd is about to restart it" % (state.get("Result") or "failed")
    expected = restarts_before + (1 if waiting_before else 0)
    if restarts > expected:
        return "the unit restarted %d time(s) since the wait began (it crashed)" % (restarts - expected)
    return None


class Waiter:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.journalctl = module.get_bin_path("journalctl")

    def state(self, name: str) -> t.Dict[str, str]:
        args = [self.systemctl, "show", name + ".service"] + ["--property=" + p for p in PROPERTIES]
        rc, out, err = self.module.run_command(args, environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.module.fail_json(msg="systemctl show %s failed: %s" % (name, (err or out).strip()))
        return parse_show(out)

    def answers(self, url: str, timeout: float) -> bool:
        try:
            return open_url(url, method="GET", timeout=timeout, follow_redirects="none").getcode() == 200
        except Exception:
            # any failure to answer (refused, reset, timeout, HTTP error) is "not yet"
            return False

    def journal(self, name: str, lines: int) -> str:
        if not self.journalctl:
            return ""
        _rc, out, err = self.module.run_command([self.journalctl, "-u", name + ".service", "-n", str(lines), "--no-pager",
                                                 "-o", "short-iso"])
        return (out or err).rstrip()


def wait(waiter: Waiter, services: t.List[t.Dict[str, t.Any]], *, timeout: float, delay: float, journal_lines: int,
         clock: t.Callable[[], float] = time.monotonic, sleep: t.Callable[[float], None] = time.sleep) -> t.List[t.Dict[str, t.Any]]:
    started = clock()
    results = {s["name"]: {"name": s["name"], "healthy": False, "reason": "", "seconds": 0.0, "state": {}, "journal": ""}
               for s in services}
    initial = {s["name"]: waiter.state(s["name"]) for s in services}
    before = {name: int(state.get("NRestarts") or 0) for name, state in initial.items()}
    waiting = {name: state.get("SubState") == "auto-restart" for name, state in initial.items()}
    pending = list(services)
    while pending:
        for service in list(pending):
            name = service["name"]
            state = waiter.state(name)
            result = results[name]
            result["state"] = state
            if state.get("ActiveState") == "active" and waiter.answers(service["health_url"], max(1.0, min(delay, 10.0))):
                result.update(healthy=True, seconds=round(clock() - started, 1))
                pending.remove(service)
                continue
            reason = died(state, before[name], waiting[name])
            if reason:
                result.update(reason="%s %d s after the wait began" % (reason, clock() - started),
                              seconds=round(clock() - started, 1))
                pending.remove(service)
        if not pending:
            break
        if clock() - started >= timeout:
            for service in pending:
                results[service["name"]].update(reason="no healthy answer from %s within %d s" % (service["health_url"], timeout),
                                                seconds=round(clock() - started, 1))
            break
        sleep(delay)
    for result in results.values():
        if not result["healthy"]:
            result["journal"] = waiter.journal(result["name"], journal_lines)
    return [results[s["name"]] for s in services]


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            services=dict(type="list", elements="dict", required=True),
            timeout=dict(type="int", default=1800),
            delay=dict(type="int", default=5),
            journal_lines=dict(type="int", default=60),
        ),
        supports_check_mode=False,
    )
    services = module.params["services"]
    bad = [s for s in services if not s.get("name") or not s.get("health_url")]
    if bad:
        module.fail_json(msg="each service needs name and health_url: %s" % bad)
    results = wait(Waiter(module), services, timeout=module.params["timeout"], delay=module.params["delay"],
                   journal_lines=module.params["journal_lines"])
    module.exit_json(changed=False, healthy=all(r["healthy"] for r in results), services=results)


if __name__ == "__main__":
    main()
