# -*- coding: utf-8 -*-
# Copyright: inferops.blackwell contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fingerprints of the primary keys in an ASCII-armored OpenPGP public key block (RFC 4880 version 4 keys)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import typing as t

from ansible.errors import AnsibleFilterError

_PUBLIC_KEY_TAG = 6


def _dearmor(armored: str) -> bytes:
    """The binary packets of the first armored block: its body after the header lines, without the checksum."""
    lines = armored.replace("\r", "").split("\n")
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"))
        end = next(i for i, line in enumerate(lines) if i > start and line.startswith("-----END PGP PUBLIC KEY BLOCK-----"))
    except StopIteration:
        raise AnsibleFilterError("openpgp_fingerprints: no ASCII-armored public key block") from None
    body = lines[start + 1:end]
    # armor headers (Version:, Comment:) end at the first empty line
    if "" in body:
        body = body[body.index("") + 1:]
    data = "".join(line.strip() for line in body if not line.startswith("="))
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise AnsibleFilterError("openpgp_fingerprints: the armored block is not base64: %s" % error) from None


def _packets(data: bytes) -> t.Iterator[t.Tuple[int, bytes]]:
    """(tag, body) of each packet, in both header formats."""
    position = 0
    while position < len(data):
        header = data[position]
        if not header & 0x80:
            raise AnsibleFilterError("openpgp_fingerprints: not an OpenPGP packet at byte %d" % position)
        if header & 0x40:  # new format: tag in 6 bits, 1-, 2- or 5-octet length
            tag = header & 0x3F
            first = data[position + 1]
            if first < 192:
                length, position = first, position + 2
            elif first < 224:
                length, position = ((first - 192) << 8) + data[position + 2] + 192, position + 3
            elif first == 255:
                length, position = int.from_bytes(data[position + 2:position + 6], "big"), position + 6
            else:
                raise AnsibleFilterError("openpgp_fingerprints: partial body lengths are not a public key")
        else:  # old format: tag in 4 bits, length type in 2
            tag, length_type = (header >> 2) & 0x0F, header & 0x03
            if length_type == 3:
                raise AnsibleFilterError("openpgp_fingerprints: indeterminate packet length")
            size = 1 << length_type
            length = int.from_bytes(data[position + 1:position + 1 + size], "big")
            position += 1 + size
        body = data[position:position + length]
        if len(body) != length:
            raise AnsibleFilterError("openpgp_fingerprints: the key block is truncated")
        yield tag, body
        position += length


def openpgp_fingerprints(armored: str) -> t.List[str]:
    """Upper-case hex fingerprints of the version 4 primary keys in the block, in order (subkeys are not listed)."""
    if not isinstance(armored, str):
        raise AnsibleFilterError("openpgp_fingerprints expects the armored key as a string")
    found = []
    for tag, body in _packets(_dearmor(armored)):
        if tag == _PUBLIC_KEY_TAG and body[:1] == b"\x04":
            # RFC 4880 12.2: a version 4 fingerprint is the SHA-1 of 0x99, the packet length (two octets) and the packet
            found.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
    return found


class FilterModule:
    """OpenPGP key fingerprints."""

    def filters(self) -> t.Dict[str, t.Callable[..., t.Any]]:
        return {"openpgp_fingerprints": openpgp_fingerprints}
