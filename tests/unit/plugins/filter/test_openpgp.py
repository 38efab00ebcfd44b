# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""openpgp_fingerprints: the fingerprints gpg itself prints, for keys gpg makes here (RSA and Ed25519)."""

from __future__ import annotations

import base64
import pathlib
import subprocess
import typing as t

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.inferops.blackwell.plugins.filter.openpgp import openpgp_fingerprints


def _gpg(home: pathlib.Path, *args: str) -> str:
    return subprocess.run(["gpg", "--batch", "--quiet", "--homedir", str(home), *args],
                          check=True, capture_output=True, text=True).stdout


def _key(tmp_path: pathlib.Path, name: str, algorithm: str) -> t.Tuple[str, str]:
    """An armored public key made by gpg, and its fingerprint as gpg prints it."""
    home = tmp_path / name
    home.mkdir(mode=0o700)
    _gpg(home, "--passphrase", "", "--quick-gen-key", "%s <%s@inferops.invalid>" % (name, name), algorithm, "sign", "never")
    fingerprint = next(line.split(":")[9] for line in _gpg(home, "--with-colons", "--fingerprint").splitlines()
                       if line.startswith("fpr:"))
    return _gpg(home, "--armor", "--export"), fingerprint


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> t.Dict[str, t.Tuple[str, str]]:
    base = tmp_path_factory.mktemp("gpg")
    return {name: _key(base, name, algorithm) for name, algorithm in (("rsa", "rsa2048"), ("ed", "ed25519"))}


@pytest.mark.parametrize("name", ["rsa", "ed"])
def test_the_fingerprint_is_the_one_gpg_prints(keys: t.Dict[str, t.Tuple[str, str]], name: str) -> None:
    armored, fingerprint = keys[name]
    assert openpgp_fingerprints(armored) == [fingerprint]


def test_two_keys_in_one_block_give_both_in_order(keys: t.Dict[str, t.Tuple[str, str]]) -> None:
    packets = b"".join(_binary(keys[name][0]) for name in ("rsa", "ed"))
    assert openpgp_fingerprints(_armor(packets)) == [keys["rsa"][1], keys["ed"][1]]


def test_a_new_format_packet_header_gives_the_same_fingerprint(keys: t.Dict[str, t.Tuple[str, str]]) -> None:
    for name in ("rsa", "ed"):
        data = _binary(keys[name][0])
        # gpg writes the key packet with an old-format header (tag 6, one or two length octets); rewrite it in the new
        assert data[0] & 0xC0 == 0x80 and (data[0] >> 2) & 0x0F == 6
        size = 1 << (data[0] & 0x03)
        length = int.from_bytes(data[1:1 + size], "big")
        new = bytes([length]) if length < 192 else bytes([((length - 192) >> 8) + 192, (length - 192) & 0xFF])
        rewritten = bytes([0xC6]) + new + data[1 + size:]
        assert openpgp_fingerprints(_armor(rewritten)) == [keys[name][1]]


def test_a_changed_key_has_another_fingerprint(keys: t.Dict[str, t.Tuple[str, str]]) -> None:
    data = bytearray(_binary(keys["ed"][0]))
    data[-1] ^= 0x01
    assert openpgp_fingerprints(_armor(bytes(data))) == [keys["ed"][1]]  # the last byte is in a signature packet
    data = bytearray(_binary(keys["ed"][0]))
    data[10] ^= 0x01  # inside the key packet itself
    assert openpgp_fingerprints(_armor(bytes(data))) != [keys["ed"][1]]


@pytest.mark.parametrize("text", ["", "not a key", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n-----END PGP PUBLIC KEY BLOCK-----\n"])
def test_what_is_not_a_key_block_is_an_error(text: str) -> None:
    with pytest.raises(AnsibleFilterError):
        openpgp_fingerprints(text)


def test_a_truncated_block_is_an_error(keys: t.Dict[str, t.Tuple[str, str]]) -> None:
    with pytest.raises(AnsibleFilterError, match="truncated"):
        openpgp_fingerprints(_armor(_binary(keys["rsa"][0])[:100]))


def _binary(armored: str) -> bytes:
    lines = armored.strip().splitlines()
    body = lines[lines.index("") + 1:-1]
    return base64.b64decode("".join(line for line in body if not line.startswith("=")))


def _armor(data: bytes) -> str:
    text = base64.b64encode(data).decode()
    return ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + "\n".join(text[i:i + 64] for i in range(0, len(text), 64))
            + "\n-----END PGP PUBLIC KEY BLOCK-----\n")
