"""Personal API tokens over the API, against a real daemon: made for the caller, listed
without their secrets, revoked (the replicated record the TLS edge would check)."""

from __future__ import annotations

from floydd.cluster.state.apitokens import parse_api_token
from tests.integration.api._daemon import Api


def test_a_token_is_made_listed_without_its_secret_and_revoked(api: Api) -> None:
    status, me, _ = api.call("GET", "/v1/whoami")
    assert status == 200 and me["person"]
    status, made, _ = api.call("POST", "/v1/tokens", json={"label": "laptop", "ttl": 3600})
    assert status == 201 and made["person"] == me["person"] and made["state"] == "valid"
    token_id, secret = parse_api_token(made["token"])
    status, listed, raw = api.call("GET", "/v1/tokens")
    assert status == 200 and token_id in [t["id"] for t in listed] and secret not in raw
    status, revoked, _ = api.call("DELETE", f"/v1/tokens/{token_id}")
    assert status == 200 and revoked["state"] == "revoked" and revoked["revoked_by"] == me["person"]
    status, listed, _ = api.call("GET", "/v1/tokens")
    assert {t["id"]: t["state"] for t in listed}[token_id] == "revoked"


def test_bad_token_requests_get_clear_errors(api: Api) -> None:
    status, err, _ = api.call("POST", "/v1/tokens", json={"ttl": -1})
    assert status == 400 and "ttl" in err["error"]["message"]
    status, err, _ = api.call("DELETE", "/v1/tokens/" + "e" * 16)
    assert status == 404 and err["error"]["code"] == "token_not_found"
