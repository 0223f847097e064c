"""Every way a box goes away ends in a decision, and time is the leader's own (issue 21),
with real daemons on three netns hosts.

- A box running a ``--lost-after 20s`` job is stopped cleanly (``floydd stop``) and its
  cable pulled: it is ``off``, its job kept as it was (``running``: a restart would re-adopt
  it), and 20 s after the stop (not before) the job is lost and reruns on another box.
- One box's clock runs 10 minutes ahead, another's 10 minutes behind (libfaketime, Debian
  package ``faketime``, preloaded into those daemons): jobs on both run to the end once,
  never ``unknown`` or ``lost``; a dataset version each of them uploads keeps exactly its
  two copies (no third copy, with the replica grace at 3 s); ``floydd members`` and
  ``floyd nodes`` report both skews and flag them, and the leader logs each once at WARNING.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from floydd.client import Client
from floydd.config import socket_path_for
from tests.conftest import wait_until
from tests.harness.netns import netns  # noqa: F401  (the fixture, registered for this module)
from tests.harness.netns import attempt, form, init_or_join, listed, submit

pytestmark = pytest.mark.slow

TIMINGS = {"FLOYDD_CLUSTER_HEARTBEAT": "0.5", "FLOYDD_NODE_SUSPECT_AFTER": "1", "FLOYDD_TAIL_INTERVAL": "0.05",
           "FLOYDD_SAMPLE_INTERVAL": "0.5", "FLOYDD_STOP_GRACE": "2", "FLOYDD_CHECKPOINT_INTERVAL": "0",
           "PYTHONUNBUFFERED": "1"}
LOST_AFTER = 20.0
LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))),
                   Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"))
FINAL = ("success", "failed", "stopped", "timeout", "lost")

TICKS = """\
import sys, time
for i in range(int(sys.argv[1])):
    print(f"tick {i}", flush=True)
    time.sleep(0.25)
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir(exist_ok=True)
    (project / "ticks.py").write_text(TICKS)
    return project


def test_a_box_stopped_cleanly_and_never_back_has_its_job_rerun_after_its_lost_after(netns, tmp_path):
    net = netns(3)
    boxes = form(net, tmp_path, ["0", "1", "1"], TIMINGS)        # box2 and box3: one fake GPU each
    client = boxes[0][3]
    key = submit(client, _project(tmp_path), "python ticks.py 100000", gpus=1, restart="on-lost",
                 max_attempts=3, lost_after=LOST_AFTER)
    placed = wait_until(lambda: (j := listed(client, key)).get("state") == "running" and j, timeout=60,
                        what="the job running")
    runner = int(placed["node"].removeprefix("box"))
    host, state, daemon, _ = boxes[runner - 1]
    stopping = time.monotonic()
    host.floydd(state, "stop")   # floydd stop
    net.cut(runner)                                              # ... and the machine never comes back
    wait_until(lambda: next(n for n in client.nodes() if n["name"] == placed["node"])["health"] == "off",
               timeout=15, what="the box listed off",
               details=lambda: f"{[n for n in client.nodes() if n['name'] == placed['node']]}; its log: "
                               f"{daemon.log_tail(3000)}")
    states = set()

    def rerun_running():
        j = listed(client, key)
        states.add(j.get("state") if j.get("attempts") == 1 else None)
        return j.get("attempts") == 2 and j.get("state") == "running" and j
    rerun = wait_until(rerun_running, timeout=LOST_AFTER + 40, interval=0.1, what="the job running again elsewhere")
    took = time.monotonic() - stopping
    assert rerun["node"] != placed["node"] and rerun["reruns"] == 1
    assert took >= LOST_AFTER, f"declared lost {took:.1f}s after the stop, inside its {LOST_AFTER:.0f}s window"
    assert took < LOST_AFTER + 20, f"rerun only {took:.1f}s after the stop"
    assert states <= {"running", None}, f"attempt 1 was {states} while its box was off (kept as it was)"
    history = [e["message"] for e in attempt(client.job, key)["events"]]
    assert any("was stopped (off) and not back" in line for line in history), history
    print(f"box off for good: the job reran on {rerun['node']} {took:.1f}s after floydd stop "
          f"(lost-after {LOST_AFTER:.0f}s)")


def test_boxes_ten_minutes_ahead_and_behind_lose_nothing_copy_nothing_and_are_reported(netns, tmp_path):
    assert LIBFAKETIME.exists(), "libfaketime is needed (Debian package faketime; .ci/run installs it)"
    net = netns(3)
    env = {**TIMINGS, "FLOYDD_REPLICA_GRACE": "3", "FLOYDD_STORE_SCRUB_RATE": "0"}
    # monotonic clocks move with the wall clock (libfaketime's default): a fixed shift, harmless
    skew = {1: {}, 2: {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "+10m"},
            3: {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": "-10m"}}
    daemons = []
    for i in (1, 2, 3):
        host, state = init_or_join(net, tmp_path, i)        # certificates made by box1, at the true time
        daemons.append(host.start_floydd(state, "--node-name", f"box{i}", "--dev-fake-gpus", "0" if i == 1 else "1",
                                         env={**env, **skew[i]}))
    client = Client(socket_path_for(daemons[0].state), timeout=30)
    wait_until(lambda: sum(n["health"] == "healthy" for n in attempt(client.nodes) or ()) == 3, timeout=60,
               what="three healthy boxes")

    def members() -> dict[str, dict]:
        return {m["name"]: m for m in (attempt(client.cluster) or {}).get("members", ())}
    reported = wait_until(lambda: (ms := members()) and sum(m.get("clock_offset") is not None
                                                            for m in ms.values()) == 3 and ms,
                          timeout=30, what="every box's clock measured")
    leader = next(name for name, m in reported.items() if m["leader"])
    ahead = {"box1": 0.0, "box2": 600.0, "box3": -600.0}
    for name, m in reported.items():              # against the leader's clock, whichever box leads
        want = ahead[name] - ahead[leader]
        assert abs(m["clock_offset"] - want) < 10 and m["clock_skewed"] == (abs(want) > 30), (name, m)
    # a job on each skewed box, long enough for many heartbeats and several stale windows
    project = _project(tmp_path)
    keys = [submit(client, project, "python ticks.py 40", gpus=1, lost_after=5) for _ in range(2)]
    running = wait_until(lambda: (js := [listed(client, k) for k in keys])
                         and all(j.get("state") == "running" for j in js) and js, timeout=60, what="both running")
    assert {j["node"] for j in running} == {"box2", "box3"}
    # a dataset version uploaded on each skewed box: two copies each, and no third ever
    refs = []
    for i in (2, 3):
        src = tmp_path / f"data{i}"
        src.mkdir()
        (src / "blob.bin").write_bytes(os.urandom(256 << 10))
        out = daemons[i - 1].floyd("data", "upload", str(src), "--name", f"from-box{i}").stdout
        assert "stored on 2 of 2 boxes" in out, out
        refs.append(f"from-box{i}")
    seen: dict[str, set[int]] = {ref: set() for ref in refs}

    def done() -> bool:
        for ref in refs:
            for v in attempt(client.datasets, ref) or ():
                seen[ref].add(len(v["holders"]))
        return all(listed(client, k).get("state") in FINAL for k in keys)
    wait_until(done, timeout=90, interval=0.5, what="both jobs to end")
    for key in keys:
        job = attempt(client.job, key)
        history = [e["message"] for e in job["events"]]
        assert (job["state"], job["attempts"], job["reruns"]) == ("success", 1, 0), (job["reason"], history)
        assert not any("→ unknown" in line or "→ lost" in line for line in history), history
    assert seen == {ref: {2} for ref in refs}, f"holders counts seen: {seen}"
    nodes = json.loads(daemons[0].floyd("nodes", "--json").stdout)
    assert {n["name"]: n["clock_skewed"] for n in nodes} == {name: name != leader for name in ahead}
    text = daemons[0].floyd("nodes")
    assert text.stdout.count("SKEWED") == 2 and text.stderr.count("'s clock is 10.0 min") == 2, text.stderr
    log = daemons[int(leader.removeprefix("box")) - 1].log_path.read_text(errors="replace")
    for name in ahead.keys() - {leader}:
        assert log.count(f"box {name}: its clock is") == 1, f"{name}'s skew logged once by the leader"
    for d in daemons:
        assert "CERTIFICATE_VERIFY_FAILED" not in d.log_path.read_text(errors="replace")
    print(f"clocks +10/-10 min: offsets {reported['box2']['clock_offset']:+.1f}s, "
          f"{reported['box3']['clock_offset']:+.1f}s; jobs ran once; two copies each")
