# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sglang_plan filter: every setting checked against the node's GPUs, the units it plans."""

from __future__ import annotations

import os
import typing as t

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.blackwell.plugins.filter import sglang
from ansible_collections.inferops.blackwell.plugins.filter.sglang import sglang_health_url, sglang_key_problems, sglang_plan, sglang_port_problems


def gpus(count: int, major: int, minor: int = 0) -> t.Dict[str, t.Any]:
    return {"gpu_count": count, "verdict_message": "",
            "gpus": [{"index": i, "compute_capability": {"major": major, "minor": minor}} for i in range(count)]}


ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
with open(os.path.join(ROOT, "roles", "sglang_service", "defaults", "main.yml")) as _handle:
    _DEFAULTS = yaml.safe_load(_handle)
# the role's base (its defaults: tests/unit/test_roles.py checks them against the argument spec) with a model each
AR = dict(_DEFAULTS["sglang_service_ar"], model_path="/models/m")
SPEC = dict(_DEFAULTS["sglang_service_spec"], model_path="/models/m", draft_model_path="/models/d")


def plan(ar: t.Optional[t.Dict[str, t.Any]] = None, spec: t.Optional[t.Dict[str, t.Any]] = None, facts: t.Optional[t.Dict[str, t.Any]] = None,
         active: t.Sequence[str] = ("sglang-ar",)) -> t.Dict[str, t.Any]:
    return sglang_plan({"sglang-ar": dict(AR, **(ar or {})), "sglang-spec": dict(SPEC, **(spec or {}))},
                       facts or gpus(8, 12), list(active))


def test_sm120_node_defaults_every_gpu_tensor_parallel_and_leaves_attention_to_sglang() -> None:
    result = plan()
    assert result["problems"] == []
    ar, spec = result["units"]
    assert ar["name"] == "sglang-ar" and ar["active"] and not spec["active"]
    assert ar["visible_devices"] == "0,1,2,3,4,5,6,7"
    assert ar["config"] == {"model-path": "/models/m", "host": "127.0.0.1", "port": 30000, "tp-size": 8,
                            "sampling-backend": "flashinfer"}
    assert ar["conflicts"] == ["sglang-spec"] and spec["conflicts"] == ["sglang-ar"]
    assert ar["health_url"] == "http://127.0.0.1:30000/health"
    assert spec["config"]["speculative-algorithm"] == "EAGLE3"
    assert spec["config"]["speculative-draft-model-path"] == "/models/d"
    assert "speculative-num-steps" not in spec["config"]


def test_b300_leaves_attention_to_sglang() -> None:
    ar = plan(facts=gpus(8, 10, 3))["units"][0]
    assert "attention-backend" not in ar["config"]
    assert ar["config"]["sampling-backend"] == "flashinfer"


def test_disjoint_gpus_run_side_by_side_without_conflict() -> None:
    result = plan(ar={"gpus": [0, 1, 2, 3]}, spec={"gpus": [4, 5, 6, 7]}, active=["sglang-ar", "sglang-spec"])
    assert result["problems"] == []
    assert [u["conflicts"] for u in result["units"]] == [[], []]
    assert [u["config"]["tp-size"] for u in result["units"]] == [4, 4]
    assert result["units"][1]["visible_devices"] == "4,5,6,7"


def test_two_active_services_on_shared_gpus_are_refused_naming_the_gpus() -> None:
    problems = plan(ar={"gpus": [0, 1, 2, 3]}, spec={"gpus": [2, 3, 4, 5]}, active=["sglang-ar", "sglang-spec"])["problems"]
    assert problems == ["sglang_service_active lists sglang-ar and sglang-spec, which share GPU 2, 3: run one at a time "
                        "(their units conflict) or give them disjoint gpus"]


@pytest.mark.parametrize("ar, message", [
    ({"model_path": ""}, "sglang_service_ar.model_path is empty"),
    ({"gpus": [0, 8]}, "sglang_service_ar.gpus lists GPU 8; this node has GPUs 0-7"),
    ({"tp_size": 4}, "sglang_service_ar: tp_size 4 x dp_size 1 must equal the 8 selected GPU(s)"),
    ({"dp_size": 3}, "tp_size (derived) x dp_size 3 must equal the 8 selected GPU(s)"),
    ({"attention_backend": "trtllm_mha"}, "sglang_service_ar.attention_backend=trtllm_mha does not support SM 12.x"),
    ({"attention_backend": "fa3"}, "sglang_service_ar.attention_backend=fa3 runs on Hopper (SM 9.x) only"),
    ({"port": 30001}, "sglang_service_ar.port and sglang_service_spec.port are both 30001"),
    ({"port": 70000}, "sglang_service_ar.port=70000: give a port from 1024 to 65535"),
    ({"extra_args": {"port": 1}}, "sglang_service_ar.extra_args sets port, which the role manages"),
    ({"extra_args": {"--context-length": 1}}, "is not an SGLang flag name"),
    ({"extra_args": {"context-length\n": 1}}, "sglang_service_ar.extra_args holds a control character"),
    ({"model_path": "x)\n[Service]\nExecStartPre=/bin/touch /var/lib/sglang/INJECTED\n[Unit]\nX-Y=("},
     "sglang_service_ar.model_path holds a control character"),
    ({"model_path": "./models/demo"}, "sglang_service_ar.model_path='./models/demo': give an absolute directory"),
    ({"model_path": "demo"}, "sglang_service_ar.model_path='demo': give an absolute directory"),
    ({"model_path": "/models/my model"}, "sglang_service_ar.model_path='/models/my model': give an absolute directory"),
    ({"model_path": "/models/%h"}, "give an absolute directory"),
    ({"served_model_name": "a\nExecStart=/bin/sh"}, "sglang_service_ar.served_model_name holds a control character"),
    ({"port": 22}, "sglang_service_ar.port=22: give a port from 1024 to 65535 (the service runs unprivileged)"),
    ({"port": 0}, "sglang_service_ar.port=0: give a port from 1024"),
    ({"port": "http"}, "sglang_service_ar.port='http': give a whole number"),
    ({"port": 30000.5}, "sglang_service_ar.port=30000.5: give a whole number"),
    ({"gpus": [0, 0, 1, 2]}, "sglang_service_ar.gpus lists a GPU twice"),
    ({"gpus": "0,1"}, "sglang_service_ar.gpus='0,1': give a list of GPU indexes"),
    ({"gpus": [0, "x"]}, "sglang_service_ar.gpus='x': give a whole number"),
    ({"host": "127.0.0.1; rm -rf /"}, "sglang_service_ar.host='127.0.0.1; rm -rf /': give an IP address or a host name"),
    ({"mem_fraction_static": 1.5}, "sglang_service_ar.mem_fraction_static=1.5: give a fraction"),
    ({"tp_size": "four"}, "sglang_service_ar.tp_size='four': give a whole number"),
    ({"extra_args": {"api-key": "k"}}, "sglang_service_ar.extra_args sets api-key: a configuration file is readable by every user"),
    ({"extra_args": {"admin_api_key": "k"}}, "sglang_service_ar.extra_args sets admin_api_key: a configuration file"),
])
def test_bad_autoregressive_settings_are_refused_naming_the_variable(ar: t.Dict[str, t.Any], message: str) -> None:
    problems = plan(ar=ar)["problems"]
    assert any(message in problem for problem in problems), problems


def test_hub_ids_and_names_with_yaml_metacharacters_are_accepted() -> None:
    result = plan(ar={"model_path": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "llama: 8b #1 'x' %h"})
    assert result["problems"] == []
    assert result["units"][0]["config"]["served-model-name"] == "llama: 8b #1 'x' %h"


def test_a_service_over_gpus_of_two_sm_families_is_refused_naming_each_family() -> None:
    mixed = {"gpu_count": 8, "verdict_message": "",
             "gpus": [{"index": i, "compute_capability": {"major": 12 if i < 4 else 9, "minor": 0}} for i in range(8)]}
    problems = plan(facts=mixed)["problems"]
    assert problems[0:1] == [
        "sglang_service_ar.gpus spans GPUs of different SM (SM 12.0: GPU 0, 1, 2, 3; SM 9.0: GPU 4, 5, 6, 7): "
        "one service runs on one kind of GPU; set sglang_service_ar.gpus to one kind (and the other service's gpus to the other)"]
    assert plan(ar={"gpus": [0, 1, 2, 3]}, spec={"gpus": [4, 5, 6, 7]}, facts=mixed)["problems"] == []


@pytest.mark.parametrize("spec, message", [
    ({"draft_model_path": ""}, "sglang_service_spec.draft_model_path is empty: EAGLE3 needs a draft model"),
    ({"num_steps": 3}, "set num_steps, eagle_topk and num_draft_tokens all or none (set: num_steps)"),
    ({"dflash_block_size": 16}, "dflash_block_size is for DFLASH only"),
    ({"speculative_algorithm": "DFLASH", "extra_args": {"enable-dp-attention": True}}, "DFLASH needs no enable-dp-attention"),
    ({"num_steps": "three", "eagle_topk": 1, "num_draft_tokens": 4}, "sglang_service_spec.num_steps='three': give a whole number"),
])
def test_bad_speculative_settings_are_refused(spec: t.Dict[str, t.Any], message: str) -> None:
    problems = plan(spec=spec)["problems"]
    assert any(message in problem for problem in problems), problems


def test_speculative_knobs_all_set_are_written_and_ngram_needs_no_draft() -> None:
    spec = plan(spec={"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4})["units"][1]["config"]
    assert (spec["speculative-num-steps"], spec["speculative-eagle-topk"], spec["speculative-num-draft-tokens"]) == (3, 1, 4)
    assert plan(spec={"speculative_algorithm": "NGRAM", "draft_model_path": ""})["problems"] == []


def test_extra_args_and_optional_flags_reach_the_config() -> None:
    ar = plan(ar={"served_model_name": "m", "mem_fraction_static": 0.85, "dp_size": 2, "host": "0.0.0.0",
                  "extra_args": {"context-length": 32768, "enable-metrics": True}})["units"][0]
    assert ar["config"]["served-model-name"] == "m"
    assert ar["config"]["mem-fraction-static"] == 0.85
    assert (ar["config"]["tp-size"], ar["config"]["dp-size"]) == (4, 2)
    assert ar["config"]["context-length"] == 32768 and ar["config"]["enable-metrics"] is True
    assert ar["health_url"] == "http://127.0.0.1:30000/health"


def test_active_service_must_be_enabled_and_a_node_needs_gpus() -> None:
    assert plan(spec={"enabled": False}, active=["sglang-spec"])["problems"] == [
        "sglang_service_active lists sglang-spec, but sglang_service_spec.enabled is false"]
    disabled = plan(spec={"enabled": False})
    assert [u["name"] for u in disabled["units"]] == ["sglang-ar"] and disabled["units"][0]["conflicts"] == []
    assert plan(facts={"gpu_count": 0, "gpus": [], "verdict_message": "no GPU"})["problems"][0].startswith("no GPU on this host")
    assert plan(active=["sglang-x"])["problems"] == ["sglang_service_active lists 'sglang-x': known services are sglang-ar, sglang-spec"]


def test_bad_input_is_a_clear_filter_error() -> None:
    with pytest.raises(AnsibleFilterError, match="expects a dict"):
        sglang_plan([], {}, [])  # type: ignore[arg-type]


SS = """LISTEN 0      128          0.0.0.0:22        0.0.0.0:*    users:(("sshd",pid=123,fd=3))
LISTEN 0      128             [::]:22           [::]:*    users:(("sshd",pid=123,fd=4))
LISTEN 0      2048       127.0.0.1:30000     0.0.0.0:*    users:(("python",pid=456,fd=9))
LISTEN 0      5          127.0.0.1:31000     0.0.0.0:*    users:(("python3",pid=789,fd=3))
"""


def test_a_port_another_process_listens_on_is_refused_naming_it() -> None:
    units = plan(ar={"port": 31000})["units"]
    assert sglang_port_problems(units[:1], SS, ["456", "0"], "node-1") == [
        "sglang_service_ar.port=31000 is taken on node-1 by python3 (pid 789): give a free port"]


def test_the_running_service_own_port_is_not_taken() -> None:
    units = plan()["units"]
    assert sglang_port_problems(units, SS, ["456", "0"]) == []
    assert sglang_port_problems(units[:1], SS, ["0", "0"]) == [
        "sglang_service_ar.port=30000 is taken on the node by python (pid 456): give a free port"]


@pytest.mark.parametrize("host, url", [
    ("127.0.0.1", "http://127.0.0.1:30000/health"),
    ("0.0.0.0", "http://127.0.0.1:30000/health"),
    ("::", "http://127.0.0.1:30000/health"),
    ("::1", "http://[::1]:30000/health"),
    ("fd00::5", "http://[fd00::5]:30000/health"),
    ("node-1.example", "http://node-1.example:30000/health"),
])
def test_one_health_url_for_the_role_and_remediation(host: str, url: str) -> None:
    """The role's wait (the plan's health_url) and playbooks/remediate.yml ask the same URL: remediate.yml asks through the
    role's own diagnose.yml, whose URL task, rendered as Ansible would with the service's configuration, gives the plan's
    URL (a regex of remediate.yml's own once gave http://::1:30000/health for host ::1)."""
    assert plan(ar={"host": host})["units"][0]["health_url"] == url
    # remediate.yml is rollout.yml's rollout; the diagnosis there is the role's own diagnose.yml
    with open(os.path.join(ROOT, "playbooks", "remediate.yml")) as handle:
        assert [play["ansible.builtin.import_playbook"] for play in yaml.safe_load(handle)] == ["rollout.yml"]
    with open(os.path.join(ROOT, "playbooks", "rollout.yml")) as handle:
        plays = yaml.safe_load(handle)
    tasks = [task for play in plays for section in ("pre_tasks", "tasks", "post_tasks") for task in play.get(section, [])]
    # and the task files it includes (remediate.yml's diagnosis is one)
    for included in [task["ansible.builtin.include_tasks"]["file"] for task in tasks if "ansible.builtin.include_tasks" in task]:
        with open(os.path.join(ROOT, "playbooks", included)) as handle:
            tasks += yaml.safe_load(handle)
    assert not [task for task in tasks if "ansible.builtin.uri" in task], "rollout.yml asks for health itself"
    includes = [task["ansible.builtin.include_role"] for task in tasks if "ansible.builtin.include_role" in task]
    assert {"name": "inferops.blackwell.sglang_service", "tasks_from": "diagnose", "apply": {"tags": ["always"]}} in includes
    with open(os.path.join(ROOT, "roles", "sglang_service", "tasks", "diagnose.yml")) as handle:
        steps = yaml.safe_load(handle)
    asked = [step["ansible.builtin.set_fact"]["_sglang_service_diag_probe"]["health_url"] for step in steps
             if "_sglang_service_diag_probe" in step.get("ansible.builtin.set_fact", {})]
    assert len(asked) == 1
    environment = jinja2.Environment()
    environment.filters["inferops.blackwell.sglang_health_url"] = sglang_health_url
    rendered = environment.from_string(asked[0]).render(_config={"host": host, "port": 30000}, sglang_service_health_path="/health")
    assert rendered == url


def test_the_filter_keeps_no_defaults_of_its_own() -> None:
    # settings without the role's base laid under them are a caller's error, not silently defaulted
    with pytest.raises(AnsibleFilterError, match="sglang-ar lacks host, port"):
        sglang_plan({"sglang-ar": {k: v for k, v in AR.items() if k not in ("host", "port")}}, gpus(8, 12), ["sglang-ar"])
    # a key the operator set to null is named, not replaced by a default
    assert plan(ar={"host": None})["problems"] == [
        "sglang_service_ar.host is null: give a value, or leave the key out for the role's default"]
    # an empty host is refused, not taken as 127.0.0.1
    assert any("sglang_service_ar.host=''" in problem for problem in plan(ar={"host": ""})["problems"])


def test_the_filter_names_exactly_the_argument_spec_s_keys() -> None:
    with open(os.path.join(ROOT, "roles", "sglang_service", "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    assert set(sglang.KEYS) == set(options["sglang_service_ar"]["options"])
    assert set(sglang.SPEC_KEYS) == set(options["sglang_service_spec"]["options"])
    with pytest.raises(AnsibleFilterError, match="the settings of sglang-ar are not a mapping"):
        sglang_plan({"sglang-ar": "demo"}, gpus(8, 12), ["sglang-ar"])  # type: ignore[dict-item]


KEY = "INFEROPS_SGLANG_API_KEY"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "node-1.example.internal", ""])
def test_a_service_beyond_loopback_without_a_key_is_refused_with_the_fixes(host: str) -> None:
    units = plan(ar={"host": host})["units"]
    problems = sglang_key_problems(units, {"HF_TOKEN": "hf_x"})
    assert len(problems) == 1 and problems[0].startswith("sglang_service_ar.host=%s answers beyond loopback" % (host or "(all)"))
    assert "give one as INFEROPS_SGLANG_API_KEY in sglang_service_secrets" in problems[0]
    assert "sglang_service_listen_without_key: true" in problems[0]
    # the key, or the operator's explicit opt-out
    assert sglang_key_problems(units, {KEY: "s3cret-Key"}) == []
    assert sglang_key_problems(units, {}, True) == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "localhost", "::1"])
def test_a_service_on_loopback_needs_no_key(host: str) -> None:
    assert sglang_key_problems(plan(ar={"host": host})["units"], {}) == []


@pytest.mark.parametrize("key, message", [
    ("", "sglang_service_secrets.INFEROPS_SGLANG_API_KEY is empty or not a string"),
    ("   ", "is empty or not a string"),
    (None, "is empty or not a string"),
    (12345, "is empty or not a string"),
    (" padded-key", "starts or ends with white space"),
])
def test_a_key_sglang_could_not_use_is_refused_without_showing_it(key: t.Any, message: str) -> None:
    problems = sglang_key_problems(plan(ar={"host": "0.0.0.0"})["units"], {KEY: key})
    assert len(problems) == 1 and message in problems[0]
    assert "padded-key" not in problems[0] and "12345" not in problems[0]


def test_each_service_s_files_are_named_from_the_role_s_list() -> None:
    files = [{"template": "sglang.yaml.j2", "path": "/etc/inferops/sglang/%s.yaml"},
             {"template": "sglang.service.j2", "path": "/etc/systemd/system/%s.service"}]
    assert sglang.sglang_service_paths(["sglang-ar", "sglang-spec"], files) == [
        "/etc/inferops/sglang/sglang-ar.yaml", "/etc/systemd/system/sglang-ar.service",
        "/etc/inferops/sglang/sglang-spec.yaml", "/etc/systemd/system/sglang-spec.service"]
    assert sglang.sglang_service_paths([], files) == []
    with pytest.raises(AnsibleFilterError, match="with %s for the service's name"):
        sglang.sglang_service_paths(["sglang-ar"], [{"path": "/etc/systemd/system/sglang-ar.service"}])
    with pytest.raises(AnsibleFilterError, match="a list of service names"):
        sglang.sglang_service_paths("sglang-ar", files)
