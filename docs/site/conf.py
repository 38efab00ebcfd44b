# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sphinx configuration of the docs site `make docs` builds (tools/docs_site.py copies it beside the pages)."""

from __future__ import annotations

project = "inferops.blackwell"
author = "inferops maintainers"
copyright = "inferops.blackwell contributors, GPL-3.0-or-later"  # pylint: disable=redefined-builtin  # Sphinx reads this name

# antsibull-docs' directives for the plugin and role pages; MyST for the user guide (the README and docs/*.md as written)
extensions = ["sphinx_antsibull_ext", "myst_parser", "sphinx.ext.intersphinx"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
myst_heading_anchors = 3

# The labels antsibull-docs' pages point at in Ansible's own documentation (common return values, configuration
# settings, ...), resolved from a small inventory tools/docs_site.py writes: the build needs no network.
intersphinx_mapping = {"ansible_devel": ("https://docs.ansible.com/projects/ansible/devel/", "ansible_devel.inv")}

pygments_style = "ansible"
highlight_language = "YAML+Jinja"
html_theme = "sphinx_ansible_theme"
html_title = "inferops.blackwell"
html_show_sphinx = False
html_copy_source = False
html_use_index = False
default_role = "any"
nitpicky = True
