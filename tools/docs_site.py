# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the docs site (`make docs`): the collection's plugin and role pages by antsibull-docs, from their own
documentation (DOCUMENTATION blocks, meta/argument_specs.yml), and the user guide -- the README and the operator pages
of docs/ as written -- by Sphinx with MyST, into .build/docs/html. Warnings fail the build.

Links the guide makes to files the site does not hold (the lab and development pages, playbooks, LICENSE) point at the
source repository (galaxy.yml's repository); a link to a role's README points at the role's page.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import typing as t
import zlib

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# the operator pages of docs/, beside the README (lab.md, development.md and testing.md are the source repository's)
GUIDE = ["README.md", "docs/operations.md", "docs/roles.md", "docs/readiness.md", "docs/security.md", "docs/warm-set.md"]
# Ansible's own documentation, for the labels antsibull-docs' pages refer to: (label, page#anchor, title)
ANSIBLE_LABELS = [
    ("common_return_values", "reference_appendices/common_return_values.html#common-return-values", "Return Values"),
    ("ansible_configuration_settings", "reference_appendices/config.html#ansible-configuration-settings",
     "Ansible Configuration Settings"),
    ("action_plugins", "plugins/action.html#action-plugins", "Action plugins"),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def inventory(path: str) -> None:
    """A Sphinx inventory (format 2) of ANSIBLE_LABELS, so intersphinx resolves them without the network."""
    body = "".join("%s std:label -1 %s %s\n" % entry for entry in ANSIBLE_LABELS)
    with open(path, "wb") as handle:
        handle.write(b"# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
                     b"# The remainder of this file is compressed using zlib.\n")
        handle.write(zlib.compress(body.encode()))


def relink(page: str, text: str, repository: str) -> str:
    """The guide page's relative links: kept where the site holds the target, else the role's page or the repository."""
    here = os.path.dirname(page)

    def one(match: t.Match[str]) -> str:
        target = match.group(1)
        if re.match(r"^[a-z]+:|^#", target):
            return match.group(0)
        path, anchor = (target.split("#", 1) + [""])[:2]
        resolved = os.path.normpath(os.path.join(here, path))
        if resolved in GUIDE:
            return match.group(0)
        role = re.match(r"^roles/([a-z_]+)/README\.md$", resolved)
        if role:
            page_path = os.path.relpath("collections/inferops/blackwell/%s_role.rst" % role.group(1), here or ".")
            return "](%s)" % page_path
        return "](%s/blob/main/%s%s)" % (repository, resolved, "#" + anchor if anchor else "")

    return LINK.sub(one, text)


def main() -> int:
    dest = os.path.join(ROOT, ".build", "docs")
    src = os.path.join(dest, "src")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(src)
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        repository = yaml.safe_load(handle)["repository"]
    # antsibull-docs reads the collection as Ansible finds it (ANSIBLE_COLLECTIONS_PATH: the Makefile's link to this tree)
    subprocess.run(["antsibull-docs", "collection", "--use-current", "--fail-on-error", "--dest-dir", src,
                    "inferops.blackwell"], check=True)
    shutil.copy(os.path.join(ROOT, "docs", "site", "conf.py"), src)
    inventory(os.path.join(src, "ansible_devel.inv"))
    for page in GUIDE:
        with open(os.path.join(ROOT, page)) as handle:
            text = handle.read()
        os.makedirs(os.path.dirname(os.path.join(src, page)) or src, exist_ok=True)
        with open(os.path.join(src, page), "w") as handle:
            handle.write(relink(page, text, repository))
    with open(os.path.join(src, "index.md"), "w") as handle:
        handle.write("# inferops.blackwell\n\n```{toctree}\n:maxdepth: 2\n:caption: User guide\n\n%s\n```\n\n"
                     "```{toctree}\n:maxdepth: 2\n:caption: Reference\n\ncollections/index\n```\n"
                     % "\n".join(page[:-3] for page in GUIDE))
    subprocess.run(["sphinx-build", "-W", "--keep-going", "-q", "-b", "html", src, os.path.join(dest, "html")], check=True)
    print("docs site: %s" % os.path.relpath(os.path.join(dest, "html", "index.html"), ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
