"""Fault matrix, policy server: hostile or broken clients get an HTTP answer, never a dropped
connection, and cannot hold a connection open (issue 18, item 12)."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

from kosmos_env.policies import make_policy
from kosmos_env.policies import protocol as P
from kosmos_env.policies.remote import RemotePolicy, policy_info


@pytest.fixture()
def served():
    policy = make_policy("random", seed=0)
    server = P.PolicyServer(policy, policy_info(policy), request_timeout=0.5).start()
    yield server
    server.close()


def _post(server, path, body, content_type):
    conn = http.client.HTTPConnection(*server.httpd.server_address[:2], timeout=10)
    try:
        headers = {} if content_type is None else {"Content-Type": content_type}
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_wrong_content_type_is_answered_415(served):
    reset = json.dumps({"version": 1, "instruction": "x", "seed": 0}).encode()
    for path, body, ctype in (
        ("/v1/reset", reset, "text/plain"),
        ("/v1/reset", reset, None),
        ("/v1/act", b"KPOL", "application/json"),
    ):
        status, answer = _post(served, path, body, ctype)
        assert status == 415 and answer["error"]["code"] == "unsupported_media_type", (path, ctype, answer)
    status, answer = _post(served, "/v1/reset", reset, "application/json; charset=utf-8")  # parameters are fine
    assert status == 200 and answer["ok"] is True


def test_deeply_nested_json_is_answered_400(served):
    for depth in (10_000, 200_000):
        status, answer = _post(served, "/v1/reset", b"[" * depth + b"]" * depth, "application/json")
        assert status == 400 and answer["error"]["code"] == "bad_request" and "nested" in answer["error"]["message"]
    # and inside a binary message's header
    header = b"[" * 20_000 + b"]" * 20_000
    message = P._PREFIX.pack(P.MAGIC, len(header)) + header
    status, answer = _post(served, "/v1/act", message, P.CONTENT_TYPE)
    assert status == 400 and "nested" in answer["error"]["message"]
    # the server still serves afterwards
    client = RemotePolicy(served.url)
    client.reset("put the carrot on the plate", seed=0)
    client.close()


def test_headers_without_a_body_time_out_with_408(served):
    sock = socket.create_connection(served.httpd.server_address[:2], timeout=30)
    try:
        sock.sendall(
            b"POST /v1/reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )  # ... and never the 100 bytes
        data = b""  # the socket's 30 s timeout fails the test if the server would wait for ever
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert b"request_timeout" in data
        assert sock.recv(4096) == b""  # and the connection is closed
    finally:
        sock.close()
