# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- an SGLang stand-in for the inferops.blackwell lab (see launch_server.py)."""

__version__ = "0.0.0+inferops.lab.standin"
