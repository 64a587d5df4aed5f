"""Ed25519 signing keys: generation, loading, key ids and the trusted public-key directories.

* A private key is an unencrypted PKCS#8 PEM file, mode 0600, in a 0700 directory; it is refused when
  group or others can read it. Its public half is exported next to it as ``public/<keyid>.pub.pem``.
* ``keyid`` is the sha256 (hex) of the raw 32-byte public key.
* A *keys directory* holds ``<keyid>.pub.pem`` (SubjectPublicKeyInfo PEM) files and nothing secret.
  ``catalog/keys/`` in the checkout is the trusted one; the development key's public half lives under
  HITCH_ROOT (``keys/public/``) and is trusted only where a caller passes that directory explicitly
  (or copies it into ``catalog/keys/`` with ``hitch catalog trust``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from harness.errors import HitchError
from harness.paths import HitchRoot, atomic_write_bytes, ensure_private_dir

__all__ = [
    "DEV_KEY_NAME",
    "KeyPair",
    "describe_key",
    "dev_key_pair",
    "dev_keys_dir",
    "ensure_dev_key",
    "generate_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "public_keys_dir_for",
    "read_bounded",
    "trust_public_key",
    "trusted_keys_dir",
]

DEV_KEY_NAME = "dev-ed25519.pem"
_MAX_KEY_BYTES = 64 * 1024


@dataclass(frozen=True)
class KeyPair:
    """Where a key pair lives; never the key material itself."""

    keyid: str
    private_key: Path
    public_key: Path
    created: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "keyid": self.keyid,
            "private_key": str(self.private_key),
            "public_key": str(self.public_key),
            "public_keys_dir": str(self.public_key.parent),
            "created": self.created,
        }


def trusted_keys_dir() -> Path:
    """The checkout's trusted public keys: ``catalog/keys/``."""
    return Path(__file__).resolve().parents[1] / "keys"


def public_keys_dir_for(private_key_path: Path) -> Path:
    """Where the public half of ``private_key_path`` is exported."""
    return private_key_path.parent / "public"


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _public_pem(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def read_bounded(path: Path, limit: int, code: str, what: str) -> bytes:
    """The bytes of ``path`` (a key or an entry), never more than ``limit``: unreadable or larger is ``code``."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise HitchError(code, f"cannot read {what} {path}: {exc.strerror}", {"path": str(path)}) from None
    if len(data) > limit:
        raise HitchError(code, f"{what} {path} is larger than {limit} bytes", {"path": str(path)})
    return data


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from an unencrypted PEM file that only its owner can read."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise HitchError("catalog_key_invalid", f"cannot read private key {path}: {exc.strerror}", {"path": str(path)}) from None
    if stat.S_IMODE(mode) & 0o077:
        raise HitchError(
            "catalog_key_invalid",
            f"private key {path} is readable by group/others (mode {stat.S_IMODE(mode):04o}); chmod 600 it",
            {"path": str(path)},
        )
    data = read_bounded(path, _MAX_KEY_BYTES, "catalog_key_invalid", "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # the library's message could quote the file; say only what kind of failure it was
        raise HitchError("catalog_key_invalid", f"{path} is not an unencrypted PEM private key", {"path": str(path)}) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise HitchError("catalog_key_invalid", f"{path} is not an Ed25519 key", {"path": str(path)})
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    data = read_bounded(path, _MAX_KEY_BYTES, "catalog_key_invalid", "public key")
    if b"PRIVATE KEY" in data:
        raise HitchError("catalog_key_invalid", f"{path} holds a private key; pass its public half", {"path": str(path)})
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise HitchError("catalog_key_invalid", f"{path} is not a PEM public key", {"path": str(path)}) from None
    if not isinstance(key, Ed25519PublicKey):
        raise HitchError("catalog_key_invalid", f"{path} is not an Ed25519 public key", {"path": str(path)})
    return key


def load_trusted_keys(keys_dirs: Iterable[Path]) -> dict[str, Ed25519PublicKey]:
    """Every ``*.pub.pem`` in ``keys_dirs``, by the keyid computed from the key (not the file name)."""
    keys: dict[str, Ed25519PublicKey] = {}
    for keys_dir in keys_dirs:
        if not keys_dir.is_dir():
            continue
        for path in sorted(keys_dir.glob("*.pub.pem")):
            public_key = load_public_key(path)
            keys[key_id(public_key)] = public_key
    return keys


def _export_public(private_key: Ed25519PrivateKey, private_path: Path) -> Path:
    public_key = private_key.public_key()
    out = public_keys_dir_for(private_path) / f"{key_id(public_key)}.pub.pem"
    pem = _public_pem(public_key)
    if not (out.is_file() and out.read_bytes() == pem):
        atomic_write_bytes(out, pem, mode=0o644)
    return out


def _create_exclusive(path: Path, data: bytes) -> bool:
    """Publish ``data`` at ``path`` (0600) only if nothing is there yet; True when this call created it."""
    ensure_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # atomic create-if-absent: concurrent workers agree on one key
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _private_pem(private_key: Ed25519PrivateKey) -> bytes:
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def generate_key(out: Path, *, force: bool = False) -> KeyPair:
    """A new Ed25519 key at ``out`` (0600) and its public half in ``public_keys_dir_for(out)``."""
    out = out.expanduser().absolute()
    if out.exists() and not force:
        raise HitchError("catalog_key_invalid", f"{out} exists; pass --force to replace it", {"path": str(out)})
    private_key = Ed25519PrivateKey.generate()
    ensure_private_dir(out.parent)
    atomic_write_bytes(out, _private_pem(private_key), mode=0o600)
    return KeyPair(key_id(private_key.public_key()), out, _export_public(private_key, out), created=True)


def dev_key_pair(root: HitchRoot) -> KeyPair:
    """The development key under HITCH_ROOT (``keys/dev-ed25519.pem``), created 0600 if absent.

    Its public half is (re-)exported to ``keys/public/<keyid>.pub.pem`` every time.
    """
    path = root.keys / DEV_KEY_NAME
    created = False
    if not path.exists():
        created = _create_exclusive(path, _private_pem(Ed25519PrivateKey.generate()))
    return describe_key(path, created=created)


def dev_keys_dir(root: HitchRoot) -> Path:
    """Where the development key's public half is exported (``<HITCH_ROOT>/keys/public``)."""
    return public_keys_dir_for(root.keys / DEV_KEY_NAME)


def ensure_dev_key(root: HitchRoot) -> Path:
    """Path of the development key under HITCH_ROOT, created (0600, dir 0700) when absent."""
    return dev_key_pair(root).private_key


def describe_key(private_key_path: Path, *, created: bool = False) -> KeyPair:
    """Where ``private_key_path`` and its exported public half are (exporting it if missing)."""
    private_key = load_private_key(private_key_path)
    return KeyPair(key_id(private_key.public_key()), private_key_path, _export_public(private_key, private_key_path), created)


def trust_public_key(public_key_path: Path, keys_dir: Path) -> Path:
    """Copy a public key into ``keys_dir`` as ``<keyid>.pub.pem``; returns where it went."""
    public_key = load_public_key(public_key_path)
    out = keys_dir / f"{key_id(public_key)}.pub.pem"
    atomic_write_bytes(out, _public_pem(public_key), mode=0o644)
    return out
