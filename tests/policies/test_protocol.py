"""The remote-policy wire protocol: codec validation, server error answers, client failure modes."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import numpy as np
import pytest

from kosmos_env.policies import make_policy
from kosmos_env.policies import protocol as P
from kosmos_env.policies.remote import policy_info


def _obs(h=8, w=6):
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
        "instruction": "put the carrot on the plate",
        "ee_pos": np.array([0.1, -0.2, 0.3], np.float32),
        "gripper": np.array([0.75], np.float32),
    }


def _frame(header: dict, payload: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<4sI", b"KPOL", len(raw)) + raw + payload


# -- codec ---------------------------------------------------------------------------------------
def test_observation_round_trip_is_exact_and_framing_is_as_documented():
    obs = _obs()
    data = P.encode_observation(obs)
    # the documented framing: magic, u32 LE header length, JSON header, raw arrays in order
    assert data[:4] == b"KPOL"
    (n,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8 : 8 + n])
    assert header["version"] == 1 and header["kind"] == "observation"
    assert header["fields"] == {"instruction": "put the carrot on the plate"}
    assert [a["name"] for a in header["arrays"]] == ["image", "ee_pos", "gripper"]
    assert header["arrays"][0] == {"name": "image", "dtype": "<u1", "shape": [8, 6, 3]}
    assert data[8 + n : 8 + n + obs["image"].nbytes] == obs["image"].tobytes()
    assert len(data) == 8 + n + obs["image"].nbytes + 12 + 4

    back = P.decode_observation(data)
    assert back["instruction"] == obs["instruction"]
    for key in ("image", "ee_pos", "gripper"):
        assert back[key].dtype == obs[key].dtype
        np.testing.assert_array_equal(back[key], obs[key])
    back["image"][0, 0, 0] ^= 1  # decoded arrays are writable copies
    assert "pickle" not in P.__doc__.lower().replace("nothing is ever pickled", "")


def test_action_round_trip_for_single_actions_and_chunks():
    one = np.arange(7, dtype=np.float32) / 10
    chunk = np.arange(28, dtype=np.float32).reshape(4, 7) / 100
    np.testing.assert_array_equal(P.decode_action(P.encode_action(one)), one)
    out = P.decode_action(P.encode_action(chunk))
    assert out.shape == (4, 7) and out.dtype == np.float32
    np.testing.assert_array_equal(out, chunk)
    # big-endian input is carried as little-endian, same values
    np.testing.assert_array_equal(P.decode_action(P.encode_action(one.astype(">f4"))), one)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: b"XXXX" + d[4:], "does not start with"),
        (lambda d: d[:6], "shorter than"),
        (lambda d: d + b"\x00", "beyond the declared arrays"),
        (lambda d: d[:-1], "needs 28 bytes"),
        (lambda d: d[:4] + struct.pack("<I", 10**6) + d[8:], "too large or runs past"),
    ],
)
def test_decoder_rejects_broken_framing(mutate, match):
    data = P.encode_action(np.zeros(7, np.float32))
    with pytest.raises(P.ProtocolError, match=match):
        P.decode_action(mutate(data))


@pytest.mark.parametrize(
    "header, payload, match",
    [
        ({"version": 2, "kind": "action", "fields": {}, "arrays": []}, b"", "protocol version 2"),
        ({"version": 1, "kind": "observation", "fields": {}, "arrays": []}, b"", "expected a 'action' message"),
        (
            {"version": 1, "kind": "action", "fields": {}, "arrays": [{"name": "action", "dtype": "|O", "shape": [7]}]},
            b"",
            "dtype",
        ),
        (
            {
                "version": 1,
                "kind": "action",
                "fields": {},
                "arrays": [{"name": "action", "dtype": "<f4", "shape": [-7]}],
            },
            b"",
            "shape",
        ),
        (
            {
                "version": 1,
                "kind": "action",
                "fields": {},
                "arrays": [{"name": "action", "dtype": "<f4", "shape": [1, 1, 1, 1, 7]}],
            },
            b"",
            "shape",
        ),
        (
            {
                "version": 1,
                "kind": "action",
                "fields": {},
                "arrays": [{"name": "action", "dtype": "<f8", "shape": [7]}],
            },
            bytes(56),
            "float32",
        ),
        (
            {
                "version": 1,
                "kind": "action",
                "fields": {},
                "arrays": [{"name": "action", "dtype": "<f4", "shape": [6]}],
            },
            bytes(24),
            r"shape \(7,\)",
        ),
        (
            {"version": 1, "kind": "action", "fields": {}, "arrays": [{"name": "act", "dtype": "<f4", "shape": [7]}]},
            bytes(28),
            "exactly one array",
        ),
        (
            {
                "version": 1,
                "kind": "action",
                "fields": {},
                "arrays": [{"name": "action", "dtype": "<f4", "shape": [7]}],
            },
            np.array([0, 0, np.nan, 0, 0, 0, 1], np.float32).tobytes(),
            "NaN",
        ),
    ],
)
def test_decoder_rejects_bad_headers_dtypes_shapes_and_values(header, payload, match):
    with pytest.raises(P.ProtocolError, match=match):
        P.decode_action(_frame(header, payload))


def test_observation_needs_uint8_rgb_image_and_instruction():
    bad_image = dict(_obs(), image=np.zeros((4, 4), np.uint8))
    with pytest.raises(P.ProtocolError, match=r"\(H, W, 3\) uint8"):
        P.encode_observation(bad_image)
    with pytest.raises(P.ProtocolError, match="instruction"):
        P.encode_observation({k: v for k, v in _obs().items() if k != "instruction"})
    with pytest.raises(P.ProtocolError, match="dtype"):
        P.encode_observation(dict(_obs(), mask=np.zeros(3, bool)))


def test_oversize_messages_are_rejected_on_both_sides():
    data = P.encode_observation(_obs(64, 64))
    with pytest.raises(P.ProtocolError, match="at most 1000"):
        P.decode_observation(data, max_bytes=1000)
    huge = np.zeros((P.MAX_MESSAGE_BYTES // 3 + 8, 1, 3), np.uint8)  # not a valid image side either
    with pytest.raises(P.ProtocolError):
        P.encode_observation({"image": huge, "instruction": "x"})


# -- server answers ------------------------------------------------------------------------------
@pytest.fixture()
def served():
    policy = make_policy("random", seed=0)
    server = P.PolicyServer(policy, policy_info(policy), max_bytes=200_000).start()
    yield server
    server.close()


def _raw(server, method, path, body=None, headers=None):
    import http.client

    conn = http.client.HTTPConnection(*server.httpd.server_address[:2], timeout=5)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def test_server_answers_documented_errors(served):
    status, body = _raw(served, "GET", "/v1/nope")
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    act, js = {"Content-Type": P.CONTENT_TYPE}, {"Content-Type": "application/json"}
    status, body = _raw(served, "POST", "/v1/act", body=b"garbage-garbage", headers=act)
    assert status == 400 and "KPOL" in json.loads(body)["error"]["message"]
    status, body = _raw(served, "POST", "/v1/act", body=bytes(300_000), headers=act)
    assert status == 413 and json.loads(body)["error"]["code"] == "too_large"
    status, body = _raw(
        served, "POST", "/v1/reset", body=json.dumps({"version": 9, "instruction": "x"}).encode(), headers=js
    )
    assert status == 400 and json.loads(body)["error"]["code"] == "version_mismatch"
    status, body = _raw(
        served,
        "POST",
        "/v1/reset",
        body=json.dumps({"version": 1, "instruction": "x", "seed": "s"}).encode(),
        headers=js,
    )
    assert status == 400 and "seed" in json.loads(body)["error"]["message"]
    status, body = _raw(served, "GET", "/v1/info")
    info = json.loads(body)
    assert status == 200 and info["protocol"] == "kosmos-policy" and info["version"] == 1
    assert info["policy"]["name"] == "random" and len(info["policy"]["content_hash"]) == 64


def test_policy_exception_becomes_a_named_500_error():
    class Broken:
        name = "broken"

        def reset(self, instruction, seed=None):
            pass

        def act(self, obs):
            raise KeyError("no camera")

    with P.PolicyServer(Broken(), {"name": "broken", "content_hash": "0" * 64}) as server:
        client = P.PolicyClient(server.url, timeout=5)
        client.reset("x")
        with pytest.raises(P.RemotePolicyError, match=r"500 policy_error: policy.act raised KeyError"):
            client.act(_obs())
        client.close()


def test_server_rejects_an_invalid_action_from_its_policy():
    class Wrong:
        def reset(self, instruction, seed=None):
            pass

        def act(self, obs):
            return np.zeros(6, np.float32)

    with P.PolicyServer(Wrong(), {"name": "wrong"}) as server:
        client = P.PolicyClient(server.url, timeout=5)
        with pytest.raises(P.RemotePolicyError, match="invalid action"):
            client.act(_obs())
        client.close()


# -- client failure modes: clear errors, bounded time ------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dead_server_gives_a_clear_error_after_bounded_retries():
    port = _free_port()  # nothing listens there any more
    t0 = time.perf_counter()
    with pytest.raises(
        P.RemotePolicyError, match=rf"cannot reach the remote policy at http://127.0.0.1:{port}/v1/info after 3 attempt"
    ):
        make_policy("remote", url=f"http://127.0.0.1:{port}", retries=2, backoff=0.05, timeout=2)
    assert time.perf_counter() - t0 < 2.0


def _http(body: bytes, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


class _RawServer:
    """A TCP server on loopback that answers every connection with ``reply`` (or nothing)."""

    def __init__(self, reply: bytes | None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.reply, self.stop, self.conns = reply, False, []
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _loop(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            try:
                conn.recv(65536)
                if self.reply is not None:
                    conn.sendall(self.reply)
                    conn.close()
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.thread.join(timeout=2)
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize(
    "reply, match",
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n", "BadStatusLine|not HTTP|cannot reach"),
        (_http(b"not json!"), "not JSON"),
        (_http(b'{"protocol": "other", "x": 1111}'), "does not speak kosmos-policy"),
        (_http(b'{"protocol": "kosmos-policy", "version": 2}'), "version 2"),
        (_http(b'{"error": {"code": "x"}}', status=b"503 Busy"), "HTTP 503 x"),
        (b"", "cannot reach"),  # accepts, then closes without a word
    ],
)
def test_garbage_answers_give_clear_errors_not_hangs(reply, match):
    server = _RawServer(reply)
    try:
        t0 = time.perf_counter()
        with pytest.raises(P.RemotePolicyError, match=match):
            make_policy("remote", url=server.url, retries=1, backoff=0.05, timeout=2)
        assert time.perf_counter() - t0 < 3.0
    finally:
        server.close()


def test_garbage_action_answer_is_rejected():
    policy = make_policy("random", seed=0)
    with P.PolicyServer(policy, policy_info(policy)) as good:
        client = P.PolicyClient(good.url, timeout=2)
        client.info()
    raw = _RawServer(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-kosmos-policy\r\nContent-Length: 8\r\n\r\nKPOL\x00\x00\x00\x00"
    )
    try:
        client = P.PolicyClient(raw.url, timeout=2, retries=0)
        with pytest.raises(P.RemotePolicyError, match="invalid action message"):
            client.act(_obs())
    finally:
        raw.close()


def test_silent_server_times_out_instead_of_hanging():
    server = _RawServer(None)  # reads the request, never answers
    try:
        t0 = time.perf_counter()
        with pytest.raises(P.RemotePolicyError, match=r"did not answer within 0.5 s"):
            make_policy("remote", url=server.url, timeout=0.5)
        assert time.perf_counter() - t0 < 2.0  # a timeout is not retried
    finally:
        server.close()


def test_client_rejects_non_http_urls():
    with pytest.raises(ValueError, match="http://host:port"):
        P.PolicyClient("ftp://example")


def test_protocol_module_works_alone_with_numpy_only(tmp_path):
    """What examples/octo_server.py relies on: protocol.py copied anywhere, no kosmos_env installed."""
    import py_compile
    import shutil
    import subprocess
    import sys

    from tests.support.paths import ROOT as root

    shutil.copy(root / "policies" / "protocol.py", tmp_path / "protocol.py")
    py_compile.compile(str(root / "examples" / "octo_server.py"), doraise=True)
    script = (
        "import sys, numpy as np, protocol\n"
        "class Echo:\n"
        "    def reset(self, instruction, seed=None): pass\n"
        "    def act(self, obs): return np.full((4, 7), obs['image'].mean() / 255, np.float32)\n"
        "with protocol.PolicyServer(Echo(), {'name': 'echo', 'content_hash': 'x'}) as s:\n"
        "    c = protocol.PolicyClient(s.url, timeout=5); c.reset('go', 1)\n"
        "    a = c.act({'image': np.full((4, 4, 3), 51, np.uint8), 'instruction': 'go'})\n"
        "assert a.shape == (4, 7) and abs(float(a[0, 0]) - 0.2) < 1e-6\n"
        "heavy = [m for m in ('kosmos_env', 'torch', 'gymnasium') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
