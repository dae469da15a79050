"""Signed evidence: ed25519 keys, a DSSE envelope of an in-toto Statement.

A seal (the sha256 of a record's canonical JSON) is an integrity check that anyone can
recompute: a forger who edits a record and reseals it passes every seal. A signature is what
tells who produced the evidence: ``sign_folder`` lists every file of a folder (a
certification's bundle.json and CONTRACT.md, or a run store's manifest.json, trials.jsonl
and decision.json) with its sha256 as the subjects of an in-toto Statement, and signs it
with an ed25519 key into ``evidence.dsse.json`` beside them. ``verify_folder`` checks the
signature with the public key, then every hash, and fails on a changed, added or removed
file. The DSSE envelope and the keys are securesystemslib's (with cryptography), imported
only when a key or an envelope is used. The private key never enters the folder.

A run that signs what it writes (``--sign-key``) loads its key once, before its first trial
(:func:`load_key`), and signs with that :class:`LoadedKey` at the end: the file is never read
again, so nothing a trial did to it in between (replaced it, emptied it) changes who signs.

Every file read here may be hostile: it is opened as a regular file only (a FIFO, a device
or a folder is refused without blocking), at most 16 MB of it is read, and every refusal is
one line.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import json
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

from certlab_core.plugin import CertlabError, InstrumentError, UsageError
from certlab_core.sdk import safe_io

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined, unused-ignore]

ENVELOPE_FILE = "evidence.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:certlab:evidence:1"
PUBLIC_KEY_SCHEMA = "certlab.public-key/1"
PRIVATE_KEY_SUFFIX = ".key"
PUBLIC_KEY_SUFFIX = ".pub"
MAX_DOCUMENT_BYTES = 16 << 20  # an envelope or a key file larger than this is refused unread
MAX_SIGNATURES = 16
_SHA256 = re.compile(r"[0-9a-f]{64}")


@frozen
class Subject:
    """One signed file: its path inside the folder (``/``-separated) and its sha256."""

    name: str
    sha256: str


@frozen
class Signed:
    """What ``sign_folder`` wrote: the envelope, how many files it covers, and the signing key's id."""

    envelope: Path
    subjects: int
    keyid: str


@frozen
class LoadedKey:
    """A private key read and parsed once: where it was (resolved, so that no later link moves it), and its signer."""

    path: Path
    signer: Any = field(repr=False)

    @property
    def keyid(self) -> str:
        return str(self.signer.public_key.keyid)


@frozen
class Verified:
    """What ``verify_folder`` checked: every file of the folder, signed by the key ``keyid``."""

    folder: Path
    subjects: int
    keyid: str
    kind: str


# --------------------------------------------------------------------------- reading hostile files


def read_regular(path: Path, what: str, error: type[CertlabError], *, follow: bool = True) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most 16 MB; anything else is ``error`` in one line.

    The file is opened without blocking (a FIFO never hangs the reader) and, with ``follow``
    false, without following a symlink.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: no {what} there") from None
    except OSError as failure:
        reason = "a symlink" if failure.errno == errno.ELOOP else failure.strerror
        raise error(f"{path}: cannot open the {what} ({reason})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: the {what} is not a regular file; give the file itself")
        if info.st_size > MAX_DOCUMENT_BYTES:
            raise error(f"{path}: the {what} is {info.st_size} bytes, over the 16 MB limit; it is not a certlab {what}")
        chunks: list[bytes] = []
        left = MAX_DOCUMENT_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise error(f"{path}: the {what} grew past the 16 MB limit while it was read")
        return b"".join(chunks)
    except OSError as failure:
        raise error(f"{path}: cannot read the {what} ({failure.strerror})") from None
    finally:
        os.close(fd)


def parse_json(data: bytes, path: Path, what: str, error: type[CertlabError]) -> Any:
    """``data`` parsed as JSON; text that is not UTF-8 JSON (or nests too deep for the parser) is ``error``."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as failure:
        reason = "nested too deep" if isinstance(failure, RecursionError) else type(failure).__name__
        raise error(f"{path}: the {what} is not JSON ({reason}); it is not a certlab {what}") from None


def file_sha256(path: Path, error: type[CertlabError]) -> str:
    """The sha256 of the regular file ``path``, read in chunks and never through a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as failure:
        raise error(f"{path}: cannot read it to hash it ({failure.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise error(f"{path}: not a regular file; evidence holds regular files only")
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    except OSError as failure:
        raise error(f"{path}: cannot read it to hash it ({failure.strerror})") from None
    finally:
        os.close(fd)


def evidence_files(folder: Path, error: type[CertlabError]) -> list[str]:
    """Every file of ``folder`` (sub-folders included, the envelope left out), ``/``-separated and sorted.

    A symlink or a special file is ``error``: evidence is regular files, and a symlink could
    make a verified name mean another file.
    """
    names: list[str] = []
    pending: list[tuple[Path, str]] = [(folder, "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as failure:
            raise error(f"{directory}: cannot list the folder ({failure.strerror})") from None
        for entry in entries:
            name = prefix + entry.name
            if entry.is_symlink():
                raise error(f"{folder}: {name} is a symlink; evidence holds regular files only")
            if entry.is_dir(follow_symlinks=False):
                pending.append((Path(entry.path), name + "/"))
            elif entry.is_file(follow_symlinks=False):
                if name != ENVELOPE_FILE:
                    names.append(name)
            else:
                raise error(f"{folder}: {name} is not a regular file; evidence holds regular files only")
    return sorted(names)


def evidence_kind(names: list[str]) -> str:
    """What the folder holds, from its files: a certification, a run store, or a plain folder."""
    if "bundle.json" in names:
        return "certification"
    if "manifest.json" in names and "trials.jsonl" in names:
        return "run-store"
    return "folder"


# --------------------------------------------------------------------------- keys


def _crypto() -> Any:
    try:
        from securesystemslib import signer
    except ImportError:  # pragma: no cover  (a dependency of this distribution)
        raise UsageError("signing needs securesystemslib; pip install 'securesystemslib[crypto]'") from None
    return signer


def key_paths(prefix: Path) -> tuple[Path, Path]:
    """The private and public key files of a key pair named ``prefix``: PREFIX.key and PREFIX.pub."""
    name = prefix.name.removesuffix(PRIVATE_KEY_SUFFIX).removesuffix(PUBLIC_KEY_SUFFIX)
    if not name:  # '', '/', 'keys/' or '.key': no name to give the files
        raise UsageError(f"{str(prefix)!r} names no key pair; give it a name, e.g. certlab keygen keys/release")
    base = prefix.with_name(name)
    return base.with_name(base.name + PRIVATE_KEY_SUFFIX), base.with_name(base.name + PUBLIC_KEY_SUFFIX)


def public_key_document(key: SSlibKey) -> dict[str, Any]:
    return {"schema": PUBLIC_KEY_SCHEMA, "keyid": key.keyid, **key.to_dict()}


def generate_key_pair(prefix: Path) -> tuple[Path, Path]:
    """A new ed25519 pair: PREFIX.key (PEM PKCS#8, mode 0600, never to be committed) and PREFIX.pub (JSON).

    Refuses to replace an existing file of either name.
    """
    private_path, public_path = key_paths(prefix)
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise UsageError(f"{path} already exists; give keygen a new name (it never replaces a key)")
    if not private_path.parent.is_dir():
        raise UsageError(f"{private_path.parent}: no such folder for the key pair; create it first")
    signer = _crypto().CryptoSigner.generate_ed25519()
    try:
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(signer.private_bytes)
        public_path.write_text(json.dumps(public_key_document(signer.public_key), indent=2) + "\n", encoding="utf-8")
    except OSError as failure:
        raise UsageError(f"{private_path}: cannot write the key pair ({failure.strerror})") from None
    return private_path, public_path


def load_signer(path: Path) -> CryptoSigner:
    """The signer of the private key file ``path`` (an unencrypted ed25519 PEM key, as keygen writes)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    data = read_regular(path, "private key", UsageError)
    try:
        private_key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise UsageError(
            f"{path}: not an unencrypted PEM private key; make a key pair with certlab keygen NAME"
        ) from None
    if not isinstance(private_key, Ed25519PrivateKey):
        raise UsageError(f"{path}: not an ed25519 key; make a key pair with certlab keygen NAME")
    signer: CryptoSigner = _crypto().CryptoSigner(private_key)
    return signer


def load_key(path: Path) -> LoadedKey:
    """The private key file ``path``, read and parsed now, held in memory from here on (``sign_folder`` takes it)."""
    return LoadedKey(path=Path(os.path.realpath(path)), signer=load_signer(path))


def load_public_key(path: Path) -> SSlibKey:
    """The ed25519 public key of the file ``path`` (the JSON keygen writes)."""
    document = parse_json(read_regular(path, "public key", UsageError), path, "public key", UsageError)
    if (
        not isinstance(document, dict)
        or document.get("schema") != PUBLIC_KEY_SCHEMA
        or not isinstance(document.get("keyid"), str)
        or document.get("keytype") != "ed25519"
        or document.get("scheme") != "ed25519"
        or not isinstance(document.get("keyval"), dict)
        or not isinstance(document["keyval"].get("public"), str)
    ):
        raise UsageError(f"{path}: not a certlab ed25519 public key (schema {PUBLIC_KEY_SCHEMA}); give the .pub file")
    fields = {name: document[name] for name in ("keytype", "scheme", "keyval")}
    try:
        key: SSlibKey = _crypto().SSlibKey.from_dict(document["keyid"], fields)
        _public_bytes(key)
    except (KeyError, ValueError, TypeError):
        raise UsageError(f"{path}: the public key's value is not an ed25519 key; give the .pub file") from None
    return key


def _public_bytes(key: SSlibKey) -> bytes:
    value = bytes.fromhex(key.keyval["public"])
    if len(value) != 32:
        raise ValueError("an ed25519 public key is 32 bytes")
    return value


# --------------------------------------------------------------------------- sign


def statement(folder: Path, names: list[str], error: type[CertlabError]) -> dict[str, Any]:
    """The in-toto Statement over ``names`` of ``folder``: each file with its sha256, and what the folder is."""
    try:
        version = importlib.metadata.version("certlab-signing")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover  (run from a source tree)
        version = "unknown"
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": file_sha256(folder / name, error)}} for name in names],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "kind": evidence_kind(names),
            "signed_by": f"certlab-signing {version}",
            "signed_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def sign_folder(folder: Path, key: Path | LoadedKey) -> Signed:
    """Sign every file of ``folder`` into ``folder/evidence.dsse.json``, with the private key file ``key`` or the
    key loaded before (:func:`load_key`; its file is not read again)."""
    from securesystemslib.dsse import Envelope

    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder; give the folder of the evidence (a certification or a run store)")
    key_path = key.path if isinstance(key, LoadedKey) else key
    if _inside(key_path, folder):
        raise UsageError(f"{key_path}: the private key is inside {folder}; keep it out of the evidence it signs")
    signer = key.signer if isinstance(key, LoadedKey) else load_signer(key_path)
    names = evidence_files(folder, UsageError)
    if not names:
        raise UsageError(f"{folder}: no files to sign")
    payload = json.dumps(statement(folder, names, UsageError), sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    target = folder / ENVELOPE_FILE
    data = (json.dumps(envelope.to_dict(), indent=2) + "\n").encode("utf-8")
    safe_io.replace_file(target, data, "signature", UsageError)  # a link in its place is replaced, not followed
    return Signed(envelope=target, subjects=len(names), keyid=signer.public_key.keyid)


# --------------------------------------------------------------------------- verify


def _envelope_shape(document: Any) -> str | None:
    """Why ``document`` is not a DSSE envelope of certlab's payload type, or None when its shape is right."""
    if not isinstance(document, dict) or set(document) != {"payload", "payloadType", "signatures"}:
        return "not a DSSE envelope (payload, payloadType, signatures)"
    if document["payloadType"] != PAYLOAD_TYPE:
        return f"its payloadType is not {PAYLOAD_TYPE}"
    if not isinstance(document["payload"], str):
        return "its payload is not base64 text"
    signatures = document["signatures"]
    if not isinstance(signatures, list) or not 1 <= len(signatures) <= MAX_SIGNATURES:
        return f"it holds no list of 1 to {MAX_SIGNATURES} signatures"
    for signature in signatures:
        if (
            not isinstance(signature, dict)
            or set(signature) != {"keyid", "sig"}
            or not all(isinstance(value, str) for value in signature.values())
        ):
            return "a signature is not {keyid, sig} text"
    return None


def _statement_subjects(document: Any) -> dict[str, str] | str:
    """The subjects of a signed Statement by name, or why it is not a certlab evidence Statement."""
    if (
        not isinstance(document, dict)
        or document.get("_type") != STATEMENT_TYPE
        or document.get("predicateType") != PREDICATE_TYPE
    ):
        return f"the signed payload is not an in-toto Statement of {PREDICATE_TYPE}"
    subjects = document.get("subject")
    if not isinstance(subjects, list) or not subjects:
        return "the signed Statement lists no subjects"
    found: dict[str, str] = {}
    for subject in subjects:
        digest = subject.get("digest") if isinstance(subject, dict) else None
        name = subject.get("name") if isinstance(subject, dict) else None
        sha256 = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            return "a subject of the signed Statement is not {name, digest: {sha256}}"
        if name in found:
            return f"the signed Statement lists {name} twice"
        found[name] = sha256
    return found


def _listed(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def verify_folder(folder: Path, public_key_path: Path) -> Verified:
    """Check ``folder/evidence.dsse.json`` with the public key, then every file's sha256; any difference is exit 3."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import FormatError, VerificationError

    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder; give the folder that holds {ENVELOPE_FILE}")
    key = load_public_key(public_key_path)
    path = folder / ENVELOPE_FILE
    if not os.path.lexists(path):
        raise InstrumentError(
            f"{folder}: not signed (no {ENVELOPE_FILE}); sign it with certlab sign {folder} --key KEY"
        )
    data = read_regular(path, "signature envelope", InstrumentError, follow=False)
    document = parse_json(data, path, "signature envelope", InstrumentError)
    problem = _envelope_shape(document)
    if problem is not None:
        raise InstrumentError(f"{path}: {problem}; the evidence is unreadable or tampered")
    try:
        envelope = Envelope.from_dict(document)
    except (KeyError, ValueError, TypeError, FormatError):
        raise InstrumentError(f"{path}: the envelope's payload or a signature is not base64; it is tampered") from None
    try:
        envelope.verify([key], 1)
    except VerificationError:
        raise InstrumentError(
            f"{path}: the signature does not verify with {public_key_path} (key {key.keyid[:16]}); "
            "the evidence is tampered or signed by another key"
        ) from None
    subjects = _statement_subjects(parse_json(envelope.payload, path, "signed Statement", InstrumentError))
    if isinstance(subjects, str):
        raise InstrumentError(f"{path}: {subjects}; the evidence is tampered")
    present = evidence_files(folder, InstrumentError)
    removed = sorted(set(subjects) - set(present))
    added = sorted(set(present) - set(subjects))
    changed = [
        name for name in present if name in subjects and file_sha256(folder / name, InstrumentError) != subjects[name]
    ]
    if removed or added or changed:
        found = (("changed", changed), ("added", added), ("removed", removed))
        parts = [f"{word} {_listed(names)}" for word, names in found if names]
        raise InstrumentError(f"{folder}: tampered since it was signed: {'; '.join(parts)}")
    return Verified(folder=folder, subjects=len(present), keyid=key.keyid, kind=evidence_kind(present))
