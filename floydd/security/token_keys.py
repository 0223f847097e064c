"""A personal token's signing key: how a box proves a person's token was presented to it.

A box may propose a change in a person's name only while that person is signed in on it
(:mod:`floydd.cluster.state.signin`). One way to be signed in is a personal token presented to the
box's TLS API. Every box checks that on apply, without trusting the box that proposed: the
token's secret deterministically derives an Ed25519 key pair (:func:`signing_key`), the
cluster records the public half when the token is made (``apitoken.create``'s
``public_key``), and the box that served the request signs the command with the private
half (:func:`sign_command`). Only a holder of the secret can sign; the replicated record
(a salted digest and a public key) lets nobody do so.

What is signed (:func:`command_message`): a domain string, the node id of the proposing box,
and the command in a canonical JSON form without the fields the leader stamps or that carry
the signature itself (``proposer``, ``term``, ``auth``). Binding the node id means a
signature made on one box cannot be replayed through another: every box verifies against
the proposer the leader stamped from the proposing box's certificate.

The derivation (HKDF-SHA256 over the secret, with the token id in its info) is fixed: a
token's key is the same on every box and release, so it needs no storage anywhere.

``cryptography`` is imported by the functions that sign or verify, when first called: the
replicated state imports this module, and a box whose log holds no signed command never needs
it (an idle box alone, issue 23).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["signing_key", "public_key_hex", "command_message", "sign_command", "verify_command",
           "UNSIGNED_FIELDS", "PUBLIC_KEY_HEX_LEN", "SIGNATURE_HEX_LEN"]

UNSIGNED_FIELDS = frozenset({"proposer", "term", "auth"})
"""Fields left out of what is signed: stamped by the leader, or the signature itself."""
PUBLIC_KEY_HEX_LEN = 64
SIGNATURE_HEX_LEN = 128
_KDF_INFO = b"floydd personal token signing key v1\x00"
_DOMAIN = b"floydd signed command v1\x00"


def signing_key(token_id: str, secret: str) -> Ed25519PrivateKey:
    """The Ed25519 key a personal token's secret derives (the same everywhere, every time)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_KDF_INFO + str(token_id).encode()).derive(str(secret).encode())
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key_hex(key: Ed25519PrivateKey) -> str:
    """What the cluster records of a token's key (64 hex digits)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def command_message(cmd: Mapping[str, Any], node_id: str) -> bytes:
    """The bytes signed for ``cmd`` proposed by box ``node_id`` (module docstring)."""
    body = {k: v for k, v in cmd.items() if k not in UNSIGNED_FIELDS}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return _DOMAIN + str(node_id).encode() + b"\x00" + text.encode("utf-8", "surrogatepass")


def sign_command(key: Ed25519PrivateKey, cmd: Mapping[str, Any], node_id: str) -> str:
    """The signature (128 hex digits) of ``cmd`` as box ``node_id`` proposes it."""
    return key.sign(command_message(cmd, node_id)).hex()


def verify_command(public_hex: str, cmd: Mapping[str, Any], node_id: str, signature_hex: str) -> bool:
    """Whether ``signature_hex`` is the token key's (``public_hex``) over ``cmd`` from ``node_id``;
    False for anything malformed (never raises)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        if len(public_hex) != PUBLIC_KEY_HEX_LEN or len(signature_hex) != SIGNATURE_HEX_LEN:
            return False
        public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex))
        public.verify(bytes.fromhex(signature_hex), command_message(cmd, node_id))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True
