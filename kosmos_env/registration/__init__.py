"""Pre-registered studies: freeze the protocol (design, metrics, pass bars) before any result.

``kosmos-env register PROTOCOL.yaml`` validates a protocol (:mod:`.protocol`) and writes its
canonical form with its SHA-256 and a UTC time (:mod:`.registry`); ``kosmos-env eval
--registration REG`` runs exactly that design (:mod:`.design`); ``kosmos-env analyze DIR
--registration REG`` computes the registered metrics (:mod:`.metrics`, an allow-listed grammar,
never ``eval``) and reports PASS or FAIL for each bar with its interval (:mod:`.report`),
everything else labelled exploratory.
"""

from __future__ import annotations

from kosmos_env.registration.design import RegistrationDeviation, bind_registration, registered_config
from kosmos_env.registration.protocol import (
    ProtocolError,
    load_protocol_file,
    protocol_hash,
    validate_protocol,
)
from kosmos_env.registration.registry import (
    Registration,
    RegistrationError,
    build_registration,
    default_registration_path,
    load_registration,
    registration_from_dict,
    write_registration,
)

__all__ = [
    "ProtocolError",
    "Registration",
    "RegistrationDeviation",
    "RegistrationError",
    "bind_registration",
    "build_registration",
    "default_registration_path",
    "load_protocol_file",
    "load_registration",
    "protocol_hash",
    "registered_config",
    "registration_from_dict",
    "validate_protocol",
    "write_registration",
]
