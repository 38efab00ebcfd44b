# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for an asynchronous warm-up (inferops.blackwell.jit_cache_warm), printing what it builds (see plugins/modules/jit_cache_wait.py)."""

from __future__ import annotations

import base64
import json
import shlex
import time
import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.inferops.blackwell.plugins.module_utils.jit_cache_wait import ARGUMENT_SPEC

display = Display()
# between the job's status file and the progress file in one poll's output
MARK = "@@inferops-jit-cache-wait@@"
# what async_status adds to a job's result
JOB_KEYS = frozenset(("ansible_job_id", "started", "finished", "results_file", "invocation", "erased"))


def describe(progress: t.Mapping[str, t.Any], now: float) -> str:
    """One line of what the warm-up is doing, from its progress file."""
    phase = progress.get("phase")
    since = now - float(progress.get("since") or now)
    finished = ", ".join("%s %.1f s" % (item.get("name"), float(item.get("seconds") or 0)) for item in progress.get("done") or [])
    tail = "; compiled: %s" % finished if finished else ""
    if phase == "building":
        step = (progress.get("index"), progress.get("total"), progress.get("module"), progress.get("why") or "-")
        return "building %s/%s %s (%s), %d s so far%s" % (step + (since, tail))
    if phase == "deriving":
        return "deriving the modules with SGLang's own code, %d s so far" % since
    if phase == "done":
        return "done%s" % tail
    return "starting"


def read_poll(stdout: str) -> t.Tuple[bool, t.Dict[str, t.Any]]:
    """(finished, progress) from one poll's output: the job's status file (as async_status reads it: empty or
    unreadable while the job starts, {"started": 1, "finished": 0} while it runs, the result once it ended), the mark,
    then the progress file."""
    # a command run with become gets a terminal (ssh -tt): its lines end in \r\n
    status_text, _mark, progress_text = stdout.replace("\r\n", "\n").partition("\n%s\n" % MARK)
    try:
        status = json.loads(status_text)
    except ValueError:
        status = None
    finished = isinstance(status, dict) and ("started" not in status or bool(status.get("finished")))
    try:
        progress = json.loads(progress_text)
    except ValueError:
        progress = {}
    return finished, dict(progress) if isinstance(progress, dict) else {}


class ActionModule(ActionBase):
    """Poll the job and its progress file every poll seconds; print a line per host when the module changes, and
    otherwise every quiet_seconds; return the job's result.

    The job is first asked for with async_status (a job that does not exist fails at once), and its result and
    cleanup go through async_status too; the polls in between are one shell command each (cat of the two files): no
    module and no Python on the node, so a fleet of nodes polled every few seconds costs the controller and the
    nodes next to nothing."""

    _requires_connection = True

    def _job(self, jid: str, mode: str, task_vars: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
        """async_status on the node, as the async_status action runs it (the shell's async_dir, expanded there)."""
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        return self._execute_module(module_name="ansible.legacy.async_status", task_vars=task_vars,
                                    module_args={"jid": jid, "mode": mode, "_async_dir": async_dir})

    def _poll(self, status_file: str, progress: str) -> t.Tuple[bool, t.Dict[str, t.Any]]:
        command = "cat %s 2>/dev/null; echo; echo %s; cat %s 2>/dev/null; true" % (shlex.quote(status_file), MARK, shlex.quote(progress))
        done = self._low_level_execute_command(command, sudoable=True)
        return read_poll(str(done.get("stdout", "")))

    def _progress(self, path: str, task_vars: t.Dict[str, t.Any]) -> t.Dict[str, t.Any]:
        read = self._execute_module(module_name="ansible.legacy.slurp", task_vars=task_vars, module_args={"src": path})
        try:
            return dict(json.loads(base64.b64decode(read["content"])))
        except (KeyError, ValueError, TypeError):
            return {}

    def run(self, tmp: t.Any = None, task_vars: t.Optional[t.Dict[str, t.Any]] = None) -> t.Dict[str, t.Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = task_vars.get("inventory_hostname", "?")
        deadline = time.monotonic() + args["timeout"]
        last_step: t.Tuple[t.Any, ...] = ()
        last_shown = 0.0
        status = self._job(args["jid"], "status", task_vars)
        if status.get("failed") and not status.get("started", True):
            raise AnsibleActionFail("cannot read the warm-up job %s: %s" % (args["jid"], status.get("msg")))
        finished = bool(status.get("finished"))
        progress = {} if finished else self._progress(args["progress"], task_vars)
        status_file = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async")).rstrip("/") + "/" + args["jid"]
        while not finished:
            line = describe(progress, time.time())
            now = time.monotonic()
            step = (progress.get("phase"), progress.get("module"))
            if step != last_step or now - last_shown >= args["quiet_seconds"]:
                display.display("  %s: %s" % (host, line))
                last_step, last_shown = step, now
            if now > deadline:
                raise AnsibleActionFail("the warm-up on %s ran past jit_cache_timeout (%d s): %s" % (host, args["timeout"], line))
            time.sleep(args["poll"])
            finished, progress = self._poll(status_file, args["progress"])
        if progress and (progress.get("phase"), progress.get("module")) != last_step:
            # the last line: each module's compile seconds
            display.display("  %s: %s" % (host, describe(progress, time.time())))
        if not status.get("finished"):
            status = self._job(args["jid"], "status", task_vars)
        # the job's own result (the warm-up module's, or a command's), without async_status's bookkeeping
        for key, value in status.items():
            if key not in JOB_KEYS and not key.startswith("_ansible"):
                result[key] = value
        result["finished"] = True
        result["changed"] = bool(status.get("changed"))
        self._job(args["jid"], "cleanup", task_vars)
        return result
