"""The single-box story with real processes: daemon, CLI, agents, bubblewrap."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from floydd.agent.status import read_status
from tests.conftest import wait_until

BWRAP = shutil.which("bwrap") is not None


def _job(d, key):
    return d.client.job(key)


def _final(d, key, timeout=60):
    return wait_until(lambda: (j := _job(d, key))["state"] in
                      {"success", "failed", "stopped", "timeout", "lost"} and j, timeout=timeout,
                      what=f"{key} to end")


def test_success_records_params_metrics_logs_and_output(daemon):
    (daemon.project / "train.py").write_text(
        "import os, json\n"
        "for i in range(5):\n"
        "    print(json.dumps({'metric': 'loss', 'value': 1.0 / (i + 1), 'step': i}))\n"
        "print('lr is', os.environ['lr'])\n"
        "out = os.environ['FLOYD_OUTPUT']\n"
        "open(os.path.join(out, 'model.txt'), 'w').write('weights')\n")
    job = json.loads(daemon.floyd("run", "--json", "--param", "lr=0.5", "-m", "first",
                                  "python train.py").stdout)
    assert job["id"] == "proj/1" and job["params"] == {"lr": "0.5"}
    done = _final(daemon, "proj/1")
    assert done["state"] == "success", done
    assert done["exit_code"] == 0
    assert done["metrics"]["loss"]["count"] == 5
    assert done["metrics"]["loss"]["last"] == pytest.approx(0.2)
    assert done["output_version"] == "proj/1/output:1"
    logs = daemon.floyd("logs", "proj/1").stdout
    assert "lr is 0.5" in logs
    stamped = daemon.floyd("logs", "-t", "1").stdout
    assert stamped.splitlines()[-1].startswith(time.strftime("%Y-"))
    out = daemon.project.parent / "out"
    daemon.floyd("output", "proj/1", str(out))
    assert (out / "model.txt").read_text() == "weights"
    status = daemon.floyd("status").stdout
    assert "proj/1" in status and "success" in status and "loss=0.2" in status


def test_failure_stop_and_timeout_set_the_right_state_and_keep_logs(daemon):
    daemon.floyd("run", "python -c \"print('about to fail'); raise SystemExit(3)\"")
    daemon.floyd("run", "--max-runtime", "1", "python -c \"print('slow', flush=True); import time; time.sleep(60)\"")
    daemon.floyd("run", "python -c \"print('waiting', flush=True); import time; time.sleep(60)\"")
    failed = _final(daemon, "proj/1")
    assert (failed["state"], failed["exit_code"]) == ("failed", 3)
    assert "about to fail" in daemon.floyd("logs", "proj/1").stdout
    timed = _final(daemon, "proj/2")
    assert timed["state"] == "timeout" and "max-runtime" in timed["reason"]
    assert "slow" in daemon.floyd("logs", "proj/2").stdout
    wait_until(lambda: "waiting" in daemon.floyd("logs", "proj/3").stdout, what="job 3 to print")
    daemon.floyd("stop", "proj/3")
    stopped = _final(daemon, "proj/3")
    assert stopped["state"] == "stopped" and "user" in stopped["reason"]
    assert "waiting" in daemon.floyd("logs", "proj/3").stdout


def test_data_mounts_are_read_only_and_the_job_sees_its_gpus(daemon):
    data = daemon.project.parent / "data"
    data.mkdir()
    (data / "a.txt").write_text("hello")
    daemon.floyd("data", "upload", str(data), "--name", "ds")
    script = (
        "import os\n"
        "inp = os.environ['FLOYD_INPUT']\n"
        "print('read', open(os.path.join(inp, 'a.txt')).read())\n"
        "try:\n"
        "    open(os.path.join(inp, 'b.txt'), 'w').write('x'); print('WROTE INPUT')\n"
        "except OSError as e:\n"
        "    print('input is read-only', e.errno)\n"
        "print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])\n")
    (daemon.project / "probe.py").write_text(script)
    daemon.floyd("run", "--gpu", "--data", "ds:/input", "python probe.py")
    done = _final(daemon, "proj/1")
    logs = daemon.floyd("logs", "proj/1").stdout
    assert done["state"] == "success", logs
    assert "read hello" in logs
    if BWRAP:
        assert "input is read-only" in logs and "WROTE INPUT" not in logs
    assert "gpus=0" in logs
    assert done["data"][0]["ref"] == "ds:1" and done["gpus"] == [0]


@pytest.mark.skipif(not BWRAP, reason="isolation between jobs of one user needs bubblewrap")
def test_a_job_cannot_read_another_jobs_workspace(daemon):
    daemon.floyd("run", "python -c \"open('/output/secret', 'w').write('s3cret'); import time; time.sleep(60)\"")
    first = wait_until(lambda: (j := _job(daemon, "proj/1"))["state"] == "running" and j, what="job 1 running")
    secret = os.path.join(first["workspace"], "output", "secret")
    wait_until(lambda: os.path.exists(secret), what="secret written")
    daemon.floyd("run", f"python -c \"print(open({secret!r}).read())\"")
    second = _final(daemon, "proj/2")
    logs = daemon.floyd("logs", "proj/2").stdout
    assert second["state"] == "failed" and "s3cret" not in logs
    daemon.floyd("stop", "proj/1")


def test_gpu_queue_says_what_a_job_waits_for(daemon):
    daemon.floyd("run", "--gpu", "2", "python -c \"import time; time.sleep(60)\"")
    wait_until(lambda: _job(daemon, "proj/1")["state"] == "running", what="job 1 running")
    daemon.floyd("run", "--gpu", "python -c pass")
    waiting = wait_until(lambda: (j := _job(daemon, "proj/2"))["waiting_for"] and j, what="job 2 to wait")
    assert waiting["state"] == "queued"
    assert "waiting for 1 GPU" in waiting["waiting_for"] and "proj/1" in waiting["waiting_for"]
    assert "waiting for 1 GPU" in daemon.floyd("status").stdout
    daemon.floyd("stop", "proj/1")
    assert _final(daemon, "proj/2")["state"] == "success"


def test_daemon_killed_during_a_run_job_finishes_and_is_recorded_after_restart(daemon):
    (daemon.project / "job.py").write_text(
        "import json, os, time, sys\n"
        "while not os.path.exists('go'): time.sleep(0.02)\n"
        "for i in range(3): print(json.dumps({'metric': 'acc', 'value': i / 10, 'step': i}))\n"
        "open(os.path.join(os.environ['FLOYD_OUTPUT'], 'done'), 'w').write('yes')\n")
    daemon.floyd("run", "python job.py")
    wait_until(lambda: _job(daemon, "proj/1")["state"] == "running", what="job running")
    daemon.kill(signal.SIGKILL)
    workspace = next(daemon.state.glob("jobs/proj/1"))
    (workspace / "code" / "go").write_text("go")  # the job waits for it in its working dir
    wait_until(lambda: (status := read_status(workspace)) is not None and status.exited,
               what="agent to finish without the daemon")
    daemon.start()
    done = _final(daemon, "proj/1")
    assert done["state"] == "success"
    assert done["metrics"]["acc"]["count"] == 3
    assert done["output_version"] == "proj/1/output:1"


@pytest.mark.parametrize("args,needle", [
    (["run", "--data", "nope:/input", "python x.py"], "nope"),
    (["run", "--data", "mnist", "python x.py"], "NAME[:VERSION]:MOUNT"),
    (["run", "--data", "ds:/etc", "python x.py"], "/etc"),
    (["run", ""], "command is empty"),
    (["run", "--param", "lr", "python x.py"], "KEY=VALUE"),
    (["run", "--gpu", "3", "python x.py"], "no node has 3 GPUs"),
    (["run", "--nodes", "2", "python x.py"], "it needs 2 nodes, the cluster has 1"),
    (["run", "--nodes", "2", "bash x.sh"], "must start with python or torchrun"),
    (["run", "--nodes", "0", "python x.py"], "at least one box"),
    (["logs", "proj/99"], "proj/99"),
    (["info", "nope/1"], "nope/1"),
    (["stop", "banana"], "PROJECT/NUMBER"),
    (["data", "clone", "ghost:7"], "ghost"),
    (["data", "upload", "/definitely/not/here", "--name", "x"], "does not exist"),
])
def test_bad_input_is_one_clear_line_without_traceback(daemon, args, needle):
    res = daemon.floyd(*args, check=False)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr + res.stdout
    assert res.stderr.startswith("error: ") and needle in res.stderr, res.stderr
    assert "hint:" in res.stderr


def test_code_folder_over_the_limit_is_refused(daemon):
    daemon.kill(signal.SIGTERM)
    daemon.env["FLOYDD_MAX_CODE_MB"] = "1"
    daemon.start()
    (daemon.project / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    res = daemon.floyd("run", "python -c pass", check=False)
    assert res.returncode == 1 and "floyd data" in res.stderr and "Traceback" not in res.stderr
    (daemon.project / ".floydignore").write_text("big.bin\n")
    daemon.floyd("run", "python -c pass")


def test_second_daemon_on_the_same_state_dir_refuses(daemon):
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir", str(daemon.state)],
                         env=daemon.env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert f"already running on {daemon.state}" in res.stderr and "Traceback" not in res.stderr


def test_floyd_starts_a_daemon_when_none_runs_and_says_so_once(tmp_path):
    state = tmp_path / "auto"
    env = {**os.environ, "FLOYDD_STATE_DIR": str(state)}
    env.pop("FLOYD_HOST", None)
    try:
        first = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "nodes"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        assert "started a single-node floydd" in first.stderr
        second = subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "nodes"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and "started" not in second.stderr
        assert (state / "floydd.log").exists()
    finally:
        subprocess.run([sys.executable, "-m", "floydd.cli.floydd", "stop", "--state-dir", str(state)],
                       env=env, capture_output=True, timeout=60)


def _serve_tcp(daemon) -> str:
    import socket as _socket
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon.kill(signal.SIGTERM)
    daemon.start("--dev-tcp", f"127.0.0.1:{port}")
    return f"127.0.0.1:{port}"


def test_tcp_api_needs_the_token(daemon):
    env = {**daemon.env, "FLOYD_HOST": _serve_tcp(daemon)}
    run = lambda extra: subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "nodes", "--json"],  # noqa: E731
                                       env={**env, **extra}, capture_output=True, text=True, timeout=60)
    denied = run({})
    assert denied.returncode == 1 and "API token" in denied.stderr and "Traceback" not in denied.stderr
    token = (daemon.state / "api-token").read_text().strip()
    assert oct((daemon.state / "api-token").stat().st_mode & 0o777) == "0o600"
    allowed = run({"FLOYD_TOKEN": token})
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)[0]["gpu_source"] == "fake"


def test_tcp_refuses_non_loopback_addresses(daemon):
    res = subprocess.run([sys.executable, "-m", "floydd.cli.floydd", "start", "--state-dir",
                          str(daemon.state.parent / "other"), "--dev-tcp", "0.0.0.0:7654"],
                         env=daemon.env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "loopback" in res.stderr and "Traceback" not in res.stderr


def test_over_floyd_host_the_code_is_sent_not_read_from_the_daemons_disk(daemon, tmp_path):
    """A laptop talking to a box through an SSH tunnel: its project folder is not on the box,
    so floyd sends it as a tar (.floydignore honoured) and the job runs that snapshot."""
    host = _serve_tcp(daemon)
    env = {**daemon.env, "FLOYD_HOST": host, "FLOYD_TOKEN": (daemon.state / "api-token").read_text().strip()}
    laptop = tmp_path / "laptop-proj"
    laptop.mkdir()
    subprocess.run([sys.executable, "-m", "floydd.cli.floyd", "init", "remote"], cwd=laptop, env=env, check=True,
                   capture_output=True, timeout=60)
    (laptop / "train.py").write_text("import os\nprint('files:', sorted(os.listdir('.')))\n"
                                     "print(open(os.path.join(os.environ['FLOYD_INPUT'], 'n.txt')).read())\n"
                                     "open(os.path.join(os.environ['FLOYD_OUTPUT'], 'model.bin'), 'wb')"
                                     ".write(b'w' * 5000)\n")
    data = tmp_path / "laptop-data"
    data.mkdir()
    (data / "n.txt").write_text("forty-two")
    floyd = lambda *args, cwd=laptop: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "floydd.cli.floyd", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120)
    up = floyd("data", "upload", str(data), "--name", "nums")
    assert up.returncode == 0 and "nums:1: 1 files" in up.stdout, up.stderr
    (laptop / "weights.ckpt").write_bytes(b"0" * 1000)
    (laptop / ".floydignore").write_text("*.ckpt\n")
    for refused, words in ((("--gpu", "9"), "cannot run with --gpu 9"), (("--data", "nope:/input"), "nope")):
        res = floyd("run", *refused, "python train.py")     # refused before the code is sent
        assert res.returncode != 0 and words in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert "sending the code" not in res.stderr
    res = floyd("run", "--json", "--data", "nums:/input", "python train.py")
    assert res.returncode == 0, res.stderr
    assert "sending the code of" in res.stderr and "3 files" in res.stderr
    key = json.loads(res.stdout)["id"]
    assert _final(daemon, key)["state"] == "success"
    log = daemon.floyd("logs", key).stdout
    assert "train.py" in log and "weights.ckpt" not in log and "forty-two" in log
    # what the job made, its code and the dataset come back to the laptop's disk
    assert floyd("output", key, str(tmp_path / "out")).returncode == 0
    assert (tmp_path / "out" / "model.bin").read_bytes() == b"w" * 5000
    assert floyd("clone", key, str(tmp_path / "code")).returncode == 0
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == [".floyd", ".floydignore", "train.py"]
    assert floyd("data", "clone", "nums:1", str(tmp_path / "nums")).returncode == 0
    assert (tmp_path / "nums" / "n.txt").read_text() == "forty-two"
    again = floyd("data", "clone", "nums:1", str(tmp_path / "nums"))
    assert again.returncode != 0 and "not an empty folder" in again.stderr and "Traceback" not in again.stderr
    # the API refuses what is not a tar, and traversal, with a clear error
    import http.client
    conn = http.client.HTTPConnection(*host.split(":"), timeout=30)
    conn.request("POST", "/v1/code", body=b"not a tar" * 100,
                 headers={"Authorization": f"Bearer {env['FLOYD_TOKEN']}", "Content-Type": "application/x-tar"})
    resp = conn.getresponse()
    assert resp.status == 400 and b"not a readable tar" in resp.read()


@pytest.mark.slow
def test_two_torchrun_jobs_on_one_box_each_get_their_own_rendezvous(daemon):
    """torchrun's default rendezvous is 127.0.0.1:29500 for every job on the box: floydd adds
    --standalone (a free port each), so two at once both run, and one process per GPU."""
    (daemon.project / "ddp.py").write_text(
        "import os, time, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1)\ndist.all_reduce(t)\n"
        "if dist.get_rank() == 0:\n"  # ranks share one stdout: two prints may interleave
        "    print('world', dist.get_world_size(), 'sum', t.item(), flush=True)\n"
        "time.sleep(4)\n"               # both jobs hold their rendezvous at the same time
        "dist.destroy_process_group()\n")
    keys = [json.loads(daemon.floyd("run", "--gpu", "--json", "torchrun ddp.py").stdout)["id"] for _ in range(2)]
    for key in keys:
        done = _final(daemon, key, timeout=180)
        assert done["state"] == "success", (done, daemon.floyd("logs", key).stdout)
        assert "world 1 sum 1.0" in daemon.floyd("logs", key).stdout
    wide = json.loads(daemon.floyd("run", "--gpu", "2", "--json", "torchrun ddp.py").stdout)["id"]
    assert _final(daemon, wide, timeout=180)["state"] == "success"
    assert "world 2 sum 2.0" in daemon.floyd("logs", wide).stdout       # one process per GPU
