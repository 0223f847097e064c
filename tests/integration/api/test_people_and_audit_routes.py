"""People in the listings and the audit chain over the API, against a real daemon: the
jobs listing filtered by owner on the daemon's side, GPU holders named by person, and
``/v1/audit`` listing the seeded changes with ``/v1/audit/verify`` passing."""

from __future__ import annotations

from floydd.cluster.state.audit import verify
from tests.integration.api._daemon import Api


def _owner(api: Api) -> str:
    status, job, _ = api.call("GET", "/v1/jobs/seed/1")
    assert status == 200 and job["user"]
    return job["user"]


def test_the_jobs_listing_is_filtered_by_owner_by_the_daemon(api: Api) -> None:
    me = _owner(api)
    status, jobs, _ = api.call("GET", "/v1/jobs", params={"user": me})
    assert status == 200 and "seed/1" in [j["id"] for j in jobs] and {j["user"] for j in jobs} == {me}
    status, jobs, _ = api.call("GET", "/v1/jobs", params={"user": "nobody-" + me, "limit": "5"})
    assert (status, jobs) == (200, [])


def test_the_audit_lists_the_seeded_changes_with_who_made_them_and_verifies(api: Api) -> None:
    me = _owner(api)
    status, entries, _ = api.call("GET", "/v1/audit")
    assert status == 200
    submits = [e for e in entries if e["op"] == "job.submit" and "job=seed/1" in e["what"]]
    assert len(submits) == 1 and submits[0]["who"] == me
    assert verify(entries) == (len(entries), None)
    status, check, _ = api.call("GET", "/v1/audit/verify")
    assert status == 200 and check["ok"] and check["entries"] == len(entries)
    assert check["head"] == entries[-1]["hash"]
    status, later, _ = api.call("GET", "/v1/audit", params={"since": str(entries[-1]["ts"] + 1e6)})
    assert (status, later) == (200, [])


def test_the_head_an_auditor_records_is_checked_by_verify_and_a_malformed_one_refused_plainly(api: Api) -> None:
    status, entries, _ = api.call("GET", "/v1/audit")
    status, head, _ = api.call("GET", "/v1/audit/head")
    newest = entries[-1]
    assert status == 200 and head["ok"] and head["finding"] is None
    assert (head["seq"], head["hash"], head["index"], head["ts"]) == (newest["seq"], newest["hash"], newest["index"],
                                                                      newest["ts"])
    assert head["head"] == f"{newest['seq']}:{newest['hash']}" and head["entries"] == len(entries)
    status, check, _ = api.call("GET", "/v1/audit/verify", params={"head": head["head"]})
    assert status == 200 and check["ok"] and check["against"] == head["head"]
    status, check, _ = api.call("GET", "/v1/audit/verify", params={"head": newest["hash"]})   # the hash alone
    assert status == 200 and check["ok"]
    # a head this chain does not hold: another hash at that seq, a seq past its end
    for other, first_bad in ((f"{newest['seq']}:{'0' * 63}1", newest["seq"]),
                             (f"{newest['seq'] + 5}:{newest['hash']}", len(entries) + 1)):
        status, check, _ = api.call("GET", "/v1/audit/verify", params={"head": other})
        assert status == 200 and not check["ok"] and check["first_bad"] == first_bad, check
        assert check["finding"] and check["against"] == other
    for bad in ("42", f"x:{newest['hash']}", newest["hash"][:40]):
        status, answer, _ = api.call("GET", "/v1/audit/verify", params={"head": bad})
        assert status == 400 and answer["error"]["code"] == "bad_head", answer
        assert "SEQ:HASH" in answer["error"]["hint"]
