# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the version galaxy.yml gives means what it says (`make release-check` runs it first).

A changelog fragment (changelogs/fragments/*.yml) that no release in changelogs/changelog.yaml lists is a change not in
any release. While such a fragment exists, galaxy.yml must name a version that is not released yet: otherwise a tarball
built from this tree calls itself that release without being it (its CHANGELOG.rst lacks the changes, and installing it
over the release says "Nothing to do"). galaxy.yml's version may not be older than the newest release either.

    python tools/release_versions.py [ROOT]

Prints what it found; exit 1 with the fix when the version does not mean what it says.
"""

from __future__ import annotations

import os
import sys
import typing as t

import yaml


def key(version: str) -> t.Tuple[int, ...]:
    """A release version (X.Y.Z) as numbers, for ordering."""
    return tuple(int(part) for part in version.split("."))


def problems(root: str) -> t.Tuple[t.List[str], str]:
    """What is wrong with galaxy.yml's version against the changelog and its fragments, and a summary line."""
    with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as handle:
        version = str(yaml.safe_load(handle)["version"])
    with open(os.path.join(root, "changelogs", "changelog.yaml"), encoding="utf-8") as handle:
        releases: t.Dict[str, t.Any] = (yaml.safe_load(handle) or {}).get("releases") or {}
    released = {fragment for release in releases.values() for fragment in (release or {}).get("fragments") or []}
    directory = os.path.join(root, "changelogs", "fragments")
    fragments = sorted(name for name in os.listdir(directory) if name.endswith((".yml", ".yaml"))) if os.path.isdir(directory) else []
    unreleased = [name for name in fragments if name not in released]
    newest = max(releases, key=key) if releases else None
    found: t.List[str] = []
    if newest and key(version) < key(newest):
        found.append("galaxy.yml says version %s, older than the newest release in changelogs/changelog.yaml (%s): set it "
                     "to %s or later" % (version, newest, newest))
    if unreleased and str(version) in releases:
        found.append("galaxy.yml says version %s, which changelogs/changelog.yaml lists as released, but %d changelog "
                     "fragment(s) are in no release: %s. A tarball built now would call itself %s without being it. Fix: "
                     "set galaxy.yml's version to the next one (a breaking change raises the minor version before 1.0.0, "
                     "the major one after), and at release time run `antsibull-changelog release --version <it>`"
                     % (version, len(unreleased), ", ".join(unreleased), version))
    summary = "galaxy.yml version %s; newest release %s; %d unreleased fragment(s)" % (version, newest or "none", len(unreleased))
    return found, summary


def main(argv: t.Optional[t.List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = args[0] if args else os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    found, summary = problems(root)
    print("release-versions: " + summary)
    for problem in found:
        print("release-versions: " + problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
