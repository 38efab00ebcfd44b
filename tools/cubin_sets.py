# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node tool's kernel-set check (inferops_flashinfer_venv.trtllm_cubins) against the real public pair: FlashInfer
0.6.12 and its flashinfer-cubin wheel (and 0.6.13's wheel), in a scratch venv on this machine, with the sha256 the
flashinfer role knows. Not part of make test (the wheels are 450 MB each; the lab has no 0.6.12 stack yet); run by hand:

    .venv/bin/python tools/cubin_sets.py [DIR]   (default: a new directory under /var/tmp; about 2 GB)

Cases, each with the outcome expected from FlashInfer's own code and pins:
  whole      flashinfer-cubin 0.6.12 installed by hash            -> verified (source: the package)
  tampered   one kernel file altered                              -> "tampered"
  incomplete one kernel file removed                              -> "incomplete"
  foreign    its checksums.txt altered                            -> "foreign" (not the sha256 0.6.12 pins)
  directory  0.6.13's set through FLASHINFER_CUBIN_DIR            -> verified (0.6.12 and 0.6.13 pin the same FMHA set)
  mismatched flashinfer-cubin 0.6.13 beside FlashInfer 0.6.12     -> FlashInfer's import refuses
Exits 1 when an outcome differs from the expected one."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import typing as t
import zipfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FILES = os.path.join(ROOT, "roles", "inferops", "files")  # the venv side (the inferops role's file)
# what `import flashinfer` needs on a CPU (torch's CPU build comes from this kind of machine's pip find-links)
DEPS = ["torch==2.13.0", "numpy", "filelock", "fsspec", "jinja2", "markupsafe", "mpmath", "networkx", "sympy",
        "typing_extensions", "packaging", "requests", "tqdm", "click", "tabulate", "einops", "apache-tvm-ffi",
        "nvidia-ml-py", "certifi", "charset-normalizer", "cuda-bindings", "cuda-pathfinder", "cuda-python", "idna", "urllib3"]
PROBE = "import json, sys; sys.path.insert(0, %r); import inferops_flashinfer_venv as v; print(json.dumps(v.trtllm_cubins()))" % FILES


def known_hashes() -> t.Dict[str, t.List[str]]:
    with open(os.path.join(ROOT, "roles", "flashinfer", "vars", "main.yml")) as handle:
        return yaml.safe_load(handle)["_flashinfer_pip_known_hashes"]


def pip(venv: str, *args: str, stdin: t.Optional[str] = None) -> None:
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", *args],
                   input=stdin, text=True, check=True)


def probe(venv: str, env: t.Optional[t.Dict[str, str]] = None) -> t.Dict[str, t.Any]:
    done = subprocess.run([os.path.join(venv, "bin", "python"), "-c", PROBE], capture_output=True, text=True, check=False,
                          env=dict(os.environ, **(env or {})), cwd="/")
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="inferops-cubin-sets.", dir="/var/tmp")
    venv, wheels = os.path.join(work, "venv"), os.path.join(work, "wheels")
    os.makedirs(wheels, exist_ok=True)
    hashes = known_hashes()
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip(venv, "--no-deps", *DEPS, "flashinfer-python==0.6.12")
    for pin in ("flashinfer-cubin==0.6.12", "flashinfer-cubin==0.6.13"):
        subprocess.run([os.path.join(venv, "bin", "pip"), "download", "--quiet", "--no-deps", "--dest", wheels, pin], check=True)
    hashed = "".join("%s --hash=sha256:%s\n" % (pin, hashes[pin][0]) for pin in ["flashinfer-cubin==0.6.12"])
    pip(venv, "--no-deps", "--require-hashes", "--no-index", "--find-links", wheels, "--requirement", "/dev/stdin", stdin=hashed)
    site = subprocess.run([os.path.join(venv, "bin", "python"), "-c", "import flashinfer_cubin; print(flashinfer_cubin.get_cubin_dir())"],
                          capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    first = probe(venv)
    directory = os.path.join(site, first.get("set", ""))
    kernel = sorted(name for name in os.listdir(directory) if name.endswith(".cubin"))[0]
    results: t.List[t.Tuple[str, str, bool]] = []

    def case(name: str, found: t.Dict[str, t.Any], expected: str) -> None:
        said = found.get("error") or ("verified from %s, %s files" % (found["source"], found["files"]) if found.get("verified")
                                      else found.get("problem") or "?")
        results.append((name, said[:150], said.startswith(expected)))

    case("whole", first, "verified from flashinfer-cubin 0.6.12")
    path = os.path.join(directory, kernel)
    shutil.copy(path, path + ".orig")
    with open(path, "r+b") as handle:
        handle.seek(100)
        handle.write(b"X")
    case("tampered", probe(venv), "tampered: 1 file(s)")
    os.replace(path + ".orig", path)
    os.replace(path, path + ".away")
    case("incomplete", probe(venv), "incomplete: 1 of the")
    os.replace(path + ".away", path)
    manifest = os.path.join(directory, "checksums.txt")
    shutil.copy(manifest, manifest + ".orig")
    with open(manifest, "a") as handle:
        handle.write("%s  extra.cubin\n" % ("0" * 64))
    case("foreign", probe(venv), "foreign: ")
    os.replace(manifest + ".orig", manifest)
    case("whole again", probe(venv), "verified from flashinfer-cubin 0.6.12")
    other = os.path.join(work, "set-0.6.13")
    with zipfile.ZipFile(os.path.join(wheels, "flashinfer_cubin-0.6.13-py3-none-any.whl")) as wheel:
        wheel.extractall(other, [name for name in wheel.namelist() if name.startswith("flashinfer_cubin/cubins/")])
    subprocess.run([os.path.join(venv, "bin", "pip"), "uninstall", "--quiet", "--yes", "flashinfer-cubin"], check=True)
    case("directory", probe(venv, {"FLASHINFER_CUBIN_DIR": os.path.join(other, "flashinfer_cubin", "cubins")}),
         "verified from FLASHINFER_CUBIN_DIR")
    pip(venv, "--no-deps", "--no-index", "--find-links", wheels, "flashinfer-cubin==0.6.13")
    case("mismatched", probe(venv), "RuntimeError: flashinfer-cubin version (0.6.13) does not match flashinfer version (0.6.12)")
    for name, said, good in results:
        print("%-12s %-4s %s" % (name, "ok" if good else "FAIL", said))
    print("cubin-sets: %d of %d cases as expected (in %s)" % (sum(good for _n, _s, good in results), len(results), work))
    return 0 if all(good for _n, _s, good in results) else 1


if __name__ == "__main__":
    sys.exit(main())
