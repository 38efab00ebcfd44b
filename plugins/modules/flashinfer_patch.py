#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flashinfer_patch
short_description: Patch (or revert) FlashInfer's SM 12.x arch detection in a venv, for known releases only
version_added: 0.2.0
description:
  - FlashInfer 0.6.7 to 0.7.0 raise C(SM 12.x requires CUDA >= 12.9) while detecting the GPUs when the nvcc they resolve is
    older; the error is caught, the arch set stays empty, and the first JIT build fails with
    C(FlashInfer requires GPUs with sm75 or higher).
  - The patch makes detection return C(<major>.<minor>a) instead, as FlashInfer 0.7.1 does for SM 12.0, so a process that
    does not load the pinned environment (an operator's ad-hoc Python in the venv) resolves SM 12.0 as C(12.0a) with the
    system CUDA 12.8. GB10 (SM 12.1) still needs nvcc 12.9 to compile C(12.1a).
  - Only files whose exact content is known are patched (their sha256 is checked); anything else is refused, naming the
    version found. The original is kept beside the file and restored by O(state=absent).
  - The file is replaced atomically (a temporary file beside it, moved over it with its mode and owner kept); with
    C(--diff) the change is shown, in check mode too.
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  venv:
    description: The virtual environment FlashInfer is installed in.
    type: path
    required: true
  state:
    description: V(present) patches, V(absent) restores the original.
    type: str
    choices: [present, absent]
    default: present
"""

EXAMPLES = r"""
- name: Patch FlashInfer in the SGLang venv
  inferops.blackwell.flashinfer_patch:
    venv: /opt/sglang/venv

- name: Revert it
  inferops.blackwell.flashinfer_patch:
    venv: /opt/sglang/venv
    state: absent
"""

RETURN = r"""
version:
  description: The FlashInfer release found.
  returned: always
  type: str
  sample: 0.6.18
path:
  description: The file patched.
  returned: always
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/flashinfer/compilation_context.py
patched:
  description: Whether the file is patched after the run (what it would be, in check mode).
  returned: always
  type: bool
  sample: true
"""

import glob
import hashlib
import os
import shutil
import tempfile
import typing as t

from ansible.module_utils.basic import AnsibleModule

TARGET = "flashinfer/compilation_context.py"
BACKUP_SUFFIX = ".inferops-orig"
ORIGINAL_LINE = '                raise RuntimeError("SM 12.x requires CUDA >= 12.9")\n'
PATCHED_LINE = ('                return (major, str(minor) + "a")  # inferops.blackwell flashinfer_patch: SM 12.x with nvcc < 12.9'
                ' builds <major>.<minor>a, as FlashInfer 0.7.1 does for SM 12.0\n')
# sha256 of compilation_context.py as released, per FlashInfer version, read from the wheels on PyPI.
KNOWN = {
    "0.6.18": "65d3afe9c069f9d685a9f99a15e307f02d966a7112681e2d1d5ca70c054336cd",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patched_content(original: bytes) -> bytes:
    text = original.decode("utf-8")
    return text.replace(ORIGINAL_LINE, PATCHED_LINE, 1).encode("utf-8")


def replace_content(module: AnsibleModule, path: str, data: bytes) -> None:
    """Write data to path through a temporary file beside it, moved over it by Ansible's atomic_move (which keeps the
    file's mode, owner and SELinux context), so the file is never half-written."""
    handle, temporary = tempfile.mkstemp(prefix=".inferops-", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        module.atomic_move(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def diff(path: str, before: bytes, after: bytes) -> t.Dict[str, str]:
    """What --diff shows: the file before and after."""
    return {"before_header": path, "after_header": path, "before": before.decode("utf-8"), "after": after.decode("utf-8")}


def find(module: AnsibleModule, venv: str) -> t.Tuple[str, str]:
    """(version, path of compilation_context.py) in the venv's site-packages."""
    sites = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    for site in sites:
        path = os.path.join(site, TARGET)
        # the release as every role reads it: the name of the dist-info directory pip installed
        # (roles/inferops/tasks/flashinfer_release.yml)
        dist_infos = sorted(glob.glob(os.path.join(site, "flashinfer_python-*.dist-info")))
        if os.path.exists(path) and dist_infos:
            return os.path.basename(dist_infos[-1])[len("flashinfer_python-"):-len(".dist-info")], path
    module.fail_json(msg="no FlashInfer (flashinfer-python) in %s: check inferops_sglang_venv" % venv)
    raise AssertionError("unreachable")


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(venv=dict(type="path", required=True), state=dict(type="str", choices=["present", "absent"], default="present")),
        supports_check_mode=True,
    )
    version, path = find(module, module.params["venv"])
    backup = path + BACKUP_SUFFIX
    with open(path, "rb") as handle:
        current = handle.read()
    known = KNOWN.get(version)
    if known is None:
        module.fail_json(msg="FlashInfer %s is not a release this patch knows (%s): refusing to guess. Use "
                         "flashinfer_strategy=pin (the pinned CUDA 13.0 environment: the fix for every release, and the "
                         "only one for SM 12.1, which FlashInfer 0.7.x still refuses with nvcc < 12.9); 0.7.1 and later "
                         "build 12.0a for SM 12.0 on nvcc 12.8 without a patch."
                         % (version, ", ".join(sorted(KNOWN))), version=version, path=path)
    original: t.Optional[bytes] = None
    if sha256(current) == known:
        original = current
    elif os.path.exists(backup):
        with open(backup, "rb") as handle:
            saved = handle.read()
        if sha256(saved) == known and current == patched_content(saved):
            original = saved
    if original is None:
        module.fail_json(msg="%s is FlashInfer %s but its content is neither the released file nor this patch: refusing to "
                         "touch it. Reinstall flashinfer-python %s in the venv, then re-run." % (path, version, version),
                         version=version, path=path)
    want_patched = module.params["state"] == "present"
    is_patched = current != original
    changed = want_patched != is_patched
    wanted = patched_content(original) if want_patched else original
    if changed and not module.check_mode:
        if want_patched:
            shutil.copy2(path, backup)
        replace_content(module, path, wanted)
        if not want_patched:
            os.remove(backup)
        for cached in glob.glob(os.path.join(os.path.dirname(path), "__pycache__", "compilation_context.*.pyc")):
            os.remove(cached)
    extra = {"diff": diff(path, current, wanted)} if changed and module._diff else {}
    module.exit_json(changed=changed, version=version, path=path, patched=want_patched, **extra)


if __name__ == "__main__":
    main()
