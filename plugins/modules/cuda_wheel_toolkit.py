#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_wheel_toolkit
short_description: Lay NVIDIA's CUDA wheels out as a complete toolkit at a prefix, atomically
version_added: 0.2.0
description:
  - Turns NVIDIA's CUDA wheels from PyPI (or a mirror of it) into a toolkit at O(prefix), for example
    C(/usr/local/cuda-13.0), that compiles and links FlashInfer's JIT kernels the way a toolkit from NVIDIA's packages does.
  - Adds what the wheels lack, a real C(bin/) directory, C(lib64/) with C(lib) linked to it, C(targets/<arch>/{include,lib}),
    C(libcudart.so), and a link-time stub C(lib64/stubs/libcuda.so) built with the node's C compiler; takes only the headers of
    the C(nvidia-curand), C(nvidia-cublas) and C(nvidia-cuda-nvrtc) wheels.
  - Builds in a staging directory beside O(prefix), checks that C(bin/nvcc --version) reports O(release), then moves it into
    place, so an interrupted run never leaves a half toolkit at O(prefix). A leftover staging directory, or a prefix this module
    made that misses files, is rebuilt.
  - A manifest in the prefix records the wheels (name, version, sha256); the same wheels again change nothing.
  - Refuses a prefix that exists and was not made by this module, unless its C(bin/nvcc) already reports O(release), in which case
    it is left alone (for example a toolkit from NVIDIA's packages).
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The toolkit's manifest (the wheels it was laid out from), before and after.
  platform:
    platforms: posix
options:
  wheel_dir:
    description: Directory on the node holding the wheel files.
    type: path
    required: true
  pins:
    description: Exact C(name==version) pins, one release of every piece (nvcc, crt, runtime, cccl, nvvm, curand); the
      wheel of each is taken from O(wheel_dir).
    type: list
    elements: str
    required: true
  prefix:
    description: Where the toolkit goes; an absolute, versioned path.
    type: path
    required: true
  release:
    description: The C(MAJOR.MINOR) release C(bin/nvcc --version) must report.
    type: str
    required: true
  compiler:
    description: C compiler for the C(libcuda.so) link stub; looked up as C(cc), C(gcc) when not given.
    type: path
notes:
  - Mixing pieces of different releases fails at compile time ("CUDA compiler and toolkit headers are incompatible"); give the
    wheels of one release.
"""

EXAMPLES = r"""
- name: Lay out CUDA 13.0 from wheels downloaded to /var/cache/inferops/cuda-wheels/13.0
  inferops.blackwell.cuda_wheel_toolkit:
    wheel_dir: /var/cache/inferops/cuda-wheels/13.0
    pins:
      - nvidia-cuda-nvcc==13.0.88
      - nvidia-cuda-crt==13.0.88
      - nvidia-cuda-runtime==13.0.96
      - nvidia-cuda-cccl==13.0.85
      - nvidia-nvvm==13.0.88
      - nvidia-curand==10.4.0.35
    prefix: /usr/local/cuda-13.0
    release: "13.0"
"""

RETURN = r"""
prefix:
  description: The toolkit's path.
  returned: always
  type: str
  sample: /usr/local/cuda-13.0
action:
  description: V(none), V(install), V(update) (other wheels), V(repair) (an unfinished install), or V(foreign) (a toolkit of
    this release not made by this module, left alone).
  returned: always
  type: str
  sample: install
reason:
  description: Why, in one line.
  returned: always
  type: str
  sample: "/usr/local/cuda-13.0 misses bin/nvcc, lib64/libcudart.so"
nvcc_version:
  description: The full version C(bin/nvcc --version) reports after the run (null in check mode before an install).
  returned: always
  type: str
  sample: 13.0.88
"""

import json
import os
import platform
import shutil
import tempfile
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import gpu, toolkit


def nvcc_release(module: AnsibleModule, prefix: str) -> t.Optional[t.Dict[str, t.Any]]:
    nvcc = os.path.join(prefix, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        return None
    rc, out, err = module.run_command([nvcc, "--version"], environ_update={"LC_ALL": "C"})
    return gpu.parse_nvcc_version(out + err) if rc == 0 else None


def plan(module: AnsibleModule, prefix: str, release: t.Tuple[int, ...], manifest: t.Dict[str, t.Any]) -> t.Tuple[str, str]:
    """(action, reason) for the prefix as it is."""
    if not os.path.lexists(prefix):
        return "install", "%s does not exist" % prefix
    existing = toolkit.read_manifest(prefix)
    found = nvcc_release(module, prefix)
    if existing is None:
        if found and found["release"] == release:
            return "foreign", "%s holds a toolkit whose nvcc reports %s, not made by this module: left alone" % (
                prefix, found["full"])
        module.fail_json(msg="%s exists and was not made from wheels by this module (its nvcc reports %s): remove it, or set "
                         "cuda_toolkit_prefix to another path" % (prefix, found["full"] if found else "nothing"))
    missing = toolkit.missing_files(prefix)
    if missing or not found or found["release"] != release:
        return "repair", "%s misses %s" % (prefix, ", ".join(missing) or "a working bin/nvcc")
    if existing != manifest:
        return "update", "%s was made from other wheels" % prefix
    return "none", "%s is complete and made from these wheels" % prefix


def build_stub(module: AnsibleModule, compiler: str, staging: str) -> None:
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "libcuda_stub.c")
        with open(source, "w") as handle:
            handle.write(toolkit.stub_source())
        target = os.path.join(staging, "lib64", "stubs", "libcuda.so")
        rc, out, err = module.run_command([compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", target, source])
        if rc != 0:
            module.fail_json(msg="building the libcuda link stub with %s failed: %s" % (compiler, (out + err).strip()))


def install(module: AnsibleModule, wheels: t.List[str], prefix: str, *, release: t.Tuple[int, ...], manifest: t.Dict[str, t.Any],
            compiler: str) -> None:
    parent, name = os.path.split(prefix.rstrip("/"))
    staging = os.path.join(parent, ".%s.inferops-staging" % name)
    old = os.path.join(parent, ".%s.inferops-old" % name)
    for leftover in (staging, old):
        shutil.rmtree(leftover, ignore_errors=True)
    os.makedirs(staging)
    try:
        for wheel in wheels:
            toolkit.extract_wheel(wheel, staging)
        toolkit.finish_layout(staging, platform.machine())
        build_stub(module, compiler, staging)
    except (toolkit.ToolkitError, OSError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg="laying out %s failed: %s" % (prefix, exc))
    found = nvcc_release(module, staging)
    missing = toolkit.missing_files(staging)
    if missing or not found or found["release"] != release:
        shutil.rmtree(staging, ignore_errors=True)
        module.fail_json(msg="the wheels do not make a %s toolkit: nvcc reports %s, missing %s" % (
            gpu.version_str(release), found["full"] if found else "nothing", ", ".join(missing) or "nothing"))
    with open(os.path.join(staging, toolkit.MANIFEST), "w") as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if os.path.lexists(prefix):
        os.rename(prefix, old)
    os.rename(staging, prefix)
    shutil.rmtree(old, ignore_errors=True)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            wheel_dir=dict(type="path", required=True),
            pins=dict(type="list", elements="str", required=True),
            prefix=dict(type="path", required=True),
            release=dict(type="str", required=True),
            compiler=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    prefix = module.params["prefix"].rstrip("/")
    try:
        release = gpu.parse_version(module.params["release"])
    except ValueError:
        module.fail_json(msg="release=%s: give MAJOR.MINOR, for example 13.0" % module.params["release"])
    if len(release) != 2:
        module.fail_json(msg="release=%s: give MAJOR.MINOR, for example 13.0" % module.params["release"])
    if not os.path.isabs(prefix) or prefix in ("/", "/usr", "/usr/local"):
        module.fail_json(msg="prefix=%s: give the toolkit's own absolute directory, for example /usr/local/cuda-13.0" % prefix)
    if not module.params["pins"]:
        module.fail_json(msg="pins: give the exact name==version of every wheel")
    try:
        wheels = toolkit.select_wheels(module.params["wheel_dir"], module.params["pins"])
        manifest = toolkit.manifest_for(wheels, gpu.version_str(release) or "", platform.machine())
    except toolkit.ToolkitError as exc:
        module.fail_json(msg="pins: %s" % exc)
    action, reason = plan(module, prefix, release, manifest)
    result: t.Dict[str, t.Any] = {"prefix": prefix, "action": action, "reason": reason, "changed": action in ("install", "update", "repair")}
    if result["changed"] and module._diff:
        path = os.path.join(prefix, toolkit.MANIFEST)
        try:
            with open(path) as handle:
                before = handle.read()
        except OSError:
            before = ""
        result["diff"] = {"before_header": path, "after_header": path, "before": before,
                          "after": json.dumps(manifest, indent=2, sort_keys=True) + "\n"}
    if result["changed"] and not module.check_mode:
        compiler = module.params["compiler"] or module.get_bin_path("cc") or module.get_bin_path("gcc")
        if not compiler:
            module.fail_json(msg="no C compiler (cc, gcc) for the libcuda link stub: install gcc (FlashInfer's JIT needs a host "
                             "compiler anyway) or set compiler")
        install(module, wheels, prefix, release=release, manifest=manifest, compiler=compiler)
    found = nvcc_release(module, prefix)
    result["nvcc_version"] = found["full"] if found else None
    module.exit_json(**result)


if __name__ == "__main__":
    main()
