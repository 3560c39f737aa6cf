"""A policy served by another process, reached over the Kosmos remote-policy protocol.

``make_policy("remote", url="http://127.0.0.1:8765")`` (CLI: ``--policy remote:url=http://...``)
is a policy like any other: ``reset`` and ``act`` go over HTTP to a server started with
``kosmos-env serve-policy NAME`` or any other implementation of :mod:`kosmos_env.policies.protocol`
(e.g. ``examples/octo_server.py``). Its identity in results is the *served* policy's: ``name`` is
``remote:<served name>`` and ``content_hash()`` is the served policy's hash, so a policy ranks the
same in-process or remote.

That identity is checked on every reply, not only when the client connects: the hash ``/v1/info``
states is pinned, every later reply must state it again (``X-Kosmos-Policy-Hash``), and one that
does not raises :class:`PolicyIdentityChanged` (a server restarted with another policy never
answers for the old one). While an episode is open its server session is renewed from a
background thread, so a client that dies frees its slot one lease later, and a live client keeps
its session however long its env takes between two actions; ``end_episode`` ends the session as
soon as the episode is over. A full server (503) is waited for, up to ``busy_wait`` seconds.
"""

from __future__ import annotations

import math
import threading
import uuid
from typing import Any, Callable, Mapping

import numpy as np

from kosmos_env.policies.base import Policy
from kosmos_env.policies.conventions import ActionConvention
from kosmos_env.policies.protocol import (
    IDENTITY_HEADER,
    PolicyClient,
    PolicyIdentityChanged,
    RemotePolicyError,
)

#: url -> ids of the sessions this process holds open there (lockstep lanes share a process: a lane
#: that would wait for a slot only this process could free is refused at once instead of waiting)
_HELD: dict[str, set[str]] = {}
_HELD_LOCK = threading.Lock()
#: how long a reset waits for a full server by default (seconds)
BUSY_WAIT = 600.0


class RemotePolicy(Policy):
    """Client side of the protocol. Connects (``GET /v1/info``) when built, so a dead server fails here.

    ``timeout`` (s) bounds every request, ``retries`` bounds reconnect attempts, ``busy_wait`` (s)
    bounds how long a reset waits for a full server. ``renew_every`` (s): how often an open
    session's lease is renewed (default a quarter of the server's lease). If the server answers
    in another convention than the env contract, say so with ``rotation`` / ``gripper`` /
    ``translation_scale`` / ``rotation_scale`` (see :class:`ActionConvention`).
    """

    # every episode is its own server session (a fresh id at reset), so instances driving one server
    # (parallel workers, lockstep lanes) never share an episode state; a server that cannot hold
    # another session makes the reset wait for one instead of mixing episodes
    side_by_side = True

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.2,
        rotation: str = "euler",
        gripper: str = "unit_open",
        translation_scale: float = 1.0,
        rotation_scale: float = 1.0,
        busy_wait: float = BUSY_WAIT,
        renew_every: float | None = None,
    ):
        self.convention = ActionConvention(rotation, gripper, float(translation_scale), float(rotation_scale))
        self._client = PolicyClient(url, timeout=timeout, retries=retries, backoff=backoff, busy_wait=busy_wait)
        self.url = self._client.url
        info = self._client.info()
        self.remote_info: dict[str, Any] = info["policy"]
        sessions = info.get("sessions")
        if not isinstance(sessions, dict):
            # a server without sessions runs every client's episode on one state: parallel workers
            # would silently corrupt each other's episodes, so it is refused rather than trusted
            raise RemotePolicyError(
                f"the server at {self.url} does not keep per-episode sessions (no 'sessions' in "
                f"/v1/info); serve the policy with a current `kosmos-env serve-policy`"
            )
        served = self.remote_info.get("content_hash")
        if not isinstance(served, str) or not served:
            raise RemotePolicyError(f"the policy served at {self.url} does not state a content_hash in /v1/info")
        if self._client.stated_hash != served:
            # without the hash on every reply, a restart with another policy would go unnoticed
            raise RemotePolicyError(
                f"the server at {self.url} does not state its policy's content hash on every reply "
                f"({IDENTITY_HEADER}: {self._client.stated_hash or 'absent'}, /v1/info says {served[:12]}); "
                f"serve the policy with a current `kosmos-env serve-policy`"
            )
        self._client.policy_hash = served  # every later reply must state it again
        lease = sessions.get("lease_seconds", sessions.get("idle_seconds"))
        self.session_lease = float(lease) if isinstance(lease, (int, float)) and lease > 0 else None
        max_sessions = sessions.get("max")
        self.max_sessions = max_sessions if isinstance(max_sessions, int) and max_sessions > 0 else None
        if renew_every is not None and not (
            isinstance(renew_every, (int, float)) and math.isfinite(renew_every) and renew_every > 0
        ):
            raise ValueError(f"renew_every must be a finite number of seconds > 0, got {renew_every!r}")
        every = renew_every or (self.session_lease / 4 if self.session_lease else None)
        self._renewer = None if every is None else _Renewer(self._renew_client, every)
        self._timeouts = (timeout, retries, backoff)
        self._session: str | None = None
        self.name = f"remote:{self.remote_info.get('name', 'policy')}"
        self.action_convention = (
            f"remote ({self.remote_info.get('action_convention', 'unstated')}); wire: {self.convention.describe()}"
        )

    def _renew_client(self) -> PolicyClient:
        """The renewing thread's own client (its own connection), pinned to the same hash."""
        timeout, retries, backoff = self._timeouts
        return PolicyClient(
            self.url, timeout=timeout, retries=retries, backoff=backoff, policy_hash=self._client.policy_hash
        )

    def _check_renewer(self) -> None:
        if self._renewer is not None and self._renewer.changed is not None:
            raise self._renewer.changed  # the renewing thread saw another policy's hash first

    def reset(self, instruction: str, seed: int | None = None) -> None:
        self._check_renewer()
        previous = self._session
        others = _held(self.url) - {previous}
        if self.max_sessions is not None and len(others) >= self.max_sessions:
            raise RemotePolicyError(
                f"the server at {self.url} holds at most {self.max_sessions} session(s) and this process "
                f"already holds {len(others)} there (lockstep lanes, or several remote policies on one "
                f"server): waiting could never end; start it with a larger --max-sessions",
                transport=True,
            )
        session = uuid.uuid4().hex  # random, not seeded: ids only need to differ between clients
        self._session = None
        if self._renewer is not None:
            self._renewer.follow(None)
        _release(self.url, previous)  # the server ends it with this reset (or has, or will expire it)
        self._client.reset(instruction, seed, session=session, previous=previous)
        _hold(self.url, session)
        self._session = session
        if self._renewer is not None:
            self._renewer.follow(session)

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        self._check_renewer()
        if self._session is None:
            raise RemotePolicyError(f"act before reset: no session on the server at {self.url}")
        action = self._client.act(obs, session=self._session)
        return action if self.convention == ActionConvention() else self.convention.to_env(action)

    def end_episode(self) -> None:
        """The episode is over: end its session now, so its slot is free for another client's
        episode at once (best effort: a session not ended expires one lease later)."""
        session, self._session = self._session, None
        if self._renewer is not None:
            self._renewer.follow(None)
        if session is None:
            return
        _release(self.url, session)
        try:
            self._client.end(session)
        except RemotePolicyError:  # a server gone or changed: the next reset says so, the lease ends it
            pass

    def config(self) -> dict[str, Any]:
        return {"remote": self.remote_info, "convention": self.convention.to_dict()}

    def content_hash(self) -> str:
        served = self.remote_info["content_hash"]  # checked when built
        if self.convention == ActionConvention():
            return served
        return super().content_hash()

    def close(self) -> None:
        if self._renewer is not None:
            self._renewer.stop()
        self.end_episode()
        self._client.close()


class _Renewer:
    """Renews the lease of the session it follows every ``every`` seconds, from a daemon thread
    with its own connection (started on the first session it follows).

    A reply with another policy's hash is kept in ``changed`` (the policy raises it on its next
    call); any other failure is left to the episode's own next request to report."""

    def __init__(self, make_client: Callable[[], PolicyClient], every: float):
        self._make_client, self.every = make_client, float(every)
        self.session: str | None = None
        self.changed: PolicyIdentityChanged | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, session: str | None) -> None:
        self.session = session
        if session is not None and self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._loop, name="kosmos-remote-renew", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        client = self._make_client()
        try:
            while not self._stop.wait(self.every):
                session = self.session
                if session is None:
                    continue
                try:
                    client.renew(session)
                except PolicyIdentityChanged as exc:
                    self.changed = exc
                    return
                except RemotePolicyError:  # gone, ended meanwhile, or unreachable: the episode will tell
                    pass
        finally:
            client.close()


def _held(url: str) -> set[str]:
    with _HELD_LOCK:
        return set(_HELD.get(url, ()))


def _hold(url: str, session: str) -> None:
    with _HELD_LOCK:
        _HELD.setdefault(url, set()).add(session)


def _release(url: str, session: str | None) -> None:
    if session is None:
        return
    with _HELD_LOCK:
        _HELD.get(url, set()).discard(session)


def policy_info(policy: Policy) -> dict[str, Any]:
    """What a server says about a policy in ``GET /v1/info``."""
    return {
        "name": policy.name,
        "action_convention": policy.action_convention,
        "content_hash": policy.content_hash(),
        "config": policy.config(),
    }
