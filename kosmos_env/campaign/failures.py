"""Which failures are the policy's, and which are the infrastructure's.

An episode can fail because the policy or the model failed on its input (it raised, returned a
bad action, the judge could not read its video): that is a result, recorded as an ``error``
outcome once its retries are used up. Or it can fail because the machinery around it failed:
the remote policy server was unreachable or timed out, the process ran out of memory, the disk
or ledger was unavailable, the worker running it was killed. Such a failure says nothing
about the policy, so it is never final: the episode goes back to ``pending`` and the next run
of the same command (or the same run, after a pause) retries it.

One infrastructure failure also stops the campaign: a served policy whose replies stopped
stating the content hash the campaign runs (:func:`policy_identity_change`; the server was
restarted with another policy). Its episodes in flight go back to pending, and nothing the other
policy answered is recorded under the campaign's hash.
"""

from __future__ import annotations

import errno
import sqlite3

#: the error text of an infrastructure failure starts with this (the ledger keeps the kind in the text)
INFRA_TAG = "[infrastructure]"
#: error texts of older ledgers that meant an infrastructure failure (a worker died on the episode)
_LEGACY_INFRA_PREFIXES = ("abandoned after",)
_INFRA_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EIO,
    errno.EMFILE,
    errno.ENFILE,
    errno.ENOMEM,
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.EPIPE,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
}


class InfrastructureFailure(RuntimeError):
    """A worker gave up because the infrastructure kept failing (its episodes stay unfinished)."""


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_infrastructure_failure(exc: BaseException) -> bool:
    """True when ``exc`` (or an exception it was raised from) is an infrastructure failure.

    Infrastructure: out of memory (``MemoryError``, a CUDA/torch out-of-memory error), a remote
    policy that could not be reached, did not answer in time, lost the episode's session, stayed
    full past the wait or now serves another policy, a network, disk-full or I/O
    error of the operating system, a ledger database that is locked or unreadable.
    Everything else (the policy raised, a bad action, a judge failure) is the policy's or
    model's failure on its input.
    """
    for e in _chain(exc):
        if isinstance(e, MemoryError):
            return True
        if type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower():
            return True
        if getattr(e, "transport", False) is True:  # RemotePolicyError of the transport kind
            return True
        if getattr(e, "policy_identity_changed", False) is True:  # another policy answers now
            return True
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and e.errno in _INFRA_ERRNOS:
            return True
        if isinstance(e, sqlite3.OperationalError):
            return True
    return False


def policy_identity_change(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s chain that says a served policy's identity changed mid-run
    (``policy_identity_changed``: :class:`kosmos_env.policies.protocol.PolicyIdentityChanged`), else None."""
    for e in _chain(exc):
        if getattr(e, "policy_identity_changed", False) is True:
            return e
    return None


def is_infrastructure_error_text(text: str | None) -> bool:
    """True for an error recorded by an infrastructure failure (tagged, or an older ledger's)."""
    if not text:
        return False
    return text.startswith(INFRA_TAG) or text.startswith(_LEGACY_INFRA_PREFIXES)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
