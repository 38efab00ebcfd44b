# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab fleet's pieces (LAB TOOLING, test equipment only), driven by ../labctl.py: common (paths, commands, locks,
mounts, the bridge), images (the base and stack layers), mirror (wheelhouse, apt repository, build store server), nodes."""
