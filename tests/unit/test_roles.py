# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role: defaults and argument_specs say the same, variables carry the role's prefix, the README is current;
the shipped ansible.cfg files."""

from __future__ import annotations

import configparser
import json
import os
import re
import sys
import typing as t

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import role_docs  # noqa: E402 -- tools/role_docs.py

ROLES = role_docs.roles()


def test_the_roles_exist() -> None:
    assert {"cuda_toolkit", "cuda_env"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_have_the_same_keys_and_defaults(role: str) -> None:
    defaults = role_docs.load(role, "defaults/main.yml")
    options = role_docs.load(role, "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert options[name].get("default") == value, name
        assert options[name].get("description"), name


@pytest.mark.parametrize("role", ROLES)
def test_a_dict_variable_documents_the_defaults_of_its_sub_options(role: str) -> None:
    """A dict with sub-options (sglang_service_ar / _spec): its default is exactly its sub-options' defaults, the base
    the role lays an operator's keys over (vars/main.yml takes it from the sub-options), so the two cannot drift."""
    options = role_docs.load(role, "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, option in options.items():
        if option.get("type") == "dict" and option.get("options"):
            assert option["default"] == {key: sub.get("default") for key, sub in option["options"].items()}, name


def test_the_speculative_service_shares_the_autoregressive_settings() -> None:
    options = role_docs.load("sglang_service", "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    ar, spec = options["sglang_service_ar"]["options"], options["sglang_service_spec"]["options"]
    assert {key: value for key, value in spec.items() if key in ar and key != "port"} == {key: value for key, value in ar.items() if key != "port"}
    assert (ar["port"]["default"], spec["port"]["default"]) == (30000, 30001)
    assert set(spec) - set(ar) == {"speculative_algorithm", "draft_model_path", "num_steps", "eagle_topk", "num_draft_tokens", "dflash_block_size"}


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix_and_internals_an_underscore(role: str) -> None:
    assert [name for name in role_docs.load(role, "defaults/main.yml") if not name.startswith(role + "_")] == []
    internals = (role_docs.load(role, "vars/main.yml") or {}) if os.path.exists(os.path.join(ROOT, "roles", role, "vars", "main.yml")) else {}
    assert [name for name in internals if not name.startswith("_" + role + "_")] == []


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_descriptions_hold_no_jinja(role: str) -> None:
    # Ansible templates the spec when it validates a role's arguments (include_role in playbooks/remediate.yml): an
    # example such as "{{ vault_hf_token }}" in a description failed there with "'vault_hf_token' is undefined".
    def descriptions(node: t.Any) -> t.Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("description", "short_description"):
                    yield from [value] if isinstance(value, str) else value
                else:
                    yield from descriptions(value)
        elif isinstance(node, list):
            for value in node:
                yield from descriptions(value)

    texts = list(descriptions(role_docs.load(role, "meta/argument_specs.yml")))
    assert texts and [text for text in texts if "{{" in text or "{%" in text] == []


def test_readme_role_sections_are_generated_from_argument_specs() -> None:
    with open(os.path.join(ROOT, "README.md")) as handle:
        readme = handle.read()
    assert role_docs.BEGIN in readme, "README.md lacks the generated role sections"
    assert role_docs.rewrite(readme) == readme, "README.md role sections are stale: run `make docs`"


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_is_generated_from_its_argument_spec(role: str) -> None:
    """Galaxy's importer requires a README per role; it is role_docs.py's rendering of the role's argument spec."""
    path = os.path.join(ROOT, "roles", role, "README.md")
    assert os.path.exists(path), "roles/%s/README.md is missing: run `make docs`" % role
    with open(path) as handle:
        assert handle.read() == role_docs.role_readme(role), "roles/%s/README.md is stale: run `make docs`" % role


def test_role_readme_names_every_entry_point_and_variable() -> None:
    readme = role_docs.role_readme("sglang_service")
    assert readme.splitlines()[2] == "# inferops.blackwell.sglang_service"
    for entry in ("main", "validate", "configure", "start", "diagnose"):
        assert "- `%s`: " % entry in readme
    assert "| `sglang_service_active` |" in readme


def test_rendered_section_lists_every_variable() -> None:
    section: t.List[str] = role_docs.render_role("cuda_env").splitlines()
    assert section[0] == "# inferops.blackwell.cuda_env"
    assert any(line.startswith("| `cuda_env_cuda_home` | path | `/usr/local/cuda-13.0` |") for line in section)


@pytest.mark.parametrize("path", ["ansible.cfg", "inventories/production.example/ansible.cfg"])
def test_shipped_ansible_cfgs_pipeline_and_keep_one_ssh_connection_per_node(path: str) -> None:
    """Issue 15's cheap no-op run: one SSH round trip per task, one handshake per node per run."""
    parser = configparser.ConfigParser()
    assert parser.read(os.path.join(ROOT, path)) == [os.path.join(ROOT, path)]
    assert parser.getboolean("ssh_connection", "pipelining")
    ssh_args = parser.get("ssh_connection", "ssh_args")
    assert "ControlMaster=auto" in ssh_args and "ControlPersist=60s" in ssh_args
    assert parser.getint("defaults", "forks") >= 20


def test_role_docs_render_doc_markup_as_markdown() -> None:
    """role_docs.py renders Ansible's doc markup through antsibull-docs-parser: code, options, values and variables in
    backticks, italics in stars, paragraphs on one line."""
    assert role_docs.plain(["Writes C(x.env) for O(inferops_env_file=/etc/a) and I(every) E(CUDA_HOME), V(true).", "Next."]) == (
        "Writes `x.env` for `inferops_env_file=/etc/a` and *every* `CUDA_HOME`, `true`. Next.")


def test_role_docs_refuse_broken_markup() -> None:
    """Markup the parser cannot read fails `make docs` instead of reaching the README as text."""
    with pytest.raises(ValueError, match="closing"):
        role_docs.plain("Writes C(unclosed")


def test_flashinfer_known_hashes_are_the_releases_the_docs_name() -> None:
    """The FlashInfer wheels whose sha256 the flashinfer role knows are the releases its argument spec and defaults name,
    each with one sha256 (64 lower-case hex digits)."""
    with open(os.path.join(ROOT, "roles", "flashinfer", "vars", "main.yml")) as handle:
        known = yaml.safe_load(handle)["_flashinfer_pip_known_hashes"]
    releases = [pin.split("==", 1)[1] for pin in known if pin.startswith("flashinfer-python==")]
    cubins = [pin.split("==", 1)[1] for pin in known if pin.startswith("flashinfer-cubin==")]
    assert len(releases) + len(cubins) == len(known) and releases and cubins
    assert all(len(digests) == 1 and re.fullmatch("[0-9a-f]{64}", digests[0]) for digests in known.values())
    spec = role_docs.load("flashinfer", "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    described = " ".join(spec["flashinfer_pip_hashes"]["description"])
    named = re.search(r"knows, of flashinfer-python ([0-9a-z., ]+?) \(.*?\), and of flashinfer-cubin ([0-9a-z., ]+?)[.] ", described)
    assert named, described
    assert re.split(r", and |, | and ", named.group(1)) == releases
    assert re.split(r", and |, | and ", named.group(2)) == cubins
    cubin_named = re.search(r"knows the sha256 of the wheels of ([0-9a-z., ]+?) \(", " ".join(spec["flashinfer_cubin"]["description"]))
    assert cubin_named and re.split(r", and |, | and ", cubin_named.group(1)) == cubins
    with open(os.path.join(ROOT, "roles", "flashinfer", "defaults", "main.yml")) as handle:
        defaults = handle.read()
    assert "flashinfer-python %s)" % ", ".join(releases) in defaults and "(known: %s;" % ", ".join(cubins) in defaults


def tags_in(node: t.Any) -> t.Iterator[str]:
    """Every tag set anywhere in a parsed task file (tasks, blocks, an include's apply)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "tags":
                yield from ([value] if isinstance(value, str) else value)
            else:
                yield from tags_in(value)
    elif isinstance(node, list):
        for item in node:
            yield from tags_in(item)


@pytest.mark.parametrize("role", sorted(os.listdir(os.path.join(ROOT, "roles"))))
def test_task_tags_carry_the_role_name(role: str) -> None:
    """Every tag a role's tasks set is `always`, the role's name or `<role>_<step>`, so `--tags <role>_prerequisites` and
    the like select that role's step (a tag once took a variable's name in a rename, and a `--tags` of it selected
    nothing)."""
    tasks = os.path.join(ROOT, "roles", role, "tasks")
    tags = set()
    for name in os.listdir(tasks):
        with open(os.path.join(tasks, name)) as handle:
            tags.update(tags_in(yaml.safe_load(handle)))
    assert tags, role
    assert sorted(tag for tag in tags if tag not in ("always", role) and not tag.startswith(role + "_")) == []


def wiring(name: str) -> t.Any:
    """A variable of playbooks/vars/roles.yml (the roles' wiring) as Ansible templates it."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    with open(os.path.join(ROOT, "playbooks", "vars", "roles.yml"), encoding="utf-8") as handle:
        wired = {key: trust_as_template(value) if isinstance(value, str) else value for key, value in yaml.safe_load(handle).items()}
    return Templar(loader=DataLoader(), variables=wired).template(wired[name])


def role_entries(node: t.Any) -> t.Iterator[t.Tuple[str, str]]:
    """(role, entry point) of every include_role / import_role under node; a role or entry point named by the loop
    variable (site_checks.yml's `inferops.blackwell.{{ _site_check[0] }}`) stands for each item of the task's loop, a
    list of playbooks/vars/roles.yml."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    if isinstance(node, list):
        for item in node:
            yield from role_entries(item)
        return
    if not isinstance(node, dict):
        return
    for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
        if key in node:
            name, entry = node[key]["name"], node[key].get("tasks_from", "main")
            loop = node.get("loop", [])
            if isinstance(loop, str):
                loop = wiring(loop.strip("{} "))
            loop_var = node.get("loop_control", {}).get("loop_var", "item")
            for item in loop if "{{" in name + entry else [None]:
                templar = Templar(loader=DataLoader(), variables={loop_var: item})
                one, step = (templar.template(trust_as_template(text)) for text in (name, entry))
                yield one.split(".")[-1], step
    for value in node.values():
        yield from role_entries(value)


def test_the_checks_run_each_role_s_validate_then_its_plan_in_the_roles_order() -> None:
    """playbooks/tasks/site_checks.yml's loop: a role's plan right after its own check, before the next role's check
    (cuda_env's check reads cuda_toolkit's plan)."""
    roles, planned = wiring("_site_roles"), wiring("_site_planned_roles")
    assert wiring("_site_checks") == [[role, entry] for role in roles for entry in ("validate", "plan")
                                      if entry == "validate" or role in planned]
    for role in planned:
        assert os.path.exists(os.path.join(ROOT, "roles", role, "tasks", "plan.yml")), role


def test_every_entry_point_a_play_or_role_uses_has_the_role_s_argument_spec() -> None:
    """Ansible checks a role's variables against the spec of the entry point it runs (types, choices, sub-options): the
    input checks (tasks/validate.yml) do not repeat them, so an entry point without a spec would check no types at all."""
    files = [os.path.join(ROOT, "playbooks", name) for name in os.listdir(os.path.join(ROOT, "playbooks")) if name.endswith(".yml")]
    files += [os.path.join(ROOT, "playbooks", "tasks", name) for name in os.listdir(os.path.join(ROOT, "playbooks", "tasks"))]
    entries = set()
    for path in files:
        with open(path) as handle:
            entries.update(role_entries(yaml.safe_load(handle)))
    assert {("sglang_service", "configure"), ("sglang_service", "start"), ("sglang_service", "diagnose"),
            ("cuda_toolkit", "validate"), ("inferops", "validate"), ("cuda_toolkit", "plan"), ("sglang_service", "plan"),
            ("cuda_env", "probe"), ("jit_cache", "main")} <= entries
    for role, entry in sorted(entries):
        specs = role_docs.load(role, "meta/argument_specs.yml")["argument_specs"]
        assert entry in specs, (role, entry)
        assert specs[entry]["options"] == specs["main"]["options"], (role, entry)


@pytest.mark.parametrize("role", sorted(os.listdir(os.path.join(ROOT, "roles"))))
def test_no_input_check_repeats_the_spec_s_choices_or_booleans(role: str) -> None:
    """A choice or a boolean of the argument spec is Ansible's to check at the entry point, not the role's again."""
    options = role_docs.load(role, "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    with open(os.path.join(ROOT, "roles", role, "tasks", "validate.yml")) as handle:
        text = handle.read()
    for name, option in options.items():
        if option.get("type") == "bool":
            assert not re.search(r"\b%s is boolean" % name, text), name
        for choice in option.get("choices", []):
            assert not re.search(r"\b%s (not )?in \[[^]]*'%s'" % (name, choice), text), name
    assert "argspec_problems" not in text and "_input_key" not in text


def test_the_services_settings_leave_sglang_s_choices_to_sglang() -> None:
    """Ansible checks the argument spec before the input checks run SGLang's own parser: a `choices` list for a setting
    SGLang parses (a backend, the speculative algorithm) would be our copy of SGLang's, refusing what a newer SGLang
    accepts and pre-empting SGLang's own message (bad-input case "a value SGLang rejects")."""
    options = role_docs.load("sglang_service", "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    for service in ("sglang_service_ar", "sglang_service_spec"):
        assert options[service]["options"]["attention_backend"]["type"] == "str"
        assert [name for name, option in options[service]["options"].items() if "choices" in option] == [], service


JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
BARE = ("when", "that", "until", "changed_when", "failed_when", "loop")
LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
# a name read: not an attribute (.x), not a subscript's key (['x']), not inside a string literal
READ = re.compile(r"(?<![\w.\]'\"])(_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+)")


def expressions(node: t.Any, key: str = "") -> t.Iterator[str]:
    """The Jinja a role's YAML evaluates: what is inside {{ }} and {% %}, and the bare conditions and loops."""
    if isinstance(node, dict):
        for name, value in node.items():
            yield from expressions(value, str(name))
    elif isinstance(node, list):
        for value in node:
            yield from expressions(value, key)
    elif isinstance(node, str):
        if key in BARE and "{{" not in node:
            yield node
        for match in JINJA.finditer(node):
            yield match.group(1) or match.group(2)


def names_read(base: str) -> t.Set[str]:
    """The variable names a role's tasks, handlers, vars, defaults and templates read, string literals left out (a message's
    'cuda_env_cuda_home=' is text, not a read) and attributes and keys too (a fact's ['flashinfer_arch_list'], a
    filter's inferops.blackwell.flashinfer_arch_check)."""
    found: t.Set[str] = set()
    for folder in ("tasks", "handlers", "vars", "defaults", "templates"):
        for directory, _subdirs, files in os.walk(os.path.join(base, folder)):
            for name in files:
                with open(os.path.join(directory, name)) as handle:
                    text = handle.read()
                chunks = [a or b for a, b in JINJA.findall(text)] if name.endswith(".j2") else list(expressions(yaml.safe_load(text)))
                for chunk in chunks:
                    found.update(READ.findall(LITERAL.sub("''", chunk)))
    return found


def foreign_reads(role: str, base: str) -> t.List[str]:
    others = [other for other in ROLES if other != role]
    return sorted(name for name in names_read(base)
                  if any(name.startswith(other + "_") or name.startswith("_" + other + "_") for other in others)
                  and not (name.startswith("inferops_") and role != "inferops"))


@pytest.mark.parametrize("role", ROLES)
def test_no_role_reads_another_role_s_variables_or_facts(role: str) -> None:
    """Issue 33: what a role needs of another arrives as its documented input (a playbook passes the other's published
    fact, as site.yml does); the only shared names are the common role's public inferops_* inputs and facts."""
    assert foreign_reads(role, os.path.join(ROOT, "roles", role)) == []


def test_the_reads_check_finds_what_this_issue_removed(tmp_path: t.Any) -> None:
    """The check above is not blind: sglang_service's old reads of cuda_env's fact and cuda_env's of cuda_toolkit's are
    found; a message's text, a fact's key and a filter's name are not."""
    (tmp_path / "vars").mkdir()
    (tmp_path / "tasks").mkdir()
    (tmp_path / "vars" / "main.yml").write_text(
        "_x_pinned: \"{{ (cuda_env_result.vars | default({})).keys() | list }}\"\n"
        "_x_msg: \"{{ 'cuda_env_cuda_home=' ~ f['flashinfer_arch_list'] | inferops.blackwell.flashinfer_arch_check }}\"\n")
    (tmp_path / "tasks" / "main.yml").write_text("- ansible.builtin.debug:\n    msg: x\n  when: cuda_toolkit_planned is defined\n")
    assert foreign_reads("sglang_service", str(tmp_path)) == ["cuda_env_result", "cuda_toolkit_planned"]


# What each role manages on a node, by the names only that role's own files may write (issue 50): its paths, units and
# packages. The converged record, rollback and drift report are built from what the roles publish (their result's
# `managed`), so no playbook and no other role restates them.
OWNED = {
    "cuda_toolkit": ("/etc/apt/preferences.d/inferops-cuda", ".inferops-toolkit.json", "/etc/alternatives/cuda", "cuda-toolkit-"),
    "flashinfer": ("site-packages/flashinfer", ".dist-info/RECORD"),
    "jit_cache": ("inferops-warm.json",),
    "sglang_service": ("/etc/systemd/system/", "inferops-readiness", "sglang-ar", "sglang-spec"),
}


def code_of(path: str) -> str:
    """A YAML or template file without its comment lines (a comment may name what another role manages)."""
    with open(path, encoding="utf-8") as handle:
        return "".join(line for line in handle if not line.lstrip().startswith(("#", "{#")))


def files_of(*bases: str) -> t.List[str]:
    return sorted(os.path.join(root, name) for base in bases for root, _dirs, names in os.walk(base) for name in names
                  if name.endswith((".yml", ".yaml", ".j2")))


def owned_elsewhere(role: str, playbooks: str, roles: str) -> t.List[t.Tuple[str, str]]:
    others = [os.path.join(roles, other) for other in sorted(os.listdir(roles)) if other != role]
    return [(os.path.relpath(path, os.path.dirname(playbooks)), name) for path in files_of(playbooks, *others)
            for name in OWNED[role] if name in code_of(path)]


@pytest.mark.parametrize("role", sorted(OWNED))
def test_what_a_role_manages_is_named_by_that_role_alone(role: str) -> None:
    own = "".join(code_of(path) for path in files_of(os.path.join(ROOT, "roles", role)))
    assert [name for name in OWNED[role] if name not in own] == []  # the list above is this role's
    assert owned_elsewhere(role, os.path.join(ROOT, "playbooks"), os.path.join(ROOT, "roles")) == []


def test_the_owned_names_check_finds_a_restated_path(tmp_path: t.Any) -> None:
    """Not blind: the converged record as playbooks/tasks/site_provision.yml wrote it before each role published what it
    manages is found; the same name in a comment is not."""
    (tmp_path / "playbooks" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "cuda_toolkit").mkdir(parents=True)
    (tmp_path / "playbooks" / "tasks" / "site_provision.yml").write_text(
        "# /etc/apt/preferences.d/inferops-cuda is cuda_toolkit's\n"
        "- inferops.blackwell.converged:\n    items:\n      - role: cuda_toolkit\n"
        "        paths: [/etc/apt/preferences.d/inferops-cuda]\n")
    assert owned_elsewhere("cuda_toolkit", str(tmp_path / "playbooks"), str(tmp_path / "roles")) == [
        ("playbooks/tasks/site_provision.yml", "/etc/apt/preferences.d/inferops-cuda")]


def tasks_of(node: t.Any) -> t.Iterator[t.Dict[str, t.Any]]:
    """Every task under node, those in blocks, rescues and always included."""
    if isinstance(node, list):
        for item in node:
            yield from tasks_of(item)
    elif isinstance(node, dict):
        if "block" in node:
            for key in ("block", "rescue", "always"):
                yield from tasks_of(node.get(key) or [])
        else:
            yield node


@pytest.mark.parametrize("role", sorted(os.listdir(os.path.join(ROOT, "roles"))))
def test_a_role_s_input_check_publishes_nothing_and_no_task_runs_the_node_tool_s_command(role: str) -> None:
    """validate.yml is pure (what a role plans is its plan.yml); the node tool's logic is reached through the
    collection's modules, never by running its command and parsing what it printed."""
    tasks = os.path.join(ROOT, "roles", role, "tasks")
    for name in sorted(os.listdir(tasks)):
        with open(os.path.join(tasks, name)) as handle:
            found = list(tasks_of(yaml.safe_load(handle)))
        if name == "validate.yml":
            assert [task["name"] for task in found if "ansible.builtin.set_fact" in task] == [], name
        for task in found:
            for module in ("ansible.builtin.command", "ansible.builtin.shell"):
                assert "inferops_tool" not in json.dumps(task.get(module, "")), (name, task["name"])
