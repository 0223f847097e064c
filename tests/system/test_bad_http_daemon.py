"""The daemon's own socket answers malformed HTTP with the API's JSON error (floydd.api.badhttp)."""

from __future__ import annotations

import json
import socket

from floydd.config import socket_path_for


def test_a_request_line_over_8_kib_on_the_daemons_socket_gets_json(daemon):
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(socket_path_for(daemon.state)))
        conn.sendall(b"GET /v1/jobs?x=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: floydd\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"414", answer[:300]
    assert b"application/json" in head
    error = json.loads(body)["error"]
    assert error["code"] == "request_line_too_long" and error["hint"]
    assert daemon.proc.poll() is None
