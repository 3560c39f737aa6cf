"""A policy served by another process, reached over the Kosmos remote-policy protocol.

``make_policy("remote", url="http://127.0.0.1:8765")`` (CLI: ``--policy remote:url=http://...``)
is a policy like any other: ``reset`` and ``act`` go over HTTP to a server started with
``kosmos-env serve-policy NAME`` or any other implementation of :mod:`kosmos_env.policies.protocol`
(e.g. ``examples/octo_server.py``). Its identity in results is the *served* policy's: ``name`` is
``remote:<served name>`` and ``content_hash()`` is the served policy's hash, so a policy ranks the
same in-process or remote.
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

import numpy as np

from kosmos_env.policies.base import Policy
from kosmos_env.policies.conventions import ActionConvention
from kosmos_env.policies.protocol import PolicyClient, RemotePolicyError


class RemotePolicy(Policy):
    """Client side of the protocol. Connects (``GET /v1/info``) when built, so a dead server fails here.

    ``timeout`` (s) bounds every request, ``retries`` bounds reconnect attempts. If the server
    answers in another convention than the env contract, say so with ``rotation`` /
    ``gripper`` / ``translation_scale`` / ``rotation_scale`` (see :class:`ActionConvention`).
    """

    # every episode is its own server session (a fresh id at reset), so instances driving one server
    # (parallel workers, lockstep lanes) never share an episode state; a server that cannot hold
    # another session refuses it (503 too_many_sessions) instead of mixing episodes
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
    ):
        self.convention = ActionConvention(rotation, gripper, float(translation_scale), float(rotation_scale))
        self._client = PolicyClient(url, timeout=timeout, retries=retries, backoff=backoff)
        self.url = self._client.url
        info = self._client.info()
        self.remote_info: dict[str, Any] = info["policy"]
        if not isinstance(info.get("sessions"), dict):
            # a server without sessions runs every client's episode on one state: parallel workers
            # would silently corrupt each other's episodes, so it is refused rather than trusted
            raise RemotePolicyError(
                f"the server at {self.url} does not keep per-episode sessions (no 'sessions' in "
                f"/v1/info); serve the policy with a current `kosmos-env serve-policy`"
            )
        self._session: str | None = None
        self.name = f"remote:{self.remote_info.get('name', 'policy')}"
        self.action_convention = (
            f"remote ({self.remote_info.get('action_convention', 'unstated')}); wire: {self.convention.describe()}"
        )

    def reset(self, instruction: str, seed: int | None = None) -> None:
        session = uuid.uuid4().hex  # random, not seeded: ids only need to differ between clients
        self._client.reset(instruction, seed, session=session, previous=self._session)
        self._session = session

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        if self._session is None:
            raise RemotePolicyError(f"act before reset: no session on the server at {self.url}")
        action = self._client.act(obs, session=self._session)
        return action if self.convention == ActionConvention() else self.convention.to_env(action)

    def config(self) -> dict[str, Any]:
        return {"remote": self.remote_info, "convention": self.convention.to_dict()}

    def content_hash(self) -> str:
        served = self.remote_info.get("content_hash")
        if not isinstance(served, str) or not served:
            raise RemotePolicyError(f"the policy served at {self.url} does not state a content_hash in /v1/info")
        if self.convention == ActionConvention():
            return served
        return super().content_hash()

    def close(self) -> None:
        if self._session is not None:
            try:
                self._client.end(self._session)
            except RemotePolicyError:  # a server already gone ends its sessions anyway
                pass
            self._session = None
        self._client.close()


def policy_info(policy: Policy) -> dict[str, Any]:
    """What a server says about a policy in ``GET /v1/info``."""
    return {
        "name": policy.name,
        "action_convention": policy.action_convention,
        "content_hash": policy.content_hash(),
        "config": policy.config(),
    }
