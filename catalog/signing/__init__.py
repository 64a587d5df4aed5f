"""Signed catalog entries: in-toto Statement v1 in a DSSE envelope, Ed25519 (``cryptography``).

Flow::

    statement = build_statement(predicate, subjects_from_predicate(predicate))
    envelope = sign_envelope(statement, ensure_dev_key(root))       # or an operator's key file
    path = write_entry(envelope, root_entries_dir(root))
    verified = verify_envelope(load_entry(path), trusted_keys_dir())  # raises catalog_signature_invalid

Trust: verification is offline against a directory of ``<keyid>.pub.pem`` files. ``catalog/keys/`` is
the trusted set; the development key's public half (``<HITCH_ROOT>/keys/public/``) is trusted only
where a caller passes that directory (``--keys``) or copies it in with ``hitch catalog trust``.
No private key is ever written inside the checkout or printed.
"""

from __future__ import annotations

from catalog.signing._dsse import (
    PAYLOAD_TYPE,
    VerifiedEntry,
    decode_statement_unverified,
    pae,
    payload_bytes,
    sign_envelope,
    verify_envelope,
)
from catalog.signing._entries import (
    ENTRY_SUFFIX,
    EntryCheck,
    check_entry,
    entry_file_name,
    load_entry,
    published_entries_dir,
    root_entries_dir,
    scan_entries,
    write_entry,
)
from catalog.signing._keys import (
    DEV_KEY_NAME,
    KeyPair,
    describe_key,
    dev_key_pair,
    dev_keys_dir,
    ensure_dev_key,
    generate_key,
    key_id,
    load_private_key,
    load_public_key,
    load_trusted_keys,
    public_keys_dir_for,
    trust_public_key,
    trusted_keys_dir,
)
from catalog.signing._statement import (
    LEVELS,
    PREDICATE_TYPE,
    PREDICATE_TYPES,
    STATEMENT_TYPE,
    SUBJECT_NAMES,
    build_statement,
    check_statement,
    subjects_from_predicate,
    subjects_of,
)

__all__ = [
    "DEV_KEY_NAME",
    "ENTRY_SUFFIX",
    "LEVELS",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "PREDICATE_TYPES",
    "STATEMENT_TYPE",
    "SUBJECT_NAMES",
    "EntryCheck",
    "KeyPair",
    "VerifiedEntry",
    "build_statement",
    "check_entry",
    "check_statement",
    "decode_statement_unverified",
    "describe_key",
    "dev_key_pair",
    "dev_keys_dir",
    "ensure_dev_key",
    "entry_file_name",
    "generate_key",
    "key_id",
    "load_entry",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "pae",
    "payload_bytes",
    "public_keys_dir_for",
    "root_entries_dir",
    "published_entries_dir",
    "scan_entries",
    "sign_envelope",
    "subjects_from_predicate",
    "subjects_of",
    "trust_public_key",
    "trusted_keys_dir",
    "verify_envelope",
    "write_entry",
]
