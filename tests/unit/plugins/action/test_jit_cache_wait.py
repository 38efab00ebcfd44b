# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The jit_cache_wait action: what it prints while a warm-up runs, and what it returns when the job ends."""

from __future__ import annotations

import base64
import json
import typing as t

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.inferops.blackwell.plugins.action import jit_cache_wait

NOW = 1_000_000.0


def test_a_line_names_the_module_how_many_of_how_many_and_the_time() -> None:
    progress = {"phase": "building", "module": "batch_prefill", "why": "prefill (paged, ragged)", "index": 2, "total": 3,
                "since": NOW - 95, "done": [{"name": "sampling", "seconds": 254.2}]}
    assert jit_cache_wait.describe(progress, NOW) == (
        "building 2/3 batch_prefill (prefill (paged, ragged)), 95 s so far; compiled: sampling 254.2 s")
    assert jit_cache_wait.describe({"phase": "deriving", "since": NOW - 11}, NOW).startswith("deriving the modules")
    assert jit_cache_wait.describe({}, NOW) == "starting"


class Job:
    """A warm-up job as the action sees it: async_status and slurp (modules) for its first look, its result and its
    cleanup; one shell command per poll in between. One progress state per look, then finished with `final`."""

    def __init__(self, polls: t.List[t.Dict[str, t.Any]], final: t.Dict[str, t.Any],
                 final_progress: t.Optional[t.Dict[str, t.Any]] = None) -> None:
        self.polls = polls
        self.final = final
        self.final_progress = final_progress if final_progress is not None else (polls[-1] if polls else {})
        self.calls: t.List[str] = []
        self.seen = 0

    def execute(self, module_name: str, task_vars: t.Any = None, module_args: t.Optional[t.Dict[str, t.Any]] = None) -> t.Dict[str, t.Any]:
        args = module_args or {}
        self.calls.append("%s %s" % (module_name, args.get("mode", "")))
        if module_name == "ansible.legacy.slurp":
            return {"content": base64.b64encode(json.dumps(self.polls[0]).encode()).decode()}
        if args.get("mode") == "cleanup":
            return {"erased": True}
        if self.seen < len(self.polls):
            return {"started": True, "finished": False}
        return dict(self.final, started=True, finished=True)

    def shell(self, command: str, sudoable: bool = True) -> t.Dict[str, t.Any]:
        assert sudoable and "/var/lib/sglang/.ansible_async/1.2" in command and "/ws/inferops-warm-progress.json" in command
        self.calls.append("shell")
        self.seen += 1
        if self.seen < len(self.polls):
            status, progress = {"started": 1, "finished": 0, "ansible_job_id": "1.2"}, self.polls[self.seen]
        else:
            # the job's result, as async_wrapper leaves it (no "started" key)
            status, progress = dict(self.final), self.final_progress
        return {"rc": 0, "stdout": "%s\n%s\n%s" % (json.dumps(status), jit_cache_wait.MARK, json.dumps(progress))}


def action(job: Job, monkeypatch: pytest.MonkeyPatch, **args: t.Any) -> t.Any:
    plugin = object.__new__(jit_cache_wait.ActionModule)
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(plugin, "validate_argument_spec", lambda argument_spec: (None, dict(
        {"timeout": 3600, "poll": 0, "quiet_seconds": 60}, jid="1.2", progress="/ws/inferops-warm-progress.json", **args)), raising=False)
    monkeypatch.setattr(plugin, "_execute_module", job.execute, raising=False)
    monkeypatch.setattr(plugin, "_low_level_execute_command", job.shell, raising=False)
    monkeypatch.setattr(plugin, "_remote_expand_user", lambda path: path.replace("~", "/var/lib/sglang"), raising=False)
    monkeypatch.setattr(plugin, "get_shell_option", lambda name, default=None: default, raising=False)
    return plugin


def test_prints_each_module_once_and_returns_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    printed: t.List[str] = []
    monkeypatch.setattr(jit_cache_wait.display, "display", lambda message, **kw: printed.append(message))
    building = {"phase": "building", "module": "sampling", "why": "top-k", "index": 1, "total": 2, "since": 0, "done": []}
    job = Job([{"phase": "deriving", "since": 0}, building, dict(building),
               dict(building, module="cascade", why="merge_state", index=2, done=[{"name": "sampling", "seconds": 250.0}]),
               {"phase": "done", "done": [{"name": "sampling", "seconds": 250.0}, {"name": "cascade", "seconds": 13.9}]}],
              {"view": {"modules": [{"name": "sampling", "built": True}]}, "changed": True, "ansible_job_id": "1.2",
               "started": 1, "finished": 1, "results_file": "/var/lib/sglang/.ansible_async/1.2", "invocation": {}})
    result = action(job, monkeypatch).run(task_vars={"inventory_hostname": "node-1"})
    # the warm-up module's own result, its changed included, without async_status's bookkeeping
    assert result == {"view": {"modules": [{"name": "sampling", "built": True}]}, "changed": True, "finished": True}
    # the second poll on the same module prints nothing (quiet_seconds)
    assert [line.split(", ")[0] for line in printed] == [
        "  node-1: deriving the modules with SGLang's own code", "  node-1: building 1/2 sampling (top-k)",
        "  node-1: building 2/2 cascade (merge_state)", "  node-1: done; compiled: sampling 250.0 s"]
    assert printed[-1] == "  node-1: done; compiled: sampling 250.0 s, cascade 13.9 s"
    assert job.calls[-1] == "ansible.legacy.async_status cleanup"
    # modules only for the first look, the result and the cleanup; every poll in between is one shell command
    assert job.calls == (["ansible.legacy.async_status status", "ansible.legacy.slurp "] + ["shell"] * 5
                         + ["ansible.legacy.async_status status", "ansible.legacy.async_status cleanup"])


def test_the_last_line_gives_each_module_s_seconds_when_the_job_ended_between_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    printed: t.List[str] = []
    monkeypatch.setattr(jit_cache_wait.display, "display", lambda message, **kw: printed.append(message))
    building = {"phase": "building", "module": "sampling", "why": "top-k", "index": 1, "total": 1, "since": 0, "done": []}
    job = Job([building], {"rc": 0, "stdout": "{}"}, final_progress={"phase": "done", "done": [{"name": "sampling", "seconds": 99.5}]})
    action(job, monkeypatch).run(task_vars={"inventory_hostname": "node-1"})
    assert len(printed) == 2 and printed[0].startswith("  node-1: building 1/1 sampling (top-k), ")
    assert printed[1] == "  node-1: done; compiled: sampling 99.5 s"


@pytest.mark.parametrize(("status", "finished"), [
    ("", False), ("{partial", False), ('{"started": 1, "finished": 0}', False), ('{"started": 1, "finished": 1, "rc": 0}', True),
    ('{"rc": 0, "stdout": "x"}', True),
])
def test_a_poll_reads_the_job_s_state_as_async_status_does(status: str, finished: bool) -> None:
    assert jit_cache_wait.read_poll("%s\n%s\n%s" % (status, jit_cache_wait.MARK, '{"phase": "done"}')) == (finished, {"phase": "done"})
    assert jit_cache_wait.read_poll("%s\n%s\nnot json" % (status, jit_cache_wait.MARK))[1] == {}
    # through a terminal (become over ssh -tt), as the lab showed
    text = "%s\r\n%s\r\n%s\r\n" % (status, jit_cache_wait.MARK, '{"phase": "done"}')
    assert jit_cache_wait.read_poll(text) == (finished, {"phase": "done"})


def test_a_failed_warm_up_fails_the_task_with_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit_cache_wait.display, "display", lambda message, **kw: None)
    job = Job([], {"failed": True, "msg": "no Python at /opt/sglang/venv/bin/python", "view": {"error": "x"}})
    result = action(job, monkeypatch).run(task_vars={})
    assert result["failed"] and result["msg"] == "no Python at /opt/sglang/venv/bin/python" and not result["changed"]


def test_a_warm_up_past_its_timeout_fails_with_what_it_was_doing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit_cache_wait.display, "display", lambda message, **kw: None)
    building = {"phase": "building", "module": "sampling", "index": 1, "total": 1, "since": 0}
    job = Job([building] * 3, {"rc": 0})
    with pytest.raises(AnsibleActionFail, match=r"ran past jit_cache_timeout .* building 1/1 sampling"):
        action(job, monkeypatch, timeout=-1).run(task_vars={"inventory_hostname": "node-1"})


def test_the_documented_options_are_the_ones_the_action_accepts() -> None:
    """The action's argument spec and its documentation stub (plugins/modules/jit_cache_wait.py) say the same."""
    import yaml
    from ansible_collections.inferops.blackwell.plugins.modules import jit_cache_wait as stub

    documented = yaml.safe_load(stub.DOCUMENTATION)["options"]
    assert set(documented) == set(jit_cache_wait.ARGUMENT_SPEC)
    for name, option in documented.items():
        accepted = jit_cache_wait.ARGUMENT_SPEC[name]
        assert (option["type"], option.get("required", False), option.get("default")) == (
            accepted["type"], accepted.get("required", False), accepted.get("default")), name
