#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Report a node's NVIDIA GPUs, their SM capabilities, and the CUDA toolkits that can serve them
version_added: 0.2.0
description:
  - Reads C(nvidia-smi) and the CUDA toolkits installed on the node and sets the fact C(inferops_gpu).
  - For every GPU it reports the compute capability as integers, the C(sm_XY) name, the architecture family, the target
    FlashInfer compiles for (C(12.0f), C(12.1a), C(10.3a), C(10.0a), C(9.0a), C(8.0), ...) and the lowest nvcc release
    that target needs.
  - For the host it reports the driver, the FlashInfer arch list as FlashInfer parses it (space separated), the lowest
    toolkit the GPUs need, MIG and persistence mode, and the GPU interconnect (NVLink or PCIe) from C(nvidia-smi topo -m).
  - For every toolkit under O(toolkit_root) (C(cuda-X.Y) and C(cuda-X) entries) and in O(toolkit_paths) it reports the
    version the way FlashInfer reads it (C(bin/nvcc --version); C(version.json) only as a fallback, because NVIDIA's apt
    packages do not ship one), whether it can build for every GPU on the host, and where O(default_toolkit_link) leads
    through update-alternatives.
  - A host without C(nvidia-smi) or without GPUs gets O(ignore:gpu_count=0) and no failure, so mixed fleets gather facts
    in one play. An C(nvidia-smi) that exits non-zero (a driver that is not loaded) or hangs is reported in the facts.
    Output that cannot be parsed fails the task, naming the command and the line.
  - Architecture families and FlashInfer targets are derived from the capability, not from a list of known GPUs, so a
    newer SM is reported; its minimum nvcc is then unknown and the verdict says so.
author:
  - inferops maintainers (@inferops)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
options:
  nvidia_smi:
    description:
      - Path to C(nvidia-smi). By default it is looked up on E(PATH) and in the driver's usual directories.
    type: path
  toolkit_root:
    description:
      - Directory whose C(cuda-X.Y) and C(cuda-X) entries are toolkits.
    type: path
    default: /usr/local
  toolkit_paths:
    description:
      - Further toolkit directories to inspect (a toolkit outside O(toolkit_root)).
    type: list
    elements: path
    default: []
  default_toolkit_link:
    description:
      - The link that stands for the system's default toolkit; what it resolves to is reported.
    type: path
    default: /usr/local/cuda
  timeout:
    description:
      - Seconds each C(nvidia-smi) call may take. A hung driver is reported as O(ignore:nvidia_smi_status=timeout).
      - Needs C(timeout) from coreutils on the node; without it the calls run unbounded.
    type: int
    default: 30
notes:
  - Runs no command that changes the node, so check mode gathers the same facts.
  - The fact is a snapshot of the node; it does not know the environment a service runs with. FlashInfer resolves
    C(CUDA_HOME) from that environment, which is what C(inferops.blackwell.cuda_env) pins.
seealso:
  - name: nvidia-smi documentation
    description: The fields queried with C(--query-gpu) and the C(topo -m) legend.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Gather GPU facts as a task
  inferops.blackwell.gpu_facts:

- name: Show what the node needs
  ansible.builtin.debug:
    msg: "{{ ansible_facts['inferops_gpu']['flashinfer_arch_list'] }} needs nvcc >= {{ ansible_facts['inferops_gpu']['min_cuda_version'] }}"
  when: ansible_facts['inferops_gpu']['gpu_count'] > 0

- name: Include a toolkit installed outside /usr/local
  inferops.blackwell.gpu_facts:
    toolkit_paths:
      - /opt/nvidia/cuda-13.0

# Gather them with the setup facts, in a play or ansible.cfg:
#   [defaults]
#   facts_modules = ansible.builtin.setup, inferops.blackwell.gpu_facts
- name: Gather setup and GPU facts together
  hosts: gpu_nodes
  gather_facts: true
  vars:
    ansible_facts_modules:
      - ansible.builtin.setup
      - inferops.blackwell.gpu_facts
  tasks:
    - name: Stop on hosts whose toolkits cannot serve their GPUs
      ansible.builtin.assert:
        that: ansible_facts['inferops_gpu']['verdict'] in ['ready', 'no_gpu']
        fail_msg: "{{ ansible_facts['inferops_gpu']['verdict_message'] }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    inferops_gpu:
      description: The node's GPUs, what they need, and the toolkits installed.
      returned: always
      type: dict
      contains:
        nvidia_smi:
          description: Path of the C(nvidia-smi) used, or null when none was found.
          type: str
          returned: always
          sample: /usr/bin/nvidia-smi
        nvidia_smi_status:
          description:
            - V(ok), V(not_found) (no C(nvidia-smi)), V(no_devices) (driver up, no GPU), V(failed) (non-zero exit, for
              example a driver that is not loaded) or V(timeout).
          type: str
          returned: always
          sample: ok
        nvidia_smi_error:
          description: What C(nvidia-smi) printed when it failed, with its exit code; null otherwise.
          type: str
          returned: always
          sample: "exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        warnings:
          description: Non-fatal findings (C(WARNING:) lines from C(nvidia-smi), a topology that could not be read).
          type: list
          elements: str
          returned: always
          sample: []
        driver_version:
          description: NVIDIA driver version.
          type: str
          returned: always
          sample: "580.159.04"
        driver_cuda_version:
          description: >-
            Highest CUDA version the driver supports (C(CUDA Version) in the C(nvidia-smi) banner; C(CUDA UMD Version)
            from driver 610 on). Null, with a warning, where the banner names none.
          type: str
          returned: always
          sample: "13.0"
        gpu_count:
          description: Number of GPUs; 0 without driver or GPU.
          type: int
          returned: always
          sample: 8
        gpu_summary:
          description: GPU models and counts in one line.
          type: str
          returned: always
          sample: 8x NVIDIA RTX PRO 6000 Blackwell Server Edition
        gpus:
          description: One entry per GPU, in C(nvidia-smi) index order.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: GPU index as C(nvidia-smi) numbers it.
              type: int
              sample: 0
            name:
              description: Product name.
              type: str
              sample: NVIDIA RTX PRO 6000 Blackwell Server Edition
            uuid:
              description: GPU UUID.
              type: str
              sample: GPU-6ecd4567-d6bf-079a-0073-a3e5ae679589
            pci_bus_id:
              description: PCI bus id.
              type: str
              sample: "00000000:00:06.0"
            memory_total_mib:
              description: Total memory in MiB; null where the driver reports none (unified memory on GB10).
              type: int
              sample: 97887
            compute_capability:
              description: Compute capability as integers.
              type: dict
              contains:
                major:
                  description: Major version.
                  type: int
                  sample: 12
                minor:
                  description: Minor version.
                  type: int
                  sample: 0
            capability:
              description: Compute capability as C(MAJOR.MINOR) text.
              type: str
              sample: "12.0"
            sm:
              description: SM name.
              type: str
              sample: sm_120
            arch_family:
              description: Architecture family derived from the capability.
              type: str
              sample: Blackwell
            flashinfer_arch:
              description: The target FlashInfer 0.6.8 and later compiles for on this GPU.
              type: str
              sample: 12.0f
            flashinfer_supported:
              description: Whether FlashInfer's JIT accepts this GPU at all (SM 7.5 or later).
              type: bool
              sample: true
            min_nvcc_version:
              description: Lowest nvcc release that builds O(ignore:flashinfer_arch); null when not known.
              type: str
              sample: "12.9"
            driver_version:
              description: Driver version as this GPU reports it.
              type: str
              sample: "580.159.04"
            persistence_mode:
              description: V(Enabled) or V(Disabled).
              type: str
              sample: Enabled
            mig_mode:
              description: V(Enabled), V(Disabled), or null on GPUs without MIG.
              type: str
              sample: Disabled
        capabilities:
          description: Distinct compute capabilities on the host, lowest first.
          type: list
          elements: str
          returned: always
          sample: ["12.0"]
        sm_names:
          description: Distinct SM names, lowest first.
          type: list
          elements: str
          returned: always
          sample: [sm_120]
        arch_families:
          description: Distinct architecture families.
          type: list
          elements: str
          returned: always
          sample: [Blackwell]
        flashinfer_arch_list:
          description: The value for C(FLASHINFER_CUDA_ARCH_LIST), space separated as FlashInfer splits it.
          type: str
          returned: always
          sample: 12.0f
        flashinfer_targets:
          description: The same targets as a list.
          type: list
          elements: str
          returned: always
          sample: [12.0f]
        unknown_targets:
          description: Targets whose minimum nvcc release this module does not know (a newer SM).
          type: list
          elements: str
          returned: always
          sample: []
        unsupported_gpus:
          description: Indexes of GPUs below SM 7.5, which FlashInfer refuses.
          type: list
          elements: int
          returned: always
          sample: []
        min_cuda_version:
          description: Lowest toolkit release that builds every target on the host; null without GPUs.
          type: str
          returned: always
          sample: "12.9"
        persistence_mode:
          description: V(Enabled) or V(Disabled) when all GPUs agree, V(mixed) otherwise, null without GPUs.
          type: str
          returned: always
          sample: Enabled
        mig_mode:
          description: V(Enabled) or V(Disabled) when all GPUs agree, V(mixed) otherwise, null without GPUs or MIG.
          type: str
          returned: always
          sample: Disabled
        mig_enabled:
          description: Whether any GPU has MIG enabled.
          type: bool
          returned: always
          sample: false
        interconnect:
          description:
            - V(NVLink) when every GPU pair is linked by NVLink, V(PCIe) when none is, V(mixed) otherwise, V(none) for a
              single GPU, V(unknown) when C(nvidia-smi topo -m) failed, null without GPUs.
          type: str
          returned: always
          sample: NVLink
        links:
          description: GPU pair (C(0-1)) to the link C(nvidia-smi topo -m) shows (C(NV18), C(PIX), C(NODE), C(SYS), ...).
          type: dict
          returned: always
          sample: {"0-1": "NV18"}
        toolkits:
          description: Every CUDA toolkit found, one entry per real directory.
          type: list
          elements: dict
          returned: always
          contains:
            path:
              description: The toolkit's real directory.
              type: str
              sample: /usr/local/cuda-13.0
            aliases:
              description: Other names that lead to it (C(/usr/local/cuda-13) through alternatives).
              type: list
              elements: str
              sample: [/usr/local/cuda-13]
            nvcc:
              description: Path of its nvcc, null when it has none.
              type: str
              sample: /usr/local/cuda-13.0/bin/nvcc
            version:
              description: Release, C(MAJOR.MINOR).
              type: str
              sample: "13.0"
            version_full:
              description: Full version (C(V13.0.88) from nvcc, or version.json's).
              type: str
              sample: 13.0.88
            version_source:
              description: V(nvcc), V(version.json), or null when neither told.
              type: str
              sample: nvcc
            buildable_targets:
              description: Host targets this toolkit's nvcc can build.
              type: list
              elements: str
              sample: [12.0f]
            missing_targets:
              description: Host targets it cannot build.
              type: list
              elements: str
              sample: []
            serves_gpus:
              description: True when its nvcc builds every known target on the host (false without GPUs).
              type: bool
              sample: true
            problems:
              description: What is wrong with it (no nvcc, an nvcc that does not run).
              type: list
              elements: str
              sample: []
        default_toolkit:
          description: Where O(default_toolkit_link) leads.
          type: dict
          returned: always
          contains:
            link:
              description: The link inspected.
              type: str
              sample: /usr/local/cuda
            exists:
              description: Whether it leads to a directory.
              type: bool
              sample: true
            chain:
              description: Each hop of the link.
              type: list
              elements: str
              sample: [/usr/local/cuda, /etc/alternatives/cuda, /usr/local/cuda-12.8]
            via_alternatives:
              description: Whether the chain passes through C(/etc/alternatives).
              type: bool
              sample: true
            resolves_to:
              description: The real directory, null when the link is missing or dangling.
              type: str
              sample: /usr/local/cuda-12.8
            version:
              description: That toolkit's release.
              type: str
              sample: "12.8"
            serves_gpus:
              description: Whether that toolkit builds every known target on the host.
              type: bool
              sample: false
        serving_toolkits:
          description: Paths of the toolkits that build every known target on the host, oldest first.
          type: list
          elements: str
          returned: always
          sample: [/usr/local/cuda-13.0]
        verdict:
          description:
            - V(ready) (a toolkit that serves every GPU is installed), V(needs_toolkit), V(unknown_gpu) (a target with no
              known nvcc minimum), V(unsupported_gpu) (below SM 7.5), V(no_gpu) or V(driver_error).
          type: str
          returned: always
          sample: needs_toolkit
        verdict_message:
          description: The verdict in one line, naming GPUs, toolkits and what to change.
          type: str
          returned: always
          sample: "8x NVIDIA RTX PRO 6000 Blackwell Server Edition needs nvcc >= 12.9 for 12.0f; installed: /usr/local/cuda-12.8 (12.8)"
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.inferops.blackwell.plugins.module_utils import gpu

# Where the driver's tools live when they are not on the PATH Ansible gets.
_NVIDIA_SMI_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin", "/usr/lib/wsl/lib"]
_TIMEOUT_EXIT = 124


class SmiRunner:
    """Runs nvidia-smi with a time limit and classifies the outcome."""

    def __init__(self, module: AnsibleModule, path: str, timeout: int) -> None:
        self.module = module
        self.path = path
        self.timeout = timeout
        self.timeout_bin = module.get_bin_path("timeout")

    def run(self, args: t.List[str]) -> t.Tuple[int, str, str]:
        command = [self.path] + args
        if self.timeout_bin and self.timeout > 0:
            command = [self.timeout_bin, str(self.timeout)] + command
        rc, out, err = self.module.run_command(command, environ_update={"LC_ALL": "C"})
        return rc, out, err

    def describe(self, args: t.List[str]) -> str:
        return " ".join(["nvidia-smi"] + args)


def failure_status(rc: int, out: str, err: str, timeout: int) -> t.Tuple[str, str]:
    text = " ".join((out + "\n" + err).split())
    if rc == _TIMEOUT_EXIT:
        return "timeout", "no answer within %d s (a hung driver?)" % timeout
    if "No devices were found" in text:
        return "no_devices", text
    return "failed", "exit %d: %s" % (rc, text or "(no output)")


def empty_gpu_facts() -> t.Dict[str, t.Any]:
    facts: t.Dict[str, t.Any] = {
        "driver_version": None,
        "driver_cuda_version": None,
        "gpus": [],
        "interconnect": None,
        "links": {},
    }
    facts.update(gpu.summarize_gpus([]))
    return facts


def gather_gpus(module: AnsibleModule, facts: t.Dict[str, t.Any]) -> None:
    """Fill the GPU part of facts from nvidia-smi."""
    path = module.params["nvidia_smi"] or module.get_bin_path("nvidia-smi", opt_dirs=_NVIDIA_SMI_DIRS)
    facts["nvidia_smi"] = path
    facts.update(empty_gpu_facts())
    if not path:
        facts["nvidia_smi_status"] = "not_found"
        return
    runner = SmiRunner(module, path, module.params["timeout"])

    query = gpu.query_gpu_args()
    rc, out, err = runner.run(query)
    if rc != 0:
        status, message = failure_status(rc, out, err, runner.timeout)
        facts["nvidia_smi_status"] = status
        facts["nvidia_smi_error"] = None if status == "no_devices" else message
        return
    facts["warnings"].extend(gpu.split_warnings(out)[0])
    try:
        gpus = gpu.parse_query_gpu(out, runner.describe(query))
    except gpu.NvidiaSmiParseError as exc:
        module.fail_json(msg=str(exc), command=exc.command, line_number=exc.line_number, line=exc.line)
    if not gpus:
        facts["nvidia_smi_status"] = "no_devices"
        return
    facts["nvidia_smi_status"] = "ok"
    facts["gpus"] = gpus
    facts.update(gpu.summarize_gpus(gpus))
    facts["driver_version"] = gpus[0]["driver_version"]

    rc, out, err = runner.run([])
    if rc == 0:
        banner = gpu.parse_banner(out)
        facts["driver_cuda_version"] = banner["driver_cuda_version"]
        if banner["driver_cuda_version"] is None:
            facts["warnings"].append("`nvidia-smi` (banner) names no CUDA version the driver supports: driver_cuda_version "
                                     "is null; its header was: %s" % " ".join(out.strip().splitlines()[:3])[:300])
    else:
        facts["warnings"].append("`nvidia-smi` (banner) failed: %s" % failure_status(rc, out, err, runner.timeout)[1])

    facts["interconnect"] = "unknown"
    if len(gpus) == 1:
        facts["interconnect"] = "none"
        return
    topo = ["topo", "-m"]
    rc, out, err = runner.run(topo)
    if rc != 0:
        facts["warnings"].append("`nvidia-smi topo -m` failed: %s" % failure_status(rc, out, err, runner.timeout)[1])
        return
    try:
        topology = gpu.parse_topology(out, runner.describe(topo), len(gpus))
    except gpu.NvidiaSmiParseError as exc:
        module.fail_json(msg=str(exc), command=exc.command, line_number=exc.line_number, line=exc.line)
    facts["interconnect"] = topology["interconnect"]
    facts["links"] = topology["links"]


def read_text(path: str) -> t.Optional[str]:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def inspect_toolkit(module: AnsibleModule, path: str, aliases: t.List[str], targets: t.List[str]) -> t.Dict[str, t.Any]:
    nvcc = os.path.join(path, "bin", "nvcc")
    nvcc_output = None
    if os.access(nvcc, os.X_OK):
        _rc, out, err = module.run_command([nvcc, "--version"], environ_update={"LC_ALL": "C"})
        nvcc_output = out + err
    else:
        nvcc = None
    version_json = read_text(os.path.join(path, "version.json"))
    return gpu.describe_toolkit(path, aliases=aliases, nvcc=nvcc, nvcc_output=nvcc_output, version_json=version_json, targets=targets)


def gather_toolkits(module: AnsibleModule, facts: t.Dict[str, t.Any]) -> None:
    targets = facts["flashinfer_targets"]
    link = module.params["default_toolkit_link"]
    chain = gpu.link_chain(link)
    resolved = os.path.realpath(link) if os.path.isdir(link) else None

    by_real: t.Dict[str, t.List[str]] = {}
    candidates = gpu.toolkit_candidates(module.params["toolkit_root"], module.params["toolkit_paths"])
    if resolved:
        candidates.append(resolved)
    for candidate in candidates:
        real = os.path.realpath(candidate)
        names = by_real.setdefault(real, [])
        if candidate != real and candidate not in names:
            names.append(candidate)

    toolkits = [inspect_toolkit(module, real, aliases, targets) for real, aliases in by_real.items()]
    toolkits.sort(key=lambda tk: (gpu.parse_version(tk["version"]) if tk["version"] else (0,), tk["path"]))
    facts["toolkits"] = toolkits
    facts["serving_toolkits"] = [tk["path"] for tk in toolkits if tk["serves_gpus"]]

    default = next((tk for tk in toolkits if tk["path"] == resolved), None)
    facts["default_toolkit"] = {
        "link": link,
        "exists": resolved is not None,
        "chain": chain,
        "via_alternatives": any(os.path.basename(os.path.dirname(hop)) == "alternatives" for hop in chain[1:]),
        "resolves_to": resolved,
        "version": default["version"] if default else None,
        "serves_gpus": bool(default and default["serves_gpus"]),
    }


def check_params(module: AnsibleModule) -> None:
    """Refuse input that cannot be what the operator meant, naming the option and the fix."""
    path = module.params["nvidia_smi"]
    if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        module.fail_json(
            msg="nvidia_smi=%s is not an executable file: give the path of nvidia-smi, or leave nvidia_smi unset "
            "to look it up on PATH" % path)
    if module.params["timeout"] < 0:
        module.fail_json(msg="timeout=%d: give the seconds each nvidia-smi call may take (0 for no limit)"
                         % module.params["timeout"])


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            toolkit_root=dict(type="path", default="/usr/local"),
            toolkit_paths=dict(type="list", elements="path", default=[]),
            default_toolkit_link=dict(type="path", default="/usr/local/cuda"),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    check_params(module)
    facts: t.Dict[str, t.Any] = {"nvidia_smi_error": None, "warnings": []}
    gather_gpus(module, facts)
    gather_toolkits(module, facts)
    facts["gpu_summary"] = gpu.gpu_summary(facts["gpus"])
    facts["verdict"], facts["verdict_message"] = gpu.host_verdict(facts)
    for warning in facts["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"inferops_gpu": facts})


if __name__ == "__main__":
    main()
