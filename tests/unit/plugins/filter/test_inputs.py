# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input_problems and env_extra_problems filters: bad operator input named, with the fix; and the roles' argument
specs, which Ansible applies at every entry point (types, choices, sub-options)."""

from __future__ import annotations

import os
import typing as t

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.inferops.blackwell.plugins.filter import inputs
from ansible_collections.inferops.blackwell.plugins.filter.inputs import env_extra_problems, input_problems

MANAGED = ["CUDA_HOME", "PATH", "LD_LIBRARY_PATH"]


def one(var: str, value: t.Any, kind: str, **bounds: int) -> t.List[str]:
    return input_problems([dict({"var": var, "value": value, "kind": kind}, **bounds)])


@pytest.mark.parametrize("value", ["13.0", "12.9", "14.10"])
def test_release_accepts_major_minor_strings(value: str) -> None:
    assert one("cuda_toolkit_version", value, "release") == []


@pytest.mark.parametrize("value", ["13", "13.x", "abc", "13.0.1", "13.0\n", " 13.0", ""])
def test_release_refuses_anything_else_naming_the_variable(value: str) -> None:
    problems = one("cuda_toolkit_version", value, "release")
    assert len(problems) == 1
    assert problems[0].startswith("cuda_toolkit_version=")
    assert 'give MAJOR.MINOR, for example "13.0"' in problems[0]


def test_release_read_as_a_yaml_number_says_to_quote_it() -> None:
    problems = one("cuda_toolkit_version", 13.0, "release")
    assert problems == ['cuda_toolkit_version=13.0 was read as a number: quote it, cuda_toolkit_version: "13.0" '
                        "(YAML turns 13.10 into 13.1)"]


def test_a_trailing_newline_is_shown_escaped() -> None:
    problems = one("cuda_toolkit_version", "13.0\n", "release")
    assert "13.0\\n" in problems[0] and "\n" not in problems[0]


@pytest.mark.parametrize("value", [30000, "30000", 1024, 65535])
def test_int_in_range(value: t.Any) -> None:
    assert one("port", value, "int", min=1024, max=65535) == []


@pytest.mark.parametrize("value, words", [(22, "out of range"), (70000, "out of range"), ("http", "whole number"),
                                          (True, "whole number"), (1.5, "whole number"), (None, "whole number")])
def test_int_refused(value: t.Any, words: str) -> None:
    problems = one("sglang_service_health_delay", value, "int", min=1024, max=65535)
    assert len(problems) == 1 and words in problems[0] and problems[0].startswith("sglang_service_health_delay=")


@pytest.mark.parametrize("value", ["/opt/sglang/venv", "/usr/local/cuda-13.0", "/var/lib/sglang", "/etc/inferops/cuda.env"])
def test_paths_accepted(value: str) -> None:
    assert one("inferops_sglang_venv", value, "path") == []


@pytest.mark.parametrize("value", ["opt/venv", "/opt/my venv", "/opt/v'env", "/opt/venv\n", "/opt/%h", "/opt/$HOME",
                                   "/opt/a\\b", "/opt/a;b", 5])
def test_paths_refused(value: t.Any) -> None:
    problems = one("inferops_sglang_venv", value, "path")
    assert len(problems) == 1 and problems[0].startswith("inferops_sglang_venv=")


def test_root_is_refused_as_a_service_user() -> None:
    problems = one("inferops_service_user", "root", "user")
    assert problems and "must not run as root" in problems[0] and "sglang" in problems[0]


@pytest.mark.parametrize("value", ["sg lang", "SGLANG", "a\nb", "x;y", ""])
def test_user_names_refused(value: str) -> None:
    assert one("inferops_service_user", value, "user")


def test_text_refuses_only_control_characters() -> None:
    assert one("served_model_name", "Llama 3.1: 70B #1 'q' %h $x", "text") == []
    assert one("served_model_name", "a\nExecStart=/bin/sh", "text")


def test_url_path() -> None:
    assert one("sglang_service_health_path", "/health", "url_path") == []
    assert one("sglang_service_health_path", "health", "url_path")
    assert one("sglang_service_health_path", "/h?x=1", "url_path")


def test_unknown_kind_is_a_programming_error() -> None:
    with pytest.raises(AnsibleFilterError):
        one("x", "y", "colour")


def test_env_extra_accepts_ordinary_variables() -> None:
    assert env_extra_problems({"MAX_JOBS": "16", "NCCL_DEBUG": "INFO", "OPTS": "a=b c", "N": 4}, MANAGED) == []


@pytest.mark.parametrize("extra, words", [
    ({"FOO\n": "x"}, "not a variable name"),
    ({"A=B": "x"}, "not a variable name"),
    ({"1X": "x"}, "not a variable name"),
    ({"FOO": "x\ny"}, "control character"),
    ({"FOO": "it's"}, "single quote"),
    ({"FOO": {"a": 1}}, "string or a number"),
    ({"PATH": "/x"}, "which the roles pin"),
    ({"CUDA_HOME": "/x"}, "which the roles pin"),
    ({"LD_PRELOAD": "/x.so"}, "would change what every service loads"),
    ({"CUDA_VISIBLE_DEVICES": "0"}, "which GPUs it sees"),
    ({"PYTHONPATH": "/x"}, "would change what every service loads"),
])
def test_env_extra_refused(extra: t.Dict[str, t.Any], words: str) -> None:
    problems = env_extra_problems(extra, MANAGED)
    assert len(problems) == 1 and words in problems[0] and problems[0].startswith("cuda_env_extra")


SECRET = "hf_Xy7secretValue"


@pytest.mark.parametrize("value, words", [
    (SECRET + "\n", "control character"),
    (SECRET + "'", "single quote"),
    ({"token": SECRET}, "give a string, not mapping"),
    ([SECRET], "give a string, not list"),
    (True, "give a string, not boolean"),
    (None, "give a string, not null"),
])
def test_secrets_refused_without_showing_the_value(value: t.Any, words: str) -> None:
    problems = env_extra_problems({"HF_TOKEN": value}, [], "sglang_service_secrets", secret=True)
    assert len(problems) == 1 and words in problems[0] and problems[0].startswith("sglang_service_secrets.HF_TOKEN")
    assert "Xy7" not in problems[0]


def test_secrets_names_checked_like_extra_variables() -> None:
    problems = env_extra_problems({"CUDA_HOME": SECRET, "LD_PRELOAD": SECRET, "A B": SECRET}, ["CUDA_HOME"],
                                  "sglang_service_secrets", secret=True)
    assert [p.split(" ")[1] for p in problems[:2]] == ["sets", "sets"] and len(problems) == 3
    assert not any("Xy7" in p for p in problems)
    assert env_extra_problems({"HF_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": "a/b+c=="}, [], "sglang_service_secrets",
                              secret=True) == []


def test_env_extra_must_be_a_mapping() -> None:
    assert env_extra_problems(["A=1"], MANAGED) == ["cuda_env_extra must be a mapping of NAME: value, not a list"]


@pytest.mark.parametrize("module", ["sampling", "cascade", "norm", "batch_prefill:bf16:128", "batch_decode:fp16:256",
                                    {"kind": "cascade"},
                                    {"kind": "batch_prefill", "backend": "fa3", "q": "bfloat16", "kv": "bfloat16", "o": "bfloat16",
                                     "head_dim_qk": 128, "head_dim_vo": 128, "sliding_window": True, "logits_soft_cap": False},
                                    {"kind": "batch_decode", "q": "bfloat16", "kv": "float8_e4m3fn", "o": "bfloat16",
                                     "head_dim_qk": 256, "head_dim_vo": 256}])
def test_jit_modules_by_name_or_recipe_pass(module: t.Any) -> None:
    assert input_problems([{"var": "flashinfer_jit_modules", "value": [module], "kind": "jit_module", "each": True}]) == []


@pytest.mark.parametrize(("module", "says"), [
    ("sampling\n", "not understood"),
    ("batch_prefill:bf16:100", "not understood"),
    ({"kind": "rope"}, "unknown kind rope"),
    ({"kind": "sampling", "q": "bfloat16"}, "takes no other keys"),
    ({"kind": "batch_prefill", "backend": "fa4", "q": "bfloat16", "kv": "bfloat16", "o": "bfloat16", "head_dim_qk": 128,
      "head_dim_vo": 128}, "backend fa4"),
    ({"kind": "batch_decode", "q": "int8", "kv": "bfloat16", "o": "bfloat16", "head_dim_qk": 128, "head_dim_vo": 128}, "q=int8"),
    ({"kind": "batch_decode", "q": "bfloat16", "kv": "bfloat16", "o": "bfloat16", "head_dim_qk": True, "head_dim_vo": 128},
     "head_dim_qk=True"),
    ({"kind": "batch_decode", "q": "bfloat16", "kv": "bfloat16", "o": "bfloat16", "head_dim_qk": 128, "head_dim_vo": 128,
      "sliding_window": "yes"}, "sliding_window=yes: give true or false"),
    ({"kind": "batch_decode", "q": "bfloat16", "kv": "bfloat16", "o": "bfloat16", "head_dim_qk": 128, "head_dim_vo": 128,
      "backend": "fa2"}, "unknown key(s) backend"),
])
def test_bad_jit_modules_are_named_with_the_fix(module: t.Any, says: str) -> None:
    problems = input_problems([{"var": "flashinfer_jit_modules", "value": [module], "kind": "jit_module", "each": True}])
    assert len(problems) == 1 and problems[0].startswith("flashinfer_jit_modules: ") and says in problems[0]
    assert "use sampling, cascade, norm" in problems[0]


def test_each_wants_a_list() -> None:
    assert input_problems([{"var": "flashinfer_jit_modules", "value": "sampling", "kind": "jit_module", "each": True}]) == [
        "flashinfer_jit_modules=sampling: give a list"]


ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles")


def spec_and_defaults(role: str) -> t.Tuple[t.Dict[str, t.Any], t.Dict[str, t.Any]]:
    with open(os.path.join(ROLES, role, "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    with open(os.path.join(ROLES, role, "defaults", "main.yml")) as handle:
        return options, yaml.safe_load(handle)


def spec_errors(values: t.Dict[str, t.Any], options: t.Dict[str, t.Any]) -> t.List[str]:
    """What Ansible's check at a role's entry point says of these values (the validator it runs there)."""
    return list(ArgumentSpecValidator(options).validate(values, validate_role_argument_spec=True).error_messages)


@pytest.mark.parametrize("role", ["inferops", "cuda_toolkit", "cuda_env", "flashinfer", "jit_cache", "sglang_service"])
def test_every_role_default_fits_its_own_argument_spec(role: str) -> None:
    options, defaults = spec_and_defaults(role)
    assert spec_errors(defaults, options) == []


@pytest.mark.parametrize(("change", "expected"), [
    ({"sglang_service_active": 5}, "sglang_service_active"),
    ({"sglang_service_active": ["sglang-xx"]}, "sglang_service_active"),
    ({"sglang_service_ar": "demo"}, "sglang_service_ar"),
    ({"sglang_service_ar": {"port": "http"}}, "port"),
    ({"sglang_service_ar": {"no_such_key": 1}}, "no_such_key"),
    ({"sglang_service_force_restart": "maybe"}, "sglang_service_force_restart"),
])
def test_the_spec_refuses_a_wrong_type_or_choice_naming_the_variable(change: t.Dict[str, t.Any], expected: str) -> None:
    """The types and choices the input checks no longer repeat (tasks/validate.yml): Ansible's check refuses them."""
    options, defaults = spec_and_defaults("sglang_service")
    errors = spec_errors(dict(defaults, **change), options)
    assert errors, change
    assert any(expected in error for error in errors), errors


@pytest.mark.parametrize(("role", "change", "expected"), [
    ("flashinfer", {"flashinfer_strategy": "fix"}, "flashinfer_strategy must be one of: pin, upgrade, patch, got: fix"),
    ("flashinfer", {"flashinfer_patch_state": "gone"}, "flashinfer_patch_state must be one of: present, absent"),
    ("flashinfer", {"flashinfer_jit_derive": "maybe"}, "flashinfer_jit_derive"),
    ("cuda_toolkit", {"cuda_toolkit_method": "yum"}, "cuda_toolkit_method must be one of: apt, pip"),
    ("cuda_toolkit", {"cuda_toolkit_apt_hold": "maybe"}, "argument 'cuda_toolkit_apt_hold' is of type str and we were unable to convert to bool"),
    ("cuda_env", {"cuda_env_ld_library_path": "maybe"}, "cuda_env_ld_library_path"),
])
def test_the_choices_and_booleans_the_checks_left_to_the_spec(role: str, change: t.Dict[str, t.Any], expected: str) -> None:
    options, defaults = spec_and_defaults(role)
    errors = spec_errors(dict(defaults, **change), options)
    assert any(expected in error for error in errors), errors


def test_a_lazy_list_is_named_as_yaml_names_it() -> None:
    assert one("jit_cache_store_dir", ["a"], "path") == ["jit_cache_store_dir=['a']: give a string, not a list"]


@pytest.mark.parametrize("value", ["http://10.213.0.1:8089/", "https://store.example.internal/jit", "http://s3.example:9000/bucket/x"])
def test_url_accepts_a_store_s_base_url(value: str) -> None:
    assert one("jit_cache_store_url", value, "url") == []


@pytest.mark.parametrize("value", ["ftp://x/", "http://user:pw@x/", "http://x/a b", "http://x/?q=1", "http://x/\n", "x"])
def test_url_refuses_other_schemes_credentials_queries_and_spaces(value: str) -> None:
    problems = one("jit_cache_store_url", value, "url")
    assert len(problems) == 1 and problems[0].startswith("jit_cache_store_url=")


_DIGEST = "ab" * 32


@pytest.mark.parametrize("value", [{}, {"nvidia-cuda-nvcc==13.0.88": [_DIGEST]}, {"a==1": [_DIGEST, "0" * 64]}])
def test_sha256_map_accepts_pins_with_lists_of_digests(value: t.Any) -> None:
    assert input_problems([{"var": "cuda_toolkit_pip_hashes", "value": value, "kind": "sha256_map"}]) == []


@pytest.mark.parametrize("value", [
    "x", [_DIGEST], {"a==1": _DIGEST}, {"a==1": []}, {"a==1": ["abc"]}, {"a==1": [_DIGEST.upper()]},
    {"a==1": [_DIGEST + "\n"]}, {"a==1": [64]},
])
def test_sha256_map_refuses_anything_else_naming_the_variable_and_the_form(value: t.Any) -> None:
    problems = input_problems([{"var": "cuda_toolkit_pip_hashes", "value": value, "kind": "sha256_map"}])
    assert len(problems) == 1
    assert problems[0].startswith("cuda_toolkit_pip_hashes")
    assert 'give {"name==version": ["<sha256>", ...]}, each digest 64 lower-case hex digits' in problems[0]


def test_pip_hash_requirements_pins_each_wheel_to_its_digests() -> None:
    """One requirements text for cuda_toolkit's wheels and flashinfer's upgrade: pins in order, every digest of each, a
    pin without digests bare (pip then refuses the set: the input checks name it first)."""
    text = inputs.pip_hash_requirements(["a==1", "b==2", "c==3"], {"a==1": ["aa", "ab"], "b==2": ["bb"], "x==9": ["xx"]})
    assert text == "a==1 --hash=sha256:aa --hash=sha256:ab\nb==2 --hash=sha256:bb\nc==3\n"
    assert inputs.pip_hash_requirements([], {"a==1": ["aa"]}) == ""
    assert inputs.FilterModule().filters()["pip_hash_requirements"] is inputs.pip_hash_requirements
