# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for the get-pip bootstrap script that `ansible-test --venv` downloads.

ansible-test fetches get-pip.py from a host these machines cannot reach, and first
looks for a cached copy at ~/.ansible/test/cache/get_pip_<version>.py. The Makefile
puts this file there, beside the pip wheel of that version (downloaded from PyPI),
so ansible-test bootstraps pip from the wheel instead.
"""

from __future__ import annotations

import glob
import os
import sys


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    version = os.path.splitext(os.path.basename(__file__))[0].replace("get_pip_", "").replace("_", ".")
    wheels = glob.glob(os.path.join(here, "pip-%s-py3-none-any.whl" % version))
    if not wheels:
        sys.stderr.write("get_pip_offline: no pip-%s wheel beside %s; run `make venv`\n" % (version, __file__))
        return 1
    sys.path.insert(0, wheels[0])
    from pip._internal.cli.main import main as pip_main  # noqa: PLC0415 -- the wheel is on sys.path only now

    # get-pip.py's own switches; pip install does not know them.
    args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
    return pip_main(["install", "--upgrade", "--force-reinstall"] + args)


if __name__ == "__main__":
    sys.exit(main())
