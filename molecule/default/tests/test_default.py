# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""After playbooks/site.yml on lab nodes in the incident state: units, user, environment, cache, services.

Runs through molecule's inventory (testinfra's ansible backend). The GPUs and SGLang are SIMULATED
on these nodes (molecule/lab); systemd, the toolkit, FlashInfer and the JIT cache are real.
"""

from __future__ import annotations

import json
import time
import typing as t

import pytest

# site-mixed (the bad-input matrix's spare node) is never provisioned.
testinfra_hosts = ["ansible://site-pro6000", "ansible://site-b300"]
# The PRO 6000 node runs the incident's stack, the B300 node the current one (molecule.yml).
FLASHINFER = {"site-pro6000": "0.6.18", "site-b300": "0.7.2"}
SGLANG = {"site-pro6000": "0.5.21", "site-b300": "0.5.23"}
ARCH = {"site-pro6000": "120f", "site-b300": "103a"}
DECODE = ("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_head_dim_vo_128"
          "_posenc_0_use_swa_False_use_logits_cap_False")
PREFILL = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_head_dim_vo_128"
           "_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False")


def name_of(host: t.Any) -> str:
    return host.backend.get_hostname()


def show(host: t.Any, unit: str, *props: str) -> t.Dict[str, str]:
    out = host.check_output("systemctl show %s -p %s", unit, ",".join(props))
    return dict(line.split("=", 1) for line in out.splitlines())


def http_get(host: t.Any, url: str) -> t.Tuple[int, str]:
    script = ("import sys, urllib.request, urllib.error\n"
              "try:\n r = urllib.request.urlopen(sys.argv[1], timeout=5); print(r.status); print(r.read().decode())\n"
              "except urllib.error.HTTPError as e:\n print(e.code)\n"
              "except OSError as e:\n print(0); print(e)\n")
    out = host.check_output("python3 -c %s %s", script, url).splitlines()
    return int(out[0]), "\n".join(out[1:])


def wait_healthy(host: t.Any, port: int, seconds: int = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if http_get(host, "http://127.0.0.1:%d/health" % port)[0] == 200:
            return
        time.sleep(2)
    journal = host.run("journalctl -u sglang-ar -u sglang-spec -n 80 --no-pager -o cat").stdout
    pytest.fail("port %d not healthy after %d s; journal:\n%s" % (port, seconds, journal))


def journal_since(host: t.Any, unit: str, cursor_time: str) -> str:
    return host.check_output("journalctl -u %s --since %s --no-pager -o cat", unit, cursor_time)


def test_units_load_the_one_environment_run_the_preflight_and_conflict(host: t.Any) -> None:
    for unit, other in (("sglang-ar", "sglang-spec"), ("sglang-spec", "sglang-ar")):
        props = show(host, unit, "User", "EnvironmentFiles", "ExecStartPre", "ExecStart", "Restart", "Conflicts",
                     "StartLimitBurst", "Environment", "UnitFileState")
        assert props["User"] == "sglang"
        assert props["EnvironmentFiles"].startswith("/etc/inferops/cuda.env")
        assert "argv[]=/usr/local/sbin/inferops-flashinfer check" in props["ExecStartPre"]
        assert "--config /etc/inferops/sglang/%s.yaml" % unit in props["ExecStart"]
        assert props["Restart"] == "on-failure"
        assert props["StartLimitBurst"] == "3"
        assert other + ".service" in props["Conflicts"].split()
        assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in props["Environment"]
    assert show(host, "sglang-ar", "UnitFileState")["UnitFileState"] == "enabled"
    assert show(host, "sglang-spec", "UnitFileState")["UnitFileState"] == "disabled"


def test_units_are_sandboxed_writing_only_the_workspace(host: t.Any) -> None:
    """systemd-analyze security on the node's own systemd rates each unit 4.0 ("OK") or better; the unit holds no
    capability and reaches only NVIDIA's devices; and inside the running service's mount namespace nothing but the
    service user's home is writable."""
    for unit in ("sglang-ar", "sglang-spec"):
        report = host.run("systemd-analyze security --no-pager %s.service", unit)
        assert report.rc == 0, report.stderr
        score = float(report.stdout.rsplit("Overall exposure level for %s.service: " % unit, 1)[1].split()[0])
        assert score <= 4.0, report.stdout
        props = show(host, unit, "ProtectSystem", "ReadWritePaths", "CapabilityBoundingSet", "DevicePolicy",
                     "NoNewPrivileges", "PrivateTmp", "MemoryDenyWriteExecute")
        assert props == {"ProtectSystem": "strict", "ReadWritePaths": "-/var/lib/sglang", "CapabilityBoundingSet": "",
                         "DevicePolicy": "closed", "NoNewPrivileges": "yes", "PrivateTmp": "yes", "MemoryDenyWriteExecute": "no"}
        devices = host.check_output("systemctl show %s -p DeviceAllow", unit)
        for device in ("char-nvidia rw", "char-nvidiactl rw", "char-nvidia-frontend rw", "char-nvidia-uvm rw", "char-nvidia-caps rw"):
            assert device in devices
    pid = show(host, "sglang-ar", "MainPID")["MainPID"]
    assert pid != "0"
    inside = "nsenter --target %s --mount -- sh -c %s"
    assert host.run(inside, pid, "touch /var/lib/sglang/.sandbox-probe && rm /var/lib/sglang/.sandbox-probe").rc == 0
    for path in ("/etc/inferops/.sandbox-probe", "/opt/sglang/venv/.sandbox-probe", "/usr/local/sbin/.sandbox-probe"):
        refused = host.run(inside, pid, "touch %s" % path)
        assert refused.rc != 0 and "Read-only file system" in refused.stderr, (path, refused.stderr)


def test_the_service_user_is_not_root_and_its_home_is_the_cache(host: t.Any) -> None:
    user = host.user("sglang")
    assert user.exists and user.uid != 0 and user.home == "/var/lib/sglang"
    env = host.file("/etc/inferops/cuda.env").content_string
    assert "CUDA_HOME='/usr/local/cuda-13.0'" in env
    assert "FLASHINFER_WORKSPACE_BASE='/var/lib/sglang'" in env
    assert "FLASHINFER_CUDA_ARCH_LIST='%s'" % {"120f": "12.0f", "103a": "10.3a"}[ARCH[name_of(host)]] in env
    # the system toolkit is untouched
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.8"


def test_the_cache_holds_the_modules_the_services_use(host: t.Any) -> None:
    ops = "/var/lib/sglang/.cache/flashinfer/%s/%s/cached_ops" % (FLASHINFER[name_of(host)], ARCH[name_of(host)])
    sampling = host.file(ops + "/sampling/sampling.so")
    assert sampling.exists and sampling.user == "sglang"
    built = [host.file("%s/%s/%s.so" % (ops, module, module)).exists for module in (PREFILL, "cascade", DECODE)]
    # SGLang (its own resolution) picks FlashInfer's attention on SM 12.x and trtllm_mha on SM 10.x; the demo model's GQA
    # group of 4 decodes on tensor cores, through the prefill module: batch decode is not built
    assert built == ([True, True, False] if name_of(host) == "site-pro6000" else [False, False, False])
    # compiled for this node's arch by the real nvcc 13.0, never the system 12.8
    ninja = host.file(ops + "/sampling/build.ninja").content_string
    assert "cuda_home = /usr/local/cuda-13.0\n" in ninja and "nvcc = $cuda_home/bin/nvcc\n" in ninja
    assert "compute_" + ARCH[name_of(host)] in ninja and "/usr/local/cuda-12.8" not in ninja
    check = host.run("runuser -u sglang -- /usr/local/sbin/inferops-flashinfer check")
    assert check.rc == 0, check.stderr
    assert "%d module(s) cached" % (3 if name_of(host) == "site-pro6000" else 1) in check.stdout


def test_the_warm_set_was_decided_by_sglang_and_flashinfer(host: t.Any) -> None:
    probe = json.loads(host.check_output("runuser -u sglang -- /usr/local/sbin/inferops-flashinfer probe"))
    configs = probe["derived"]["configs"]
    # each node's stack: the incident's on the PRO 6000 node, the current one on the B300 node
    assert (probe["flashinfer_version"], probe["sglang_version"]) == (FLASHINFER[name_of(host)], SGLANG[name_of(host)])
    assert sorted(configs) == ["/etc/inferops/sglang/sglang-ar.yaml", "/etc/inferops/sglang/sglang-spec.yaml"]
    for path, entry in configs.items():
        assert entry["attention_backends"] == (["flashinfer"] if name_of(host) == "site-pro6000" else ["trtllm_mha"]), path
        assert entry["sampling_backend"] == "flashinfer"
        assert any("SGLang's own JIT kernels" in note for note in entry["not_warmed"])
    if name_of(host) == "site-pro6000":
        models = configs["/etc/inferops/sglang/sglang-spec.yaml"]["models"]
        assert [m["path"] for m in models] == ["/models/demo", "/models/demo-draft"]
        assert all(m["gqa_group"] == 4 and m["decode_tensor_cores"] for m in models)
        assert configs["/etc/inferops/sglang/sglang-ar.yaml"]["modules"] == ["sampling", PREFILL, "cascade"]
    else:
        assert any("trtllm_mha" in note for note in configs["/etc/inferops/sglang/sglang-ar.yaml"]["not_warmed"])
    env = host.file("/etc/inferops/cuda.env").content_string
    assert "SGLANG_JIT_CACHE_DIR='/var/lib/sglang/.cache/sglang/jit'" in env
    assert host.file("/var/lib/sglang/.cache/sglang/jit").user == "sglang"


def test_sglang_serves_sampling_and_a_prefix_hit_compiling_nothing(host: t.Any) -> None:
    """SGLang (the lab's stand-in, SGLang's own code deciding) in the units' exact environment and configuration, on a
    spare port, with the lab's compile tripwire set: any compile at run time fails, and any object or library added
    to FlashInfer's cache is reported. (FlashInfer 0.6.18's FLASHINFER_DISABLE_JIT=1 refuses every JIT-cache module,
    warmed or not -- measured on the H200 -- so it cannot express "nothing is built".)"""
    env = " ".join("'%s'" % line.replace("'", "") for line in host.file("/etc/inferops/cuda.env").content_string.splitlines()
                   if line and not line.startswith("#"))
    log = "/tmp/jit-disabled.log"
    host.check_output("touch /etc/inferops-lab/nvcc-deny")
    host.check_output("systemd-run --unit=lab-jit-disabled --uid=sglang --setenv=HOME=/var/lib/sglang /usr/bin/env -i "
                      "HOME=/var/lib/sglang %s CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 "
                      "/bin/sh -c 'exec /opt/sglang/venv/bin/python -m sglang.launch_server --config "
                      "/etc/inferops/sglang/sglang-ar.yaml --port 30010 > %s 2>&1'" % (env, log))
    try:
        wait_healthy(host, 30010)
        results = [post(host, 30010, text, params) for text, params in (
            ("warm prompt one", {"temperature": 0}),                     # greedy: torch
            ("other words here", {"temperature": 0.7, "top_p": 0.9}),  # top-p: FlashInfer's sampling module
            ("warm prompt two", {"temperature": 0.7, "top_k": 20}))]     # a cached prefix: cascade (merge_state)
        output = host.file(log).content_string
        assert [r["meta_info"]["prefix_cache_hit"] for r in results] == [False, False, True], output
        expected = ["sampling"] + (["cascade"] if name_of(host) == "site-pro6000" else [])
        used = sorted({module for r in results for module in r["meta_info"]["flashinfer_modules"]})
        assert used == sorted(expected), output
        assert "JIT-BUILT" not in output and "LAB TRIPWIRE" not in output and "Traceback" not in output
        assert "FlashInfer module sampling: loaded from the cache" in output
        if name_of(host) == "site-pro6000":
            assert "FlashInfer module batch_prefill (fa2) for /models/demo: loaded from the cache" in output
    finally:
        host.run("systemctl stop lab-jit-disabled")
        host.run("systemctl reset-failed lab-jit-disabled")
        host.run("rm -f /etc/inferops-lab/nvcc-deny")


def post(host: t.Any, port: int, text: str, params: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    script = ("import json, sys, urllib.request\n"
              "request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={'Content-Type': 'application/json'})\n"
              "print(urllib.request.urlopen(request, timeout=30).read().decode())\n")
    body = json.dumps({"text": text, "sampling_params": params})
    return json.loads(host.check_output("python3 -c %s %s %s", script, "http://127.0.0.1:%d/generate" % port, body))


def test_sglang_rejects_a_flag_it_does_not_know(host: t.Any) -> None:
    """The stand-in parses with SGLang's own parser: a flag real SGLang rejects fails, with SGLang's message."""
    result = host.run("runuser -u sglang -- /opt/sglang/venv/bin/python -m sglang.launch_server --config "
                      "/etc/inferops/sglang/sglang-ar.yaml --no-such-flag 1")
    assert result.rc == 2 and "unrecognized arguments: --no-such-flag 1" in result.stderr


def test_autoregressive_service_is_healthy_from_the_warm_cache(host: t.Any) -> None:
    assert host.service("sglang-ar").is_running
    assert not host.service("sglang-spec").is_running
    wait_healthy(host, 30000)
    status, body = http_get(host, "http://127.0.0.1:30000/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "demo"
    journal = host.check_output("journalctl -u sglang-ar --no-pager -o cat")
    assert "inferops-flashinfer check: ok" in journal
    assert "JIT-BUILT" not in journal
    if name_of(host) == "site-pro6000":
        assert "FlashInfer module batch_prefill (fa2) for /models/demo: loaded from the cache" in journal


def test_speculative_service_takes_over_the_gpus_then_hands_them_back(host: t.Any) -> None:
    since = host.check_output("date '+%Y-%m-%d %H:%M:%S'")
    host.check_output("systemctl start sglang-spec")
    try:
        wait_healthy(host, 30001)
        assert not host.service("sglang-ar").is_running  # Conflicts= stopped it
        status, body = http_get(host, "http://127.0.0.1:30001/model_info")
        info = json.loads(body)
        assert status == 200 and info["speculative_algorithm"] == "EAGLE3" and info["lab_simulation"] is True
        journal = journal_since(host, "sglang-spec", since)
        assert "The server is fired up" in journal and "JIT-BUILT" not in journal
        if name_of(host) == "site-pro6000":
            # the draft model's attention too (EAGLE3), from the cache
            assert "decode with tensor cores (batch_prefill fa2) for /models/demo-draft: loaded from the cache" in journal
    finally:
        host.check_output("systemctl start sglang-ar")
    wait_healthy(host, 30000)
    assert not host.service("sglang-spec").is_running
