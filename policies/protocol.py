"""The Kosmos remote-policy protocol, version 1: a policy in another process answers over HTTP.

Heavy or foreign policy stacks (Octo in JAX, a VLA pinned to an old transformers, a policy on
another GPU box) stay out of the evaluator's process: they run a small HTTP server that speaks
this protocol, and the evaluator talks to them through ``RemotePolicy(url)``. This module is the
whole protocol: the message codec, a server for any object with ``reset``/``act`` and a client.
It needs only the Python standard library and numpy, so it can be copied on its own next to a
policy that cannot install kosmos-env (see ``examples/octo_server.py``).

Endpoints (all under ``/v1``; the server binds 127.0.0.1 unless told otherwise)
---------------------------------------------------------------------------------
``GET /v1/info``
    JSON ``{"protocol": "kosmos-policy", "version": 1, "policy": {"name", "action_convention",
    "content_hash", "config"}, "sessions": {...}}``. The client checks ``protocol`` and
    ``version`` before anything else.
``POST /v1/reset``
    JSON body ``{"version": 1, "instruction": str, "seed": int | null, "session": id,
    "previous": id}``; answers JSON ``{"version": 1, "ok": true}``. Starts an episode (clears any
    action queue on the server).
``POST /v1/act``
    Body: a binary *observation* message (below); answers a binary *action* message.
``POST /v1/end``, ``POST /v1/renew``
    JSON body ``{"version": 1, "session": id}``: end the session, or renew its lease (Sessions).

Identity
--------
Every reply of the server, whatever its endpoint or status (errors included), carries the
header ``X-Kosmos-Policy-Hash: <content_hash>``: the content hash of the policy it serves, the
one ``/v1/info`` states. A client pins the hash of its ``/v1/info`` and checks the header of
every later reply: a reply stating another hash, or none, means the server now serves another
policy (it was restarted with one, say). The client then raises :class:`PolicyIdentityChanged`
(a :class:`RemotePolicyError` of the transport kind), and raises it again on every later call,
so nothing the new policy answers is ever taken for the old one's. A campaign ends the episodes
in flight as infrastructure failures (retried by a rerun, never recorded under the old hash)
and stops. (The header is what the server *states*: a server that lies about its policy is not
caught here; only a run by whoever holds the policy is.)

Binary message (``Content-Type: application/x-kosmos-policy``)
----------------------------------------------------------------
::

    b"KPOL" | u32 little-endian header length N | N bytes of UTF-8 JSON header | payload

The header is ``{"version": 1, "kind": "observation" | "action", "fields": {...}, "arrays": [...]}``.
``fields`` holds JSON scalars (str, int, float, bool, null), e.g. ``instruction``. Each entry of
``arrays`` is ``{"name": str, "dtype": "<u1" | "<f4" | "<f8" | "<i4" | "<i8", "shape": [int, ...]}``;
the arrays' raw little-endian C-order bytes follow the header back to back, in that order, and
must add up to the payload exactly. Nothing is ever pickled.

- observation: array ``image`` (H, W, 3) uint8 and field ``instruction`` (str) are required;
  further arrays (``ee_pos``, ``ee_euler``, ``gripper``: proprioceptive state) are optional.
- action: array ``action``, float32, shape (7,) for one action or (k, 7) for a chunk of k,
  ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` in the env contract (gripper 1 = open). All
  values finite.

Limits (a violation is rejected, never truncated): message ≤ 64 MiB (``MAX_MESSAGE_BYTES``),
header ≤ 64 KiB, at most 32 arrays of at most 4 dimensions, names ≤ 64 characters, image sides
≤ 4096, chunks ≤ 1024 actions.

Errors
------
Any failure answers a JSON body ``{"version": 1, "error": {"code": str, "message": str}}`` with
an HTTP status: 400 ``bad_request`` (malformed message, JSON nested too deeply, wrong version
``version_mismatch``), 404 ``not_found`` (unknown endpoint), 408 ``request_timeout`` (the body
did not arrive within the server's request timeout, 60 s by default; the connection is closed),
409 ``unknown_session``, 411 ``length_required``, 413 ``too_large``, 415
``unsupported_media_type`` (``/v1/reset`` takes ``application/json``, ``/v1/act`` takes
``application/x-kosmos-policy``), 500 ``policy_error`` (the policy raised; the message says what
it raised), 503 ``too_many_sessions`` (Sessions).
The client raises :class:`RemotePolicyError` (a ``RuntimeError``) naming the URL and the cause when
the server is down, times out, answers an error, or answers something that is not this protocol.
Its ``transport`` flag tells the machinery's failures (unreachable, timed out, a session the
server lost: 408, 409, a 503 waited out, a changed identity) from the policy's (500, a bad
answer).

Sessions
--------
Every episode is a session: the client makes a fresh id (``session``, 1..128 printable ASCII
characters) at reset and sends it with ``/v1/reset`` (JSON ``"session"``, and ``"previous"``: the
id of the episode it ends, if any), with every ``/v1/act`` (the observation field ``session``,
removed before the policy sees the observation) and with ``POST /v1/end`` when the episode is
over. The server keeps one policy instance per live session (built by its factory, or reused
from an ended session after ``reset``), so episodes of several workers or lockstep lanes never
share state. A server built without a factory holds one instance, so at most one session is
live. Requests without a session id (older clients) share the session ``""``.

A session is *leased*: ``GET /v1/info`` says ``"sessions": {"max": n, "lease_seconds": s,
"idle_seconds": s, "renew": true}`` (``idle_seconds``: the same number, its older name). Every
request naming the session renews its lease, and so does ``POST /v1/renew``, which a client
sends every fraction of ``s`` while an episode is open, however long its env takes between two
actions. A session not renewed for ``s`` seconds (its client died, or reset and never came
back) is ended and its slot freed: 30 s by default (``serve-policy --session-lease``).

A reset that would open more than ``n`` sessions is answered 503 ``too_many_sessions``, with
``"retry_seconds"`` and ``"waiting_ahead"`` in its ``error`` object. That is back-pressure, not a
failure: the client waits and asks again (``RemotePolicy`` for up to ``busy_wait`` seconds, 600
by default, saying so on stderr, then gives up as an infrastructure failure). The server
remembers refused sessions first come, first served: a freed slot goes to the session that has
waited longest (one that stops asking for ``WAIT_TTL`` seconds loses its place), so one client
ending and starting episodes back to back cannot starve another. An act for a session the server
does not hold (expired, ended, never reset) is answered 409 ``unknown_session``: never another
episode's state.

Compatibility: the version stays 1, and a client of before ignores the header and the new
fields. A current client refuses a server that does not state its hash in every reply (it could
not keep the guarantee above), as it refuses one without sessions.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping

import numpy as np

PROTOCOL = "kosmos-policy"
VERSION = 1
MAGIC = b"KPOL"
CONTENT_TYPE = "application/x-kosmos-policy"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_ARRAYS = 32
MAX_NDIM = 4
MAX_NAME = 64
MAX_IMAGE_SIDE = 4096
MAX_CHUNK = 1024
#: seconds a server waits on a silent connection (a request line, headers or a body that does
#: not arrive) before answering 408 and closing it; also how long an idle keep-alive lasts
REQUEST_TIMEOUT = 60.0
#: the Content-Type each POST endpoint accepts (anything else is answered 415)
REQUEST_TYPES = {
    "/v1/reset": "application/json",
    "/v1/act": CONTENT_TYPE,
    "/v1/end": "application/json",
    "/v1/renew": "application/json",
}
ACTION_DIM = 7
DTYPES = {"<u1": np.uint8, "<f4": np.float32, "<f8": np.float64, "<i4": np.int32, "<i8": np.int64}
_PREFIX = struct.Struct("<4sI")
#: default bound on live sessions of a :class:`PolicyServer`
MAX_SESSIONS = 8
#: default session lease (seconds): a session neither used nor renewed for this long is ended
SESSION_LEASE = 30.0
SESSION_IDLE = SESSION_LEASE  # its older name
#: a refused reset keeps its place in the server's queue while it asks again within this many seconds
WAIT_TTL = 5.0
#: how soon a refused client is told to ask again (well inside WAIT_TTL, so a waiting client keeps its place)
RETRY_SECONDS = 1.0
#: the reply header that states the served policy's content hash (see Identity above)
IDENTITY_HEADER = "X-Kosmos-Policy-Hash"
#: error codes that say the machinery failed, not the policy: the server lost or could not hold the
#: session, or the request did not arrive in time (a campaign retries such an episode)
INFRASTRUCTURE_CODES = frozenset({"unknown_session", "too_many_sessions", "request_timeout"})
MAX_SESSION_ID = 128


class ProtocolError(ValueError):
    """A message that does not follow this protocol (bad framing, dtype, shape, size or version)."""


class RemotePolicyError(RuntimeError):
    """The remote policy could not be reached or did not answer with a valid protocol message.

    ``transport`` is True when the server could not be reached or did not answer in time (an
    infrastructure failure: a campaign retries the episode later), False when it answered and
    the answer was an error or not this protocol (the policy's failure).
    """

    def __init__(self, message: str, transport: bool = False):
        super().__init__(message)
        self.transport = transport


class PolicyIdentityChanged(RemotePolicyError):
    """A reply stated another policy content hash (or none) than the one the client pinned.

    The server now serves another policy: nothing it answers may count as the pinned one's. A
    transport failure (the episode is not the policy's fault) that a campaign also treats as a
    reason to stop (``policy_identity_changed``)."""

    policy_identity_changed = True

    def __init__(self, url: str, expected: str, stated: str | None):
        now = f"now state content hash {stated[:12]}" if stated else "no longer state a content hash"
        super().__init__(
            f"the policy served at {url} changed mid-run: its replies {now}, but this run started with "
            f"{expected[:12]} (was the server restarted with another policy?)",
            transport=True,
        )
        self.url, self.expected, self.stated = url, expected, stated


# -- codec ---------------------------------------------------------------------------------------
def encode_message(kind: str, arrays: Mapping[str, np.ndarray], fields: Mapping[str, Any] | None = None) -> bytes:
    """Frame ``arrays`` (numpy) and ``fields`` (JSON scalars) as one binary message."""
    if len(arrays) > MAX_ARRAYS:
        raise ProtocolError(f"at most {MAX_ARRAYS} arrays per message, got {len(arrays)}")
    specs, blobs = [], []
    for name, value in arrays.items():
        arr = np.asarray(value)
        code = arr.dtype.newbyteorder("<").str.replace("|", "<")  # '|u1' (no byte order) is '<u1' here
        if code not in DTYPES:
            raise ProtocolError(f"array {name!r} has dtype {arr.dtype}; the protocol carries {sorted(DTYPES)}")
        _check_name(name)
        if arr.ndim > MAX_NDIM:
            raise ProtocolError(f"array {name!r} has {arr.ndim} dimensions; at most {MAX_NDIM}")
        specs.append({"name": name, "dtype": code, "shape": list(arr.shape)})
        blobs.append(np.ascontiguousarray(arr, dtype=DTYPES[code]).tobytes())
    fields = dict(fields or {})
    for key, value in fields.items():
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise ProtocolError(
                f"field {key!r} must be a JSON scalar (str, number, bool, null), got {type(value).__name__}"
            )
    header = json.dumps({"version": VERSION, "kind": kind, "fields": fields, "arrays": specs}).encode()
    if len(header) > MAX_HEADER_BYTES:
        raise ProtocolError(f"message header is {len(header)} bytes; at most {MAX_HEADER_BYTES}")
    message = b"".join([_PREFIX.pack(MAGIC, len(header)), header, *blobs])
    if len(message) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message is {len(message)} bytes; at most {MAX_MESSAGE_BYTES}")
    return message


def decode_message(
    data: bytes, kind: str, max_bytes: int = MAX_MESSAGE_BYTES
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Parse and validate a binary message of the expected ``kind``; returns (arrays, fields)."""
    if len(data) > max_bytes:
        raise ProtocolError(f"message is {len(data)} bytes; at most {max_bytes}")
    if len(data) < _PREFIX.size:
        raise ProtocolError(f"message is {len(data)} bytes, shorter than the {_PREFIX.size}-byte prefix")
    magic, header_len = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(f"message does not start with {MAGIC!r} (got {magic!r}): not a {PROTOCOL} message")
    if header_len > MAX_HEADER_BYTES or _PREFIX.size + header_len > len(data):
        raise ProtocolError(f"header length {header_len} is too large or runs past the message ({len(data)} bytes)")
    try:
        header = json.loads(data[_PREFIX.size : _PREFIX.size + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"message header is not UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("message header JSON is nested too deeply") from None
    if not isinstance(header, dict):
        raise ProtocolError("message header must be a JSON object")
    if header.get("version") != VERSION:
        raise ProtocolError(f"message has protocol version {header.get('version')!r}; this side speaks {VERSION}")
    if header.get("kind") != kind:
        raise ProtocolError(f"expected a {kind!r} message, got {header.get('kind')!r}")
    fields, specs = header.get("fields", {}), header.get("arrays", [])
    if not isinstance(fields, dict) or not isinstance(specs, list):
        raise ProtocolError("header 'fields' must be an object and 'arrays' a list")
    if len(specs) > MAX_ARRAYS:
        raise ProtocolError(f"at most {MAX_ARRAYS} arrays per message, got {len(specs)}")
    payload = memoryview(data)[_PREFIX.size + header_len :]
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for spec in specs:
        if not isinstance(spec, dict):
            raise ProtocolError("each 'arrays' entry must be an object with name, dtype and shape")
        name, code, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
        _check_name(name)
        if name in arrays:
            raise ProtocolError(f"array {name!r} appears twice")
        if not isinstance(code, str) or code not in DTYPES:  # a list is unhashable: check the type first
            raise ProtocolError(f"array {name!r} has dtype {code!r}; the protocol carries {sorted(DTYPES)}")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s for s in shape)
        ):
            raise ProtocolError(
                f"array {name!r} has shape {shape!r}; expected a list of at most {MAX_NDIM} non-negative ints"
            )
        nbytes = math.prod(shape) * np.dtype(DTYPES[code]).itemsize
        if offset + nbytes > len(payload):
            raise ProtocolError(f"array {name!r} needs {nbytes} bytes but the payload has {len(payload) - offset} left")
        arrays[name] = np.frombuffer(payload[offset : offset + nbytes], dtype=DTYPES[code]).reshape(shape).copy()
        offset += nbytes
    if offset != len(payload):
        raise ProtocolError(f"payload has {len(payload) - offset} bytes beyond the declared arrays")
    return arrays, fields


def encode_observation(obs: Mapping[str, Any]) -> bytes:
    """An env observation (``image``, ``instruction``, optional state arrays) as a message."""
    arrays, fields = {}, {}
    for key, value in obs.items():
        if isinstance(value, (str, bool, int, float)) or value is None:
            fields[key] = value
        else:
            arrays[key] = np.asarray(value)
    message = encode_message("observation", arrays, fields)
    check_observation(arrays, fields)
    return message


def decode_observation(data: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """Parse an observation message back into the env's observation dict."""
    arrays, fields = decode_message(data, "observation", max_bytes)
    check_observation(arrays, fields)
    return {**fields, **arrays}


def check_observation(arrays: Mapping[str, np.ndarray], fields: Mapping[str, Any]) -> None:
    image = arrays.get("image")
    if image is None:
        raise ProtocolError("observation needs an 'image' array (H, W, 3) uint8")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ProtocolError(f"observation 'image' must be (H, W, 3) uint8, got {image.shape} {image.dtype}")
    if not (0 < image.shape[0] <= MAX_IMAGE_SIDE and 0 < image.shape[1] <= MAX_IMAGE_SIDE):
        raise ProtocolError(f"observation 'image' sides must be in [1, {MAX_IMAGE_SIDE}], got {image.shape[:2]}")
    if not isinstance(fields.get("instruction"), str):
        raise ProtocolError("observation needs an 'instruction' string field")


def encode_action(action: np.ndarray) -> bytes:
    """One action (7,) or a chunk (k, 7) as a message (checked before it is sent)."""
    arr = np.asarray(action)
    check_action(arr)
    return encode_message("action", {"action": arr.astype(np.float32)})


def decode_action(data: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> np.ndarray:
    arrays, _ = decode_message(data, "action", max_bytes)
    if set(arrays) != {"action"}:
        raise ProtocolError(f"an action message carries exactly one array 'action', got {sorted(arrays)}")
    check_action(arrays["action"], require_float32=True)
    return arrays["action"]


def check_action(action: np.ndarray, require_float32: bool = False) -> None:
    if action.dtype.kind != "f" or (require_float32 and action.dtype != np.float32):
        raise ProtocolError(f"action must be float32, got {action.dtype}")
    ok_shape = action.shape == (ACTION_DIM,) or (
        action.ndim == 2 and action.shape[1] == ACTION_DIM and 1 <= action.shape[0] <= MAX_CHUNK
    )
    if not ok_shape:
        raise ProtocolError(
            f"action must have shape ({ACTION_DIM},) or (k, {ACTION_DIM}) with 1 <= k <= {MAX_CHUNK}, got {action.shape}"
        )
    if not np.all(np.isfinite(action)):
        raise ProtocolError("action contains NaN or infinite values")


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise ProtocolError(f"array name must be a string of 1..{MAX_NAME} characters, got {name!r}")


# -- server --------------------------------------------------------------------------------------
class PolicyServer:
    """Serves any object with ``reset(instruction, seed=None)`` and ``act(obs) -> ndarray``.

    ``info`` is a JSON-able dict describing the policy (name, action_convention, content_hash,
    config); it is what ``GET /v1/info`` answers. ``port=0`` picks a free port (see ``url``).
    ``factory`` builds another instance of the same policy for a concurrent session (up to
    ``max_sessions``); without one the server holds only ``policy`` and refuses a second
    concurrent session. A session neither used nor renewed for ``session_lease`` seconds is ended
    (``session_idle``: its older name). Every reply states ``info["content_hash"]`` in the
    ``X-Kosmos-Policy-Hash`` header. ``expired`` and ``refused`` count sessions ended by their
    lease and resets answered 503 (what a test or an operator watches).
    """

    def __init__(
        self,
        policy: Any,
        info: Mapping[str, Any] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_bytes: int = MAX_MESSAGE_BYTES,
        log: Callable[[str], None] | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        factory: Callable[[], Any] | None = None,
        max_sessions: int = MAX_SESSIONS,
        session_lease: float | None = None,
        session_idle: float | None = None,
    ):
        if not request_timeout > 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout}")
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
        if session_lease is not None and session_idle is not None and session_lease != session_idle:
            raise ValueError("give session_lease or its older name session_idle, not both")
        lease = next((v for v in (session_lease, session_idle) if v is not None), SESSION_LEASE)
        if not (isinstance(lease, (int, float)) and math.isfinite(lease) and lease > 0):
            raise ValueError(f"session_lease must be a finite number of seconds > 0, got {lease!r}")
        self.policy = policy
        self.factory = factory
        self.max_sessions = int(max_sessions) if factory is not None else 1
        self.session_lease = float(lease)
        self._sessions: dict[str, _Session] = {}
        # refused resets, first come first served: session id -> when it last asked (dicts keep order)
        self._waiting: dict[str, float] = {}
        self.expired = 0
        self.refused = 0
        self._free: list[Any] = [policy]  # built instances not held by a session (reset before reuse)
        self._built: list[Any] = [policy]  # every instance, closed by close_policies()
        self._sessions_lock = threading.Lock()
        self._building = 0  # new instances the factory is building now (each holds a session slot)
        self.info = dict(info or {"name": getattr(policy, "name", type(policy).__name__)})
        stated = self.info.get("content_hash")
        # the identity every reply states (None: the info names no hash, and no reply states one)
        self.identity = stated if isinstance(stated, str) and stated else None
        self.max_bytes = int(max_bytes)
        self.request_timeout = float(request_timeout)
        self.log = log
        self._thread: threading.Thread | None = None
        self._connections: set = set()  # open client sockets, dropped by close()
        self._connections_lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, int(port)), _make_handler(self))
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> "PolicyServer":
        """Serve in a daemon thread (tests, notebooks); returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="kosmos-policy-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: no new connections, and open keep-alive connections are dropped (as when the
        server process ends), so clients see the server go away rather than talk to a stopped one."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.httpd.server_close()
        with self._connections_lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed by the client
                pass

    def __enter__(self) -> "PolicyServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close_policies(self) -> None:
        """Close every policy instance the factory built (the first one is the caller's)."""
        for policy in self._built[1:]:
            close = getattr(policy, "close", None)
            if callable(close):
                close()
        self._built = self._built[:1]

    @property
    def session_idle(self) -> float:
        """The session lease (its older name)."""
        return self.session_lease

    @property
    def sessions(self) -> int:
        """How many sessions are live now (those past their lease are ended first)."""
        with self._sessions_lock:
            self._expire(time.monotonic())
            return len(self._sessions)

    # sessions: every caller holds self._sessions_lock
    def _expire(self, now: float) -> None:
        for sid, sess in list(self._sessions.items()):
            # a session answering a request right now is not idle, however long that request takes
            if now - sess.last_used > self.session_lease and not sess.lock.locked():
                self._end(sid)
                self.expired += 1
        for sid, asked in list(self._waiting.items()):
            if now - asked > WAIT_TTL:  # it stopped asking: it gives up its place
                del self._waiting[sid]

    def _admit(self, sid: str, now: float) -> "tuple[int, str, bytes] | None":
        """None when ``sid`` may open a session now, else the 503 answer (and ``sid`` keeps or
        takes its place in the queue). A free slot goes to the longest-waiting session first."""
        free = self.max_sessions - len(self._sessions) - self._building
        order = list(self._waiting)
        ahead = order.index(sid) if sid in self._waiting else len(order)
        if ahead < free:
            self._waiting.pop(sid, None)
            return None
        self._waiting[sid] = now  # an existing entry keeps its place; only its time moves
        self.refused += 1
        why = (
            "this server holds one policy instance (no factory)"
            if self.factory is None
            else "start it with a larger --max-sessions, or run fewer workers/lanes"
        )
        body = {
            "code": "too_many_sessions",
            "message": f"the server already holds {len(self._sessions)} live session(s), its maximum "
            f"({self.max_sessions}), and {ahead} other(s) wait before this one: {why}; ask again to keep "
            f"this place (a session not renewed for {self.session_lease:g} s is ended)",
            "retry_seconds": RETRY_SECONDS,
            "waiting_ahead": ahead,
        }
        return _json(503, {"version": VERSION, "error": body})

    def _end(self, sid: str) -> None:
        sess = self._sessions.pop(sid, None)
        if sess is not None:
            self._free.append(sess.policy)  # the next session's reset clears its episode state

    def _open(self, sid: str) -> "_Session | tuple[int, str, bytes]":
        """The session ``sid`` (opened if new); the caller holds the table lock, which is released
        while the factory builds a new instance (a model load must not stall other sessions)."""
        now = time.monotonic()
        self._expire(now)
        sess = self._sessions.get(sid)
        if sess is None:
            refused = self._admit(sid, now)
            if refused is not None:
                return refused
            if self._free:
                policy = self._free.pop()
            else:
                self._building += 1  # the slot is reserved while the lock is released
                self._sessions_lock.release()
                try:
                    policy = self.factory()
                except Exception as exc:
                    return _error(
                        500, "policy_error", f"building a policy for a new session raised {type(exc).__name__}: {exc}"
                    )
                finally:
                    self._sessions_lock.acquire()
                    self._building -= 1
                self._built.append(policy)
                if sid in self._sessions:  # the same id was opened meanwhile: keep the instance for later
                    self._free.append(policy)
                    sess = self._sessions[sid]
                    sess.last_used = now
                    return sess
            sess = self._sessions[sid] = _Session(policy)
        sess.last_used = now
        return sess

    # request handlers: each returns (status, content_type, body)
    def handle_info(self) -> tuple[int, str, bytes]:
        return _json(
            200,
            {
                "protocol": PROTOCOL,
                "version": VERSION,
                "policy": self.info,
                "sessions": {
                    "max": self.max_sessions,
                    "lease_seconds": self.session_lease,
                    "idle_seconds": self.session_lease,  # the older name of the lease
                    "renew": True,
                },
            },
        )

    def handle_end(self, body: bytes) -> tuple[int, str, bytes]:
        sid = _session_of(body, "end")
        if not isinstance(sid, str):
            return sid
        with self._sessions_lock:
            known = sid in self._sessions
            self._end(sid)
        return _json(200, {"version": VERSION, "ok": True, "ended": known})

    def handle_renew(self, body: bytes) -> tuple[int, str, bytes]:
        """Renew a live session's lease (its client is alive, its env busy between two actions)."""
        sid = _session_of(body, "renew")
        if not isinstance(sid, str):
            return sid
        with self._sessions_lock:
            now = time.monotonic()
            self._expire(now)
            sess = self._sessions.get(sid)
            if sess is None:
                return self._unknown_session(sid)
            sess.last_used = now
        return _json(200, {"version": VERSION, "ok": True, "lease_seconds": self.session_lease})

    def _unknown_session(self, sid: str) -> tuple[int, str, bytes]:
        return _error(
            409,
            "unknown_session",
            f"no live session {sid!r} on this server (ended, not renewed for "
            f"{self.session_lease:g} s, or never reset): reset starts one",
        )

    def handle_reset(self, body: bytes) -> tuple[int, str, bytes]:
        request = _json_request(body, "reset")
        if not isinstance(request, dict):
            return request
        instruction, seed = request.get("instruction"), request.get("seed")
        if not isinstance(instruction, str):
            return _error(400, "bad_request", "reset needs an 'instruction' string")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            return _error(400, "bad_request", f"reset 'seed' must be an int or null, got {seed!r}")
        sid, previous = request.get("session", ""), request.get("previous")
        bad = _check_session(sid, allow_empty=True) or (previous is not None and _check_session(previous))
        if bad:
            return _error(400, "bad_request", bad)
        with self._sessions_lock:
            if previous is not None and previous != sid:
                self._end(previous)  # the client's last episode is over: its instance is free again
            sess = self._open(sid)
            if not isinstance(sess, _Session):
                return sess
            sess.lock.acquire()  # taken before the table is released: expiry never ends a session mid-reset
        try:
            sess.policy.reset(instruction, seed=seed)
        except Exception as exc:  # the policy's failure goes back to the client, named
            return _error(500, "policy_error", f"policy.reset raised {type(exc).__name__}: {exc}")
        finally:
            sess.last_used = time.monotonic()
            sess.lock.release()
        return _json(200, {"version": VERSION, "ok": True, "session": sid})

    def handle_act(self, body: bytes) -> tuple[int, str, bytes]:
        try:
            obs = decode_observation(body, self.max_bytes)
        except ProtocolError as exc:
            code = "version_mismatch" if "protocol version" in str(exc) else "bad_request"
            return _error(400, code, str(exc))
        sid = obs.pop("session", "")  # the protocol's, not the policy's
        bad = _check_session(sid, allow_empty=True)
        if bad:
            return _error(400, "bad_request", bad)
        with self._sessions_lock:
            self._expire(time.monotonic())
            sess = self._sessions.get(sid)
            if sess is None and sid == "":
                sess = self._open(sid)  # an older client acting without a reset: one shared session
                if not isinstance(sess, _Session):
                    return sess
            if sess is None:
                return self._unknown_session(sid)
            sess.lock.acquire()
        try:
            action = np.asarray(sess.policy.act(obs))
        except Exception as exc:
            return _error(500, "policy_error", f"policy.act raised {type(exc).__name__}: {exc}")
        finally:
            sess.last_used = time.monotonic()
            sess.lock.release()
        try:
            return 200, CONTENT_TYPE, encode_action(action)
        except ProtocolError as exc:
            return _error(500, "policy_error", f"policy returned an invalid action: {exc}")


class _Session:
    """One episode's policy instance; ``lock`` serialises its requests."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.lock = threading.Lock()
        self.last_used = time.monotonic()


def _session_of(body: bytes, what: str) -> str | tuple[int, str, bytes]:
    """The session id a ``{"session": ...}`` request names, or the error reply to send instead."""
    request = _json_request(body, what)
    if not isinstance(request, dict):
        return request
    sid = request.get("session")
    bad = _check_session(sid)
    return _error(400, "bad_request", bad) if bad else sid


def _check_session(sid: Any, allow_empty: bool = False) -> str | None:
    """None when ``sid`` is a valid session id, else why not (one line)."""
    if isinstance(sid, str) and (
        sid == "" and allow_empty or 0 < len(sid) <= MAX_SESSION_ID and sid.isascii() and sid.isprintable()
    ):
        return None
    return f"'session' must be a string of 1..{MAX_SESSION_ID} printable ASCII characters, got {sid!r:.80}"


def _json_request(body: bytes, what: str) -> "dict[str, Any] | tuple[int, str, bytes]":
    """A JSON request body of this protocol version, or the error answer."""
    try:
        request = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return _error(400, "bad_request", f"{what} body is not UTF-8 JSON: {exc}")
    except RecursionError:
        return _error(400, "bad_request", f"{what} body JSON is nested too deeply")
    if not isinstance(request, dict):
        return _error(400, "bad_request", f"{what} body must be a JSON object")
    if request.get("version") != VERSION:
        return _error(
            400, "version_mismatch", f"request has version {request.get('version')!r}; server speaks {VERSION}"
        )
    return request


def _make_handler(server: PolicyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per episode, not per step
        server_version = f"{PROTOCOL}/{VERSION}"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
        timeout = server.request_timeout  # socket timeout: a silent client cannot hold a connection open

        def setup(self) -> None:
            super().setup()
            with server._connections_lock:
                server._connections.add(self.connection)

        def finish(self) -> None:
            with server._connections_lock:
                server._connections.discard(self.connection)
            super().finish()

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path.rstrip("/") == "/v1/info":
                self._send(*server.handle_info())
            else:
                self._send(*_error(404, "not_found", f"no endpoint GET {self.path}; try /v1/info"))

        def do_POST(self) -> None:  # noqa: N802
            routes = {
                "/v1/reset": server.handle_reset,
                "/v1/act": server.handle_act,
                "/v1/end": server.handle_end,
                "/v1/renew": server.handle_renew,
            }
            path = self.path.rstrip("/")
            route = routes.get(path)
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._send(*_error(411, "length_required", "POST needs a Content-Length header"), close=True)
                return
            if int(length) > server.max_bytes:
                self._send(
                    *_error(413, "too_large", f"body of {length} bytes exceeds the limit of {server.max_bytes}"),
                    close=True,
                )
                return
            if route is None:
                self._send(
                    *_error(
                        404, "not_found", f"no endpoint POST {self.path}; try /v1/reset, /v1/act, /v1/end or /v1/renew"
                    ),
                    close=True,
                )
                return
            content_type = self.headers.get_content_type()  # lower case, parameters dropped
            if content_type != REQUEST_TYPES[path]:
                self._send(
                    *_error(
                        415,
                        "unsupported_media_type",
                        f"POST {path} takes Content-Type "
                        f"{REQUEST_TYPES[path]}, got {self.headers.get('Content-Type') or 'none'}",
                    ),
                    close=True,
                )
                return
            try:
                body = self.rfile.read(int(length))
            except TimeoutError:  # headers arrived, the body did not: do not hold the connection forever
                self._send(
                    *_error(408, "request_timeout", f"the body did not arrive within {server.request_timeout:g} s"),
                    close=True,
                )
                return
            if len(body) != int(length):  # the client went away mid-body
                self.close_connection = True
                return
            self._send(*route(body))

        def send_response(self, code: int, message: str | None = None) -> None:
            # every reply states the policy's hash, errors included, and the stdlib's own error
            # pages too (send_error comes through here): see Identity in the module docstring
            super().send_response(code, message)
            if server.identity is not None:
                self.send_header(IDENTITY_HEADER, server.identity)

        def _send(self, status: int, content_type: str, body: bytes, close: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
            if server.log is not None:
                server.log(format % args)

    return Handler


def _json(status: int, payload: Mapping[str, Any]) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(payload).encode()


def _error(status: int, code: str, message: str) -> tuple[int, str, bytes]:
    return _json(status, {"version": VERSION, "error": {"code": code, "message": message}})


# -- client --------------------------------------------------------------------------------------
class PolicyClient:
    """Speaks the protocol to a server at ``url`` (``http://host:port``).

    Every request has a ``timeout`` (seconds). Failing to connect (server down, connection reset
    before an answer) is retried ``retries`` times with a doubling pause from ``backoff``; a timeout
    is not retried (the server may still be working on the request). Every failure raises
    :class:`RemotePolicyError` naming the URL and the cause.

    ``policy_hash``: the content hash every reply must state (see Identity in the module
    docstring; None checks nothing, as before a hash is pinned). A reply stating another raises
    :class:`PolicyIdentityChanged`, and so does every later call. ``stated_hash`` is what the
    last reply stated.

    ``busy_wait``: seconds a reset may wait for a full server (503 ``too_many_sessions``) to free a
    slot, asking again with a doubling pause capped by the server's ``retry_seconds``; 0 gives up
    at once. Waiting longer than ``say_after`` seconds is said through ``log`` (stderr by
    default), then every ``say_every`` seconds. A wait that runs out raises a transport
    :class:`RemotePolicyError` (the machinery's failure, never the policy's).
    """

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.2,
        max_bytes: int = MAX_MESSAGE_BYTES,
        policy_hash: str | None = None,
        busy_wait: float = 0.0,
        log: Callable[[str], None] | None = None,
        say_after: float = 2.0,
        say_every: float = 30.0,
    ):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"remote policy url must look like http://host:port, got {url!r}")
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise ValueError("timeout must be > 0, retries >= 0 and backoff >= 0")
        if not (isinstance(busy_wait, (int, float)) and math.isfinite(busy_wait) and busy_wait >= 0):
            raise ValueError(f"busy_wait must be a finite number of seconds >= 0, got {busy_wait!r}")
        self.url = f"http://{parsed.netloc}"
        self._host, self._port = parsed.hostname, parsed.port or 80
        self.timeout, self.retries, self.backoff, self.max_bytes = (
            float(timeout),
            int(retries),
            float(backoff),
            int(max_bytes),
        )
        self.policy_hash = policy_hash
        self.stated_hash: str | None = None
        self.busy_wait, self.say_after, self.say_every = float(busy_wait), float(say_after), float(say_every)
        self.log = log if log is not None else _say
        self._changed: PolicyIdentityChanged | None = None  # sticky: once changed, every call fails
        self._conn: http.client.HTTPConnection | None = None

    def info(self) -> dict[str, Any]:
        answer = self._json_answer(*self._request("GET", "/v1/info", None, None))
        if answer.get("protocol") != PROTOCOL:
            raise RemotePolicyError(
                f"{self.url} does not speak {PROTOCOL} (info says protocol={answer.get('protocol')!r})"
            )
        if answer.get("version") != VERSION:
            raise RemotePolicyError(
                f"{self.url} speaks {PROTOCOL} version {answer.get('version')!r}; this client speaks {VERSION}"
            )
        if not isinstance(answer.get("policy"), dict):
            raise RemotePolicyError(f"{self.url} answered /v1/info without a 'policy' object")
        return answer

    def reset(
        self, instruction: str, seed: int | None = None, session: str | None = None, previous: str | None = None
    ) -> None:
        """Start an episode; a full server is waited for (``busy_wait``), never taken for a failure."""
        request = {"version": VERSION, "instruction": instruction, "seed": seed}
        if session is not None:
            request["session"] = session
        if previous is not None:
            request["previous"] = previous
        body = json.dumps(request).encode()
        started = time.monotonic()
        pause, said = 0.05, 0.0
        while True:
            status, content_type, data = self._request("POST", "/v1/reset", body, "application/json")
            refusal = _refusal(status, data)
            if refusal is None:
                break
            waited = time.monotonic() - started
            hint = refusal.get("retry_seconds")
            cap = float(hint) if isinstance(hint, (int, float)) and 0 < hint <= 60 else RETRY_SECONDS
            pause = min(pause, cap)
            if waited + pause > self.busy_wait:
                raise RemotePolicyError(
                    f"{self.url} answered HTTP 503 too_many_sessions: {refusal.get('message', '')} "
                    f"(waited {waited:.1f} s of at most {self.busy_wait:g} s: busy_wait)",
                    transport=True,
                )
            if waited >= self.say_after and (not said or waited - said >= self.say_every):
                said = waited
                self.log(
                    f"remote policy at {self.url} is full ({refusal.get('waiting_ahead', '?')} waiting before "
                    f"this episode): waited {waited:.0f} s of at most {self.busy_wait:g} s for a free session"
                )
            time.sleep(pause)
            pause = min(pause * 2, cap)
        answer = self._json_answer(status, content_type, data)
        if answer.get("ok") is not True:
            raise RemotePolicyError(f"{self.url} answered /v1/reset without ok=true: {answer!r:.200}")

    def end(self, session: str) -> None:
        """End ``session`` on the server (its policy instance is free for the next episode)."""
        body = json.dumps({"version": VERSION, "session": session}).encode()
        self._json_answer(*self._request("POST", "/v1/end", body, "application/json"))

    def renew(self, session: str) -> None:
        """Renew ``session``'s lease on the server (raises 409 ``unknown_session`` if it is gone)."""
        body = json.dumps({"version": VERSION, "session": session}).encode()
        self._json_answer(*self._request("POST", "/v1/renew", body, "application/json"))

    def act(self, obs: Mapping[str, Any], session: str | None = None) -> np.ndarray:
        if session is not None:
            obs = {**obs, "session": session}
        status, content_type, body = self._request("POST", "/v1/act", encode_observation(obs), CONTENT_TYPE)
        if status != 200:
            self._json_answer(status, content_type, body)  # raises with the server's message
        try:
            return decode_action(body, self.max_bytes)
        except ProtocolError as exc:
            raise RemotePolicyError(f"{self.url} answered /v1/act with an invalid action message: {exc}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _check_identity(self, stated: str | None) -> None:
        """The reply's stated hash against the pinned one (see Identity); a change is sticky."""
        self.stated_hash = stated
        if self.policy_hash is not None and stated != self.policy_hash:
            self._changed = PolicyIdentityChanged(self.url, self.policy_hash, stated)
            self.close()
            raise self._changed

    def _request(self, method: str, path: str, body: bytes | None, content_type: str | None) -> tuple[int, str, bytes]:
        if self._changed is not None:  # nothing the new policy answers may count as the old one's
            raise self._changed
        headers = {"Content-Type": content_type} if content_type else {}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
                self._conn.request(method, path, body=body, headers=headers)
                response = self._conn.getresponse()
                length = response.getheader("Content-Length")
                if length is not None and length.isdigit() and int(length) > self.max_bytes:
                    self.close()
                    raise RemotePolicyError(
                        f"{self.url}{path} answered {length} bytes, over the limit of {self.max_bytes}"
                    )
                data = response.read(self.max_bytes + 1)
                if len(data) > self.max_bytes:
                    self.close()
                    raise RemotePolicyError(f"{self.url}{path} answered more than {self.max_bytes} bytes")
                if response.getheader("Connection", "").lower() == "close":
                    self.close()
                self._check_identity(response.getheader(IDENTITY_HEADER))
                return response.status, response.getheader("Content-Type", ""), data
            except TimeoutError:
                self.close()
                raise RemotePolicyError(
                    f"{self.url}{path} did not answer within {self.timeout:g} s", transport=True
                ) from None
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, OSError) as exc:
                # refused / reset / closed before an answer, or not HTTP at all: reconnect and retry
                self.close()
                last = exc
                if isinstance(exc, http.client.HTTPException) and not isinstance(exc, http.client.RemoteDisconnected):
                    break  # a server answering something that is not HTTP will not improve
            except http.client.HTTPException as exc:
                self.close()
                last = exc
                break
        raise RemotePolicyError(
            f"cannot reach the remote policy at {self.url}{path} after {attempt + 1} attempt(s): "
            f"{type(last).__name__}: {last}. Is `kosmos-env serve-policy` running there?",
            transport=not isinstance(last, http.client.HTTPException)
            or isinstance(last, http.client.RemoteDisconnected),
        )

    def _json_answer(self, status: int, content_type: str, body: bytes) -> dict[str, Any]:
        try:
            answer = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise RemotePolicyError(
                f"{self.url} answered HTTP {status} ({content_type or 'no content type'}) with a body that is not JSON: "
                f"{body[:80]!r}; is this a {PROTOCOL} server?"
            ) from None
        if not isinstance(answer, dict):
            raise RemotePolicyError(f"{self.url} answered HTTP {status} with JSON that is not an object")
        if status != 200 or "error" in answer:
            err = answer.get("error") if isinstance(answer.get("error"), dict) else {}
            code = err.get("code", "error")
            # the server lost or could not hold the session, or the request arrived late: the
            # machinery's failure (retried), not the policy's
            raise RemotePolicyError(
                f"{self.url} answered HTTP {status} {code}: {err.get('message', answer)}",
                transport=code in INFRASTRUCTURE_CODES,
            )
        return answer


def _refusal(status: int, body: bytes) -> dict[str, Any] | None:
    """The ``error`` object of a 503 ``too_many_sessions`` answer (a full server), else None."""
    if status != 503:
        return None
    try:
        answer = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    err = answer.get("error") if isinstance(answer, dict) else None
    return err if isinstance(err, dict) and err.get("code") == "too_many_sessions" else None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
