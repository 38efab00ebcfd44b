# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the collection tarball, install it, and run gpu_facts and the facts playbook from it.

The GPUs here come from the lab's nvidia-smi simulator (extensions/molecule/lab/gpu), put on PATH
or named per host: this machine has no GPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import typing as t

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIMULATOR = os.path.join(ROOT, "extensions", "molecule", "lab", "gpu", "nvidia-smi")
PROFILES = os.path.join(ROOT, "extensions", "molecule", "lab", "gpu", "profiles")
# The venv running pytest has ansible-core's commands beside its python.
BIN = os.path.dirname(sys.executable)
with open(os.path.join(ROOT, "galaxy.yml")) as _galaxy:
    VERSION = re.search(r"(?m)^version: (\S+)$", _galaxy.read()).group(1)  # type: ignore[union-attr]


def run(command: t.List[str], env: t.Dict[str, str], cwd: str = ROOT) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, "%s failed (%d):\n%s\n%s" % (" ".join(command), done.returncode, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> t.Dict[str, t.Any]:
    """The collection built from this tree and installed into a temporary collections path."""
    tmp = tmp_path_factory.mktemp("artifact")
    (tmp / "ansible.cfg").write_text("[defaults]\n")  # not the checkout's ansible.cfg
    env = {"PATH": BIN + ":/usr/bin:/bin", "HOME": str(tmp), "ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections"),
           "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    run(["ansible-galaxy", "collection", "build", "--output-path", str(tmp)], env)
    tarball = tmp / ("inferops-blackwell-%s.tar.gz" % VERSION)
    run(["ansible-galaxy", "collection", "install", "--offline", "-p", str(tmp / "collections"), str(tarball)], env)
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    return {"tmp": tmp, "env": env, "names": names, "tarball": tarball}


def profile_bin(tmp: t.Any, profile: str) -> str:
    """A directory holding an `nvidia-smi` that answers like the profile's GPUs."""
    directory = tmp / ("bin-" + profile)
    directory.mkdir(exist_ok=True)
    wrapper = directory / "nvidia-smi"
    wrapper.write_text("#!/bin/sh\nINFEROPS_LAB_GPU_PROFILE=%s/%s.json exec %s \"$@\"\n" % (PROFILES, profile, SIMULATOR))
    wrapper.chmod(0o755)
    return str(directory)


def adhoc_facts(installed: t.Dict[str, t.Any], extra_path: str = "") -> t.Dict[str, t.Any]:
    env = dict(installed["env"])
    if extra_path:
        env["PATH"] = extra_path + ":" + env["PATH"]
    out = run(["ansible", "localhost", "-m", "inferops.blackwell.gpu_facts", "-o"], env, cwd=str(installed["tmp"]))
    match = re.search(r"localhost \| SUCCESS => (\{.*\})\s*$", out, re.S)
    assert match, out
    return json.loads(match.group(1))["ansible_facts"]["inferops_gpu"]


def test_artifact_leaves_tests_and_lab_out(installed: t.Dict[str, t.Any]) -> None:
    names = installed["names"]
    assert "plugins/modules/gpu_facts.py" in names
    assert "plugins/module_utils/gpu.py" in names
    assert "playbooks/facts.yml" in names
    assert "meta/runtime.yml" in names
    assert not [name for name in names if name.startswith(("tests", "extensions", "molecule", ".ci", ".venv", ".build"))]
    # an operator's release: the license, the changelog, a README per role (Galaxy's importer requires one); not the lab's
    # inventory, unreleased changelog fragments, or the lab, development and test-suite pages
    assert {"LICENSE", "CHANGELOG.rst", "changelogs/changelog.yaml", "inventories/production.example/hosts.yml"} <= set(names)
    assert {"roles/%s/README.md" % role for role in os.listdir(os.path.join(ROOT, "roles"))} <= set(names)
    left_out = ("inventories/lab", "changelogs/fragments", "docs/lab.md", "docs/development.md", "docs/testing.md", "docs/site", "tools",
                "Makefile", ".")
    assert not [name for name in names if name.startswith(left_out)]


# ansible-core 2.20's ansible-doc warns about its own internal collection, ansible._protomatter, having no MANIFEST.json
# (ansible/ansible#85689, fixed upstream): a warning about ansible-core's files, not this collection's
CORE_PROTOMATTER_WARNING = re.compile(r"^\[WARNING\]: Collection at '[^']*/ansible/_internal/ansible_collections/ansible/_protomatter' does "
                                      r"not have a MANIFEST\.json file, nor has it galaxy\.yml: cannot detect version\.\n?", re.MULTILINE)


def own_warnings(stderr: str) -> str:
    """stderr without ansible-core's warning about its own internal collection: everything else counts."""
    return CORE_PROTOMATTER_WARNING.sub("", stderr).strip()


def test_installed_documentation_and_playbooks(installed: t.Dict[str, t.Any]) -> None:
    """ansible-doc of every module, filter and role of the installed tarball, and the three playbooks' syntax, run clean:
    no warning, no error."""
    env, tmp = installed["env"], installed["tmp"]
    for kind, directory, suffix in (("module", "plugins/modules", ".py"), ("filter", "plugins/filter", ".yml"), ("role", "roles", "")):
        names = sorted(name[: len(name) - len(suffix)] for name in os.listdir(os.path.join(ROOT, directory))
                       if name.endswith(suffix) and not name.startswith("_"))
        assert names, kind
        for name in names:
            done = subprocess.run([os.path.join(BIN, "ansible-doc"), "-t", kind, "inferops.blackwell." + name], env=env,
                                  cwd=str(tmp), capture_output=True, text=True, check=False)
            assert done.returncode == 0 and own_warnings(done.stderr) == "", "%s %s: %s" % (kind, name, done.stderr)
            assert "inferops.blackwell." + name in done.stdout
    inventory = tmp / "syntax-inventory.ini"
    inventory.write_text("[sglang_nodes]\nnode-1\n")
    for playbook in ("site", "remediate", "facts"):
        done = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "--syntax-check", "inferops.blackwell." + playbook],
                              env=env, cwd=str(tmp), capture_output=True, text=True, check=False)
        assert done.returncode == 0 and "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("playbook", ["site", "remediate"])
def test_installed_playbooks_list_each_role_s_tags(installed: t.Dict[str, t.Any], playbook: str) -> None:
    """--list-tags names every role's tags (the role, and each of its steps), which --tags and --skip-tags take."""
    inventory = installed["tmp"] / "tags-inventory.ini"
    inventory.write_text("[sglang_nodes]\nnode-1\n")
    done = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "--list-tags", "inferops.blackwell." + playbook],
                          env=installed["env"], cwd=str(installed["tmp"]), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    listed = set(re.findall(r"[a-z_]+", " ".join(re.findall(r"TASK TAGS: \[([^]]*)\]", done.stdout))))
    for role in ("cuda_toolkit", "cuda_env", "flashinfer", "jit_cache", "sglang_service"):
        assert role in listed and any(tag.startswith(role + "_") for tag in listed), (role, sorted(listed))


@pytest.mark.parametrize("playbook", ["site", "remediate"])
def test_installed_playbook_refuses_an_inventory_without_its_nodes(installed: t.Dict[str, t.Any], playbook: str) -> None:
    """Against an inventory where site_hosts (remediate_hosts) matches nothing, the playbook fails with one message that
    names the variable and the inventory's groups, in check mode too, and writes nothing on the controller."""
    tmp = installed["tmp"] / ("empty-" + playbook)
    tmp.mkdir()
    inventory = tmp / "inventory.ini"
    inventory.write_text("[gpu_a]\nnode-a ansible_connection=local\n[gpu_b]\nnode-b ansible_connection=local\n")
    for extra in ([], ["--check"]):
        done = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "inferops.blackwell." + playbook, *extra],
                              env=installed["env"], cwd=str(tmp), capture_output=True, text=True, check=False)
        out = done.stdout + done.stderr
        assert done.returncode == 2, out
        assert "%s.yml: %s_hosts (sglang_nodes) matches no host of this inventory (its groups: gpu_a, gpu_b)" % (playbook, playbook) in out, out
        assert "WARNING" not in out and "skipping: no hosts matched" not in out, out
    assert sorted(path.name for path in tmp.iterdir()) == ["inventory.ini"]


def test_installed_facts_playbook_refuses_a_pattern_without_hosts(installed: t.Dict[str, t.Any]) -> None:
    """facts.yml with a facts_hosts that matches no host (and against an empty inventory, its default 'all') fails with
    the message site.yml and remediate.yml give, in check mode too, and writes nothing."""
    tmp = installed["tmp"] / "facts-no-hosts"
    tmp.mkdir()
    inventory, empty = tmp / "inventory.ini", tmp / "empty.ini"
    inventory.write_text("[gpu_a]\nnode-a ansible_connection=local\n[gpu_b]\nnode-b ansible_connection=local\n")
    empty.write_text("")
    for source, extra, pattern, groups in ((inventory, ["-e", "facts_hosts=b300"], "b300", "gpu_a, gpu_b"),
                                           (inventory, ["-e", "facts_hosts=b3*", "--check"], "b3*", "gpu_a, gpu_b"),
                                           (empty, [], "all", "none")):
        done = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(source), "inferops.blackwell.facts", *extra],
                              env=installed["env"], cwd=str(tmp), capture_output=True, text=True, check=False)
        out = done.stdout + done.stderr
        assert done.returncode == 2, out
        assert "facts.yml: facts_hosts (%s) matches no host of this inventory (its groups: %s)" % (pattern, groups) in out, out
    assert sorted(path.name for path in tmp.iterdir()) == ["empty.ini", "inventory.ini"]


def test_installed_playbooks_write_nothing_on_the_controller_in_check_mode(installed: t.Dict[str, t.Any]) -> None:
    """remediate.yml and facts.yml with --check: the summary and the table are printed, no report is written."""
    tmp = installed["tmp"] / "check-mode"
    tmp.mkdir()
    inventory = tmp / "inventory.ini"
    inventory.write_text("[sglang_nodes]\ncpu-1 ansible_connection=local ansible_python_interpreter=%s/python ansible_become=false\n" % BIN)
    remediate = run(["ansible-playbook", "-i", str(inventory), "inferops.blackwell.remediate", "--check"], installed["env"], cwd=str(tmp))
    assert "cpu-1: skipped (no GPU)" in remediate, remediate
    facts = run(["ansible-playbook", "-i", str(inventory), "inferops.blackwell.facts", "--check"], installed["env"], cwd=str(tmp))
    assert re.search(r"cpu-1\s+no GPU", facts), facts
    assert sorted(path.name for path in tmp.iterdir()) == ["inventory.ini"]


def test_installed_module_on_a_machine_without_gpus(installed: t.Dict[str, t.Any]) -> None:
    facts = adhoc_facts(installed)
    assert facts["gpu_count"] == 0
    assert facts["nvidia_smi_status"] == "not_found"
    assert facts["verdict"] == "no_gpu"


def test_installed_module_with_8_rtx_pro_6000_on_path(installed: t.Dict[str, t.Any]) -> None:
    facts = adhoc_facts(installed, profile_bin(installed["tmp"], "rtx-pro-6000-x8"))
    assert facts["gpu_count"] == 8
    assert facts["capabilities"] == ["12.0"]
    assert facts["arch_families"] == ["Blackwell"]
    assert facts["flashinfer_arch_list"] == "12.0f"
    assert facts["min_cuda_version"] == "12.9"
    assert {g["min_nvcc_version"] for g in facts["gpus"]} == {"12.9"}
    assert facts["interconnect"] == "PCIe"
    able = [tk for tk in facts["toolkits"] if tk["version_source"] == "nvcc" and tuple(map(int, tk["version"].split("."))) >= (12, 9)]
    assert facts["verdict"] == ("ready" if able else "needs_toolkit")


def test_installed_facts_playbook_reports_the_fleet(installed: t.Dict[str, t.Any]) -> None:
    tmp = installed["tmp"]
    hosts = {"pro-1": "rtx-pro-6000-x8", "b300-1": "b300-x8", "cpu-1": None}
    lines = ["[fleet]"]
    for host, profile in hosts.items():
        smi = "gpu_facts_nvidia_smi=%s/nvidia-smi" % profile_bin(tmp, profile) if profile else ""
        lines.append("%s ansible_connection=local ansible_python_interpreter=%s %s" % (host, BIN + "/python", smi))
    inventory = tmp / "inventory.ini"
    inventory.write_text("\n".join(lines) + "\n")
    report = tmp / "report.json"
    command = ["ansible-playbook", "-i", str(inventory), "inferops.blackwell.facts", "-e", "facts_report_path=%s" % report]
    out = run(command, installed["env"], cwd=str(tmp))
    assert re.search(r"pro-1\s+8x NVIDIA RTX PRO 6000 Blackwell Server Edition\s+12\.0\s+PCIe\s+12\.0f\s", out), out
    assert re.search(r"b300-1\s+8x NVIDIA B300 SXM6 AC\s+10\.3\s+NVLink\s+10\.3a\s", out), out
    assert re.search(r"cpu-1\s+no GPU\s+-\s+-\s.*no_gpu", out), out
    data = json.loads(report.read_text())
    rows = {row["host"]: row for row in data["hosts"]}
    assert rows["pro-1"]["flashinfer_arch_list"] == "12.0f"
    assert rows["b300-1"]["sm"] == "10.3"
    assert rows["cpu-1"]["verdict"] == "no_gpu"
    assert data["facts"]["b300-1"]["interconnect"] == "NVLink"
    assert sum(data["verdict_counts"].values()) == 3
    # a second run writes the same report: nothing changed
    again = run(command, installed["env"], cwd=str(tmp))
    assert re.search(r"ok=\d+\s+changed=0\s", again), again


def test_installed_site_and_remediate_playbooks_skip_a_host_without_gpus(installed: t.Dict[str, t.Any]) -> None:
    """site.yml and remediate.yml by FQCN from the tarball: a GPU-less host is skipped, saying so, and nothing changes."""
    tmp = installed["tmp"]
    inventory = tmp / "site-inventory.ini"
    # connection variables beat the plays' become keyword: this machine may have no sudo
    inventory.write_text("[sglang_nodes]\ncpu-1 ansible_connection=local ansible_python_interpreter=%s/python ansible_become=false\n" % BIN)
    site = run(["ansible-playbook", "-i", str(inventory), "inferops.blackwell.site"], installed["env"], cwd=str(tmp))
    assert "cpu-1: skipped, no GPU (no NVIDIA GPU (nvidia-smi not found))" in site, site
    assert re.search(r"cpu-1\s+:\s+ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", site), site
    assert "cpu-1: skipped: no GPU" in site, site
    report = tmp / "remediate-report.json"
    remediate = run(["ansible-playbook", "-i", str(inventory), "inferops.blackwell.remediate", "-e", "remediate_report_path=%s" % report],
                    installed["env"], cwd=str(tmp))
    assert json.loads(report.read_text()) == [{"host": "cpu-1", "status": "skipped", "causes": [], "canary": False, "repaired": [],
                                               "restarted": [], "started": [], "left_running": [],
                                               "line": "cpu-1: skipped (no GPU)"}], remediate
    assert re.search(r"cpu-1\s+:\s+ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", remediate), remediate


def test_installed_service_role_refuses_bad_settings_before_any_change(installed: t.Dict[str, t.Any]) -> None:
    """sglang_service on a (simulated) 8x RTX PRO 6000 host: a tp_size that does not fit is refused, naming the variable."""
    tmp = installed["tmp"]
    playbook = tmp / "bad-service.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: inferops.blackwell.sglang_service\n"
        "      vars: {inferops_sglang_config_dir: %s/sglang-config}\n"
        "      sglang_service_ar: {model_path: /models/m, tp_size: 3}\n" % tmp)
    env = dict(installed["env"], PATH=profile_bin(tmp, "rtx-pro-6000-x8") + ":" + installed["env"]["PATH"])
    done = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=%s/python" % BIN, str(playbook)],
                          env=env, cwd=str(tmp), capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "sglang_service_ar: tp_size 3 x dp_size 1 must equal the 8 selected GPU(s) [0, 1, 2, 3, 4, 5, 6, 7]: change tp_size, dp_size or gpus" \
        in done.stdout, done.stdout
    assert "changed=0" in done.stdout and not (tmp / "sglang-config").exists()


def test_ansible_builder_accepts_the_execution_environment(installed: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    """execution-environment.yml with the tarball built above: ansible-builder writes a build context (no engine here)
    whose image installs ansible-core, ansible-runner and this collection from the tarball."""
    shutil.copy(os.path.join(ROOT, "execution-environment.yml"), tmp_path)
    shutil.copy(installed["tarball"], tmp_path / "inferops-blackwell.tar.gz")
    run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", "context",
         "--output-filename", "Containerfile"], installed["env"], cwd=str(tmp_path))
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    # the newest ansible-core make test runs under (the last of requirements/controllers.txt)
    with open(os.path.join(ROOT, "requirements", "controllers.txt")) as handle:
        newest = [line.split("#")[0].strip() for line in handle if line.split("#")[0].strip()][-1]
    assert 'ANSIBLE_INSTALL_REFS="%s ansible-runner==2.4.3"' % newest in containerfile
    assert "ansible-galaxy collection install" in containerfile and "-r requirements.yml" in containerfile
    requirements = (tmp_path / "context" / "_build" / "requirements.yml").read_text()
    assert "name: /build/inferops-blackwell.tar.gz" in requirements and "type: file" in requirements
    assert (tmp_path / "context" / "_build" / "inferops-blackwell.tar.gz").read_bytes() == installed["tarball"].read_bytes()


def test_a_checkout_with_an_operators_inventory_and_reports_builds_the_same_tarball(
        installed: t.Dict[str, t.Any], tmp_path: t.Any) -> None:
    """The README's workflow fills inventories/production (its vaulted group_vars) in the checkout and runs the playbooks
    there, which write their reports into it: a tarball built from such a checkout holds none of it -- the same files as
    one built from the clean tree."""
    tree = tmp_path / "checkout"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if os.path.isfile(os.path.join(ROOT, name)):
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), tree / name)
    private = ["inventories/production/hosts.yml", "inventories/production/group_vars/all/vault.yml",
               "inventories/production/group_vars/b200.yml", "inventories/prod-eu/hosts.yml", "remediate-report.json",
               "fleet-facts.json", "site-report.json", "site.retry", ".whl/carried.whl", "notes.txt", "docs/site/conf.py",
               "changelogs/fragments/unreleased.yml", "roles/flashinfer/files/__pycache__/x.cpython-311.pyc",
               "roles/flashinfer/.DS_Store", "playbooks/site.retry"]
    for name in private:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    out = tmp_path / "out"
    run(["ansible-galaxy", "collection", "build", "--output-path", str(out), str(tree)], installed["env"])
    with tarfile.open(out / ("inferops-blackwell-%s.tar.gz" % VERSION)) as archive:
        names = archive.getnames()
    assert not [name for name in names if name in private or name.startswith(("inventories/production/", "inventories/prod-eu"))]
    assert sorted(names) == sorted(installed["names"])
