# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How this collection's modules start a process: AnsibleModule.run_command behind one small callable, so that logic
which also runs without Ansible (the node tool) takes a runner instead of starting processes itself."""

from __future__ import annotations

import typing as t

# runs argv (no shell, the caller's environment) -> (exit status, stdout, stderr); raises OSError when the program cannot
# be started
Run = t.Callable[[t.List[str]], t.Tuple[int, str, str]]


def runner(module: t.Any) -> Run:
    """module.run_command with argv as given (no expansion of ~ or $NAME: dpkg-query's ${Package}, an environment value
    are not Ansible's to expand; no shell), undecodable output replaced rather than failing; OSError when the program
    cannot be started."""
    def run(argv: t.List[str]) -> t.Tuple[int, str, str]:
        rc, stdout, stderr = module.run_command(argv, expand_user_and_vars=False, handle_exceptions=False,
                                                errors="surrogate_then_replace")
        return rc, stdout, stderr
    return run
