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
CACHE = "/var/lib/sglang/.cache/flashinfer/0.6.18"
ARCH = {"site-pro6000": "120f", "site-b300": "103a"}
ATTENTION = ("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_head_dim_vo_128"
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
    ops = "%s/%s/cached_ops" % (CACHE, ARCH[name_of(host)])
    sampling = host.file(ops + "/sampling/sampling.so")
    assert sampling.exists and sampling.user == "sglang"
    attention = [host.file("%s/%s/%s.so" % (ops, module, module)).exists for module in (ATTENTION, PREFILL)]
    # SGLang's attention on SM 12.x is FlashInfer's: warmed there, not on the B300
    assert attention == ([True, True] if name_of(host) == "site-pro6000" else [False, False])
    # compiled for this node's arch by the real nvcc 13.0, never the system 12.8
    ninja = host.file(ops + "/sampling/build.ninja").content_string
    assert "cuda_home = /usr/local/cuda-13.0\n" in ninja and "nvcc = $cuda_home/bin/nvcc\n" in ninja
    assert "compute_" + ARCH[name_of(host)] in ninja and "/usr/local/cuda-12.8" not in ninja
    check = host.run("runuser -u sglang -- /usr/local/sbin/inferops-flashinfer check")
    assert check.rc == 0, check.stderr
    assert "%d module(s) cached" % (3 if name_of(host) == "site-pro6000" else 1) in check.stdout


def test_autoregressive_service_is_healthy_from_the_warm_cache(host: t.Any) -> None:
    assert host.service("sglang-ar").is_running
    assert not host.service("sglang-spec").is_running
    wait_healthy(host, 30000)
    status, body = http_get(host, "http://127.0.0.1:30000/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "demo"
    journal = host.check_output("journalctl -u sglang-ar --no-pager -o cat")
    assert "inferops-flashinfer check: ok" in journal
    assert "sampling module: cached at %s" % CACHE in journal
    assert "JIT compiling" not in journal


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
        assert "sampling module: cached at" in journal and "JIT compiling" not in journal
        if name_of(host) == "site-pro6000":
            assert "attention decode module (bf16, head_dim 128): cached at" in journal
            assert "attention prefill module (bf16, head_dim 128): cached at" in journal
    finally:
        host.check_output("systemctl start sglang-ar")
    wait_healthy(host, 30000)
    assert not host.service("sglang-spec").is_running
