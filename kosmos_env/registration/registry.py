"""Registration files: a protocol's canonical form, its SHA-256 and the UTC time it was frozen.

A registration file (JSON) is::

    {"schema": "kosmos-env/registration", "schema_version": 1,
     "sha256": <sha256 of the canonical protocol JSON>, "registered_utc": "2026-11-29T12:00:00Z",
     "package_version": "0.1.0", "protocol_file": "study.yaml",
     "protocol": {...canonical protocol...},
     "reference_data": null | {"sha256": ..., "text": <the reference CSV, verbatim>}}

The reference CSV travels inside the registration (and from there into results.json) so the
registered metrics can be recomputed anywhere, e.g. when the study is published; its sha256 is
the one the protocol registered. :func:`write_registration` never overwrites a file, and
:func:`load_registration` recomputes the hash, so a registration edited after the fact is
refused wherever it is used. (A hash is a tamper *seal*, not a signature: someone who edits a
field and the hash together makes a new registration, whose hash no longer matches the one
published or cited before the results.)
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kosmos_env.hashing import canonical_json, sha256_hex
from kosmos_env.registration.protocol import (
    ProtocolError,
    load_protocol_file,
    parse_reference_text,
    protocol_hash,
    resolve_reference,
    validate_protocol,
)

REGISTRATION_SCHEMA = "kosmos-env/registration"
REGISTRATION_SCHEMA_VERSION = 1
_KEYS = {
    "schema",
    "schema_version",
    "sha256",
    "registered_utc",
    "package_version",
    "protocol_file",
    "protocol",
    "reference_data",
}


class RegistrationError(ValueError):
    """A registration file is missing, malformed, or no longer matches its recorded hash."""


@dataclass(frozen=True)
class Registration:
    """A verified registration (its protocol hashes to ``sha256``)."""

    sha256: str
    registered_utc: str
    protocol: dict
    reference_data: dict | None
    package_version: str = ""
    protocol_file: str = ""
    path: str | None = None

    @property
    def name(self) -> str:
        return self.protocol["name"]

    @property
    def short(self) -> str:
        return self.sha256[:12]

    def reference_rows(self) -> list[dict] | None:
        """The registered reference rows {task, policy, reference}, or None without a reference."""
        if self.reference_data is None:
            return None
        return parse_reference_text(self.reference_data["text"], "registered reference data")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": REGISTRATION_SCHEMA,
            "schema_version": REGISTRATION_SCHEMA_VERSION,
            "sha256": self.sha256,
            "registered_utc": self.registered_utc,
            "package_version": self.package_version,
            "protocol_file": self.protocol_file,
            "protocol": self.protocol,
            "reference_data": self.reference_data,
        }

    def stamp(self) -> dict[str, Any]:
        """What a campaign carries (ledger meta, results.json ``campaign.registration``): the whole
        record, so a published bundle can be checked against its registration on its own."""
        return self.to_dict()


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def build_registration(protocol_path: str | Path, *, check_hashes: bool = True) -> Registration:
    """Validate a protocol file and freeze it into a :class:`Registration` (nothing is written)."""
    from kosmos_env import __version__

    path = Path(protocol_path)
    canonical = validate_protocol(load_protocol_file(path), path.parent, check_hashes=check_hashes)
    ref_data = None
    if canonical["reference"] is not None:
        ref_path = resolve_reference(canonical["reference"]["path"], path.parent)
        raw = ref_path.read_bytes()
        if sha256_hex(raw) != canonical["reference"]["sha256"]:
            raise ProtocolError(f"protocol.reference.sha256 does not match {ref_path}")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"reference file {ref_path} is not UTF-8 text") from None
        ref_data = {"sha256": canonical["reference"]["sha256"], "text": text}
    return Registration(
        sha256=protocol_hash(canonical),
        registered_utc=utc_now(),
        protocol=canonical,
        reference_data=ref_data,
        package_version=__version__,
        protocol_file=path.name,
    )


def default_registration_path(protocol_path: str | Path) -> Path:
    """``study.yaml`` -> ``study.registration.json`` beside it."""
    p = Path(protocol_path)
    return p.with_name(p.stem + ".registration.json")


def write_registration(reg: Registration, out: str | Path) -> Path:
    """Write ``reg`` to ``out``; refuses (FileExistsError, a clear message) to overwrite anything."""
    out = Path(out)
    data = (json.dumps(reg.to_dict(), indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("utf-8")
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    except FileExistsError:
        raise RegistrationError(
            f"{out} already exists: a registration is never overwritten. A changed protocol is "
            f"a new study: register it under a new file name"
        ) from None
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return out


def registration_from_dict(data: Any, source: str = "registration") -> Registration:
    """Check a registration record (schema, hash, reference seal) and return it."""
    if not isinstance(data, dict):
        raise RegistrationError(f"{source} must hold a JSON object")
    if data.get("schema") != REGISTRATION_SCHEMA:
        raise RegistrationError(f"{source}: 'schema' is {data.get('schema')!r}, expected {REGISTRATION_SCHEMA!r}")
    if data.get("schema_version") != REGISTRATION_SCHEMA_VERSION:
        raise RegistrationError(f"{source}: schema_version {data.get('schema_version')!r} is not supported")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise RegistrationError(f"{source}: unknown field(s) {unknown}")
    for key in ("sha256", "registered_utc", "protocol"):
        if key not in data:
            raise RegistrationError(f"{source} lacks {key!r}")
    protocol = data["protocol"]
    if not isinstance(protocol, dict):
        raise RegistrationError(f"{source}: 'protocol' must be an object")
    try:
        actual = protocol_hash(protocol)
    except (TypeError, ValueError) as exc:
        raise RegistrationError(f"{source}: the protocol is not plain JSON data: {exc}") from None
    if actual != data["sha256"]:
        raise RegistrationError(
            f"{source} was edited after registration: its protocol now hashes to {actual[:12]}..., but the recorded "
            f"registration sha256 is {str(data['sha256'])[:12]}... A registered study cannot change; register the "
            f"changed protocol as a new study"
        )
    try:  # structure only: the protocol must still be a canonical, valid protocol
        again = validate_protocol(protocol, None, check_hashes=False)
    except (ValueError, FileNotFoundError) as exc:
        raise RegistrationError(f"{source}: the registered protocol is not valid: {exc}") from None
    if canonical_json(again) != canonical_json(protocol):
        raise RegistrationError(
            f"{source}: the registered protocol is not in canonical form (it was not written by kosmos-env register)"
        )
    ref = data.get("reference_data")
    if protocol.get("reference") is None:
        if ref is not None:
            raise RegistrationError(f"{source}: carries reference data but the protocol registers no reference")
    else:
        if not isinstance(ref, dict) or not isinstance(ref.get("text"), str):
            raise RegistrationError(f"{source}: the protocol registers a reference but its data is missing")
        got = sha256_hex(ref["text"])
        if got != protocol["reference"]["sha256"] or ref.get("sha256") != got:
            raise RegistrationError(
                f"{source}: the embedded reference data hashes to {got[:12]}..., not the "
                f"registered {protocol['reference']['sha256'][:12]}..."
            )
    return Registration(
        sha256=data["sha256"],
        registered_utc=str(data["registered_utc"]),
        protocol=protocol,
        reference_data=ref,
        package_version=str(data.get("package_version", "")),
        protocol_file=str(data.get("protocol_file", "")),
    )


def load_registration(path: str | Path) -> Registration:
    """Read and verify a registration file (see :func:`registration_from_dict`)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"registration file not found: {p} (write one with kosmos-env register PROTOCOL.yaml)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RegistrationError(f"{p} is not a JSON registration file: {exc}") from None
    reg = registration_from_dict(data, str(p))
    return Registration(**{**reg.__dict__, "path": str(p)})
