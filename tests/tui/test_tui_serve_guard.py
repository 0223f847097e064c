"""``floyd top --serve`` access rules: token, Host, Origin (pure; the real server: test_tui_serve.py)."""

from __future__ import annotations

import pytest

from floydd.tui.serve import make_guard, parse_address
from floydd.tui.serve_guard import Guard, allowed_netlocs, decide

GUARD = make_guard("127.0.0.1", 8000, token="T0KEN")
HOST = "127.0.0.1:8000"


def _decide(guard: Guard = GUARD, *, host=HOST, origin=None, path="/", query=None, cookie=None):
    return decide(guard, host=host, origin=origin, path=path, query=query or {}, cookie=cookie)


def test_a_request_without_token_or_cookie_is_refused():
    for path in ("/", "/ws", "/static/js/textual.js", "/download/x"):
        verdict = _decide(path=path)
        assert verdict.status == 403 and "token is needed" in verdict.reason


def test_a_wrong_token_or_cookie_is_refused():
    assert _decide(query={"token": "T0KEM"}).status == 403
    assert _decide(query={"token": ""}).status == 403
    assert _decide(path="/ws", cookie="not-the-session").status == 403
    assert _decide(path="/ws", cookie=GUARD.token).status == 403      # the cookie is not the URL token


def test_the_first_visit_with_the_token_gets_the_cookie_and_loses_the_token_from_the_url():
    verdict = _decide(query={"token": "T0KEN", "fontsize": "14"})
    assert verdict.status == 302 and verdict.set_cookie
    assert verdict.location == "http://127.0.0.1:8000/?fontsize=14"
    assert _decide(cookie=GUARD.session).status == 0                   # the page, with the cookie
    assert _decide(path="/ws", origin="http://127.0.0.1:8000", cookie=GUARD.session).status == 0
    assert _decide(path="/ws", query={"token": "T0KEN"}).status == 0   # the token works anywhere


def test_a_loopback_name_is_sent_to_the_printed_address_with_its_token():
    verdict = _decide(host="localhost:8000", query={"token": "T0KEN"})
    assert verdict.status == 302 and not verdict.set_cookie      # the cookie is set where the page will be
    assert verdict.location == "http://127.0.0.1:8000/?token=T0KEN"


@pytest.mark.parametrize("host", ["evil.example:8000", "127.0.0.1:8001", "127.0.0.1", "10.0.0.5:8000", "", None])
def test_a_foreign_host_is_refused_even_with_the_token(host):
    verdict = _decide(host=host, query={"token": "T0KEN"}, cookie=GUARD.session)
    assert verdict.status == 403 and "Host" in verdict.reason


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:9999", "https://127.0.0.1:8000",
                                    "http://localhost:8000", "null"])
def test_a_foreign_origin_is_refused_even_with_the_cookie(origin):
    verdict = _decide(path="/ws", origin=origin, cookie=GUARD.session)
    assert verdict.status == 403 and "Origin" in verdict.reason


def test_allowed_hosts_follow_the_listen_address():
    assert allowed_netlocs("127.0.0.1", 80) == {"127.0.0.1:80", "localhost:80", "[::1]:80"}
    assert allowed_netlocs("10.0.0.5", 8000) == {"10.0.0.5:8000"}
    everywhere = allowed_netlocs("0.0.0.0", 8000, machine_names=("box1", "10.0.0.5"))
    assert everywhere == {"box1:8000", "10.0.0.5:8000", "127.0.0.1:8000", "localhost:8000", "[::1]:8000"}


def test_each_server_gets_its_own_token_and_session():
    a, b = make_guard("127.0.0.1", 8000), make_guard("127.0.0.1", 8000)
    assert len(a.token) >= 24 and a.token != b.token and a.session != b.session and a.token != a.session


def test_host_flag_wins_over_the_serve_address():
    assert parse_address("127.0.0.1:8000", "0.0.0.0") == ("0.0.0.0", 8000)
    assert parse_address("9000", None) == ("127.0.0.1", 9000)
