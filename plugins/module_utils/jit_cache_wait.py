# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of inferops.blackwell.jit_cache_wait, for its action plugin and its documentation stub alike."""

from __future__ import annotations

ARGUMENT_SPEC = {
    "jid": {"type": "str", "required": True},
    "progress": {"type": "str", "required": True},
    "timeout": {"type": "int", "default": 3600},
    "poll": {"type": "int", "default": 15},
    "quiet_seconds": {"type": "int", "default": 60},
}
