# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB SIMULATION -- replaces sglang/launch_server.py in the lab venv's real SGLang.

`python -m sglang.launch_server` runs the lab's stand-in server (inferops_lab_sglang): SGLang's
own argument parsing and resolution, a simulated model, FlashInfer modules loaded where SGLang loads them.
"""

import sys

from inferops_lab_sglang import main

if __name__ == "__main__":
    sys.exit(main())
