# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""LAB TOOLING -- an HTTP build store for the lab nodes: GET serves a directory, PUT stores a file in it.

What jit_cache_store_url talks to in the lab (an operator's would be nginx with WebDAV, a WebDAV server or an object
store's HTTP gateway). Started by `labctl store-server --dir DIR` on the lab bridge only; nothing outside the lab
reaches it. A PUT writes to a temporary file and renames it into place, so a reader never sees half a file. Paths
are one or two plain names deep (a prefix directory and a file); anything else is refused.
"""

from __future__ import annotations

import argparse
import http.server
import os
import re
import sys
import tempfile
import typing as t

NAME = re.compile(r"[A-Za-z0-9._-]+")


class Handler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler's GET and HEAD, and a PUT that stores the body under the served directory."""

    def do_PUT(self) -> None:
        parts = [part for part in self.path.split("?", 1)[0].split("/") if part]
        if not parts or len(parts) > 2 or not all(NAME.fullmatch(part) and part not in (".", "..") for part in parts):
            self.send_error(400, "store path must be [prefix/]name of letters, digits, . _ -")
            return
        length = int(self.headers.get("Content-Length") or 0)
        base = str(getattr(self, "directory", os.getcwd()))
        folder = os.path.join(base, *parts[:-1])
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".put-")
        with os.fdopen(handle, "wb") as out:
            remaining = length
            while remaining > 0:
                block = self.rfile.read(min(remaining, 1 << 20))
                if not block:
                    break
                out.write(block)
                remaining -= len(block)
        if remaining:
            os.unlink(temporary)
            self.send_error(400, "body shorter than Content-Length")
            return
        os.chmod(temporary, 0o644)
        os.replace(temporary, os.path.join(folder, parts[-1]))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main(argv: t.List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)

    def handler(*handler_args: t.Any) -> Handler:
        return Handler(*handler_args, directory=args.dir)

    with http.server.ThreadingHTTPServer((args.bind, args.port), handler) as server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
