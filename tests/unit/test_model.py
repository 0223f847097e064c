"""The job model: parsers refuse what they must, values round-trip through their stored form."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, strategies as st

from floydd import model
from floydd.answers import decode_job
from floydd.errors import Conflict, InvalidName, InvalidSpec, UnsafePath
from floydd.model import (
    ACTIVE_STATES, FINAL_STATES, REQUEUE, STATES, TRANSITIONS, DatasetRef, JobKey, JobSpec, Mount, MountRequest,
    Resources, Restart, Submission, check_dataset_name, check_mount_target, check_mounts, check_params,
    check_project, check_transition, parse_data, parse_job_key, parse_param,
)

ROOT = Path(__file__).resolve().parents[2]
projects = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,63}", fullmatch=True)
numbers = st.integers(min_value=1, max_value=10**17)


def test_the_model_imports_nothing_of_ours_but_the_errors():
    trees = [ast.parse(path.read_text()) for path in (ROOT / "floydd" / "model").glob("*.py")]
    imported = {n.module for tree in trees for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m and m.startswith("floydd") and not m.startswith("floydd.model.")}
    assert len(trees) > 1 and ours == {"floydd.errors"}
    assert "msgspec" not in imported            # the agent and the CLI load this package


def test_every_name_of_the_model_modules_is_the_packages_and_each_module_is_described():
    modules = [info.name for info in pkgutil.iter_modules(model.__path__)]
    assert len(modules) > 1
    for name in modules:
        module = importlib.import_module(f"floydd.model.{name}")
        assert f"``{name}``" in model.__doc__, name
        for public in module.__all__:
            assert public in model.__all__ and getattr(model, public) is getattr(module, public), public
    assert all(hasattr(model, public) for public in model.__all__)


def test_every_state_is_final_active_or_queued_and_final_states_go_nowhere():
    assert set(STATES) == FINAL_STATES | ACTIVE_STATES | {"queued"}
    assert not FINAL_STATES & ACTIVE_STATES
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()
    for old, news in TRANSITIONS.items():
        assert news <= set(STATES), old
        assert old not in news


@pytest.mark.parametrize("old", STATES)
@pytest.mark.parametrize("new", STATES)
def test_check_transition_follows_the_table(old, new):
    if new in TRANSITIONS[old]:
        check_transition("p/1", old, new)
    else:
        with pytest.raises(Conflict) as err:
            check_transition("p/1", old, new)
        assert err.value.code == "bad_transition" and err.value.hint
    if (old, new) == REQUEUE:
        check_transition("p/1", old, new, requeue=True)


def test_an_unknown_state_is_refused():
    with pytest.raises(InvalidSpec):
        check_transition("p/1", "queued", "exploded")


@pytest.mark.parametrize("text,ref,mount", [
    ("mnist:/input", "mnist", "/input"),
    ("mnist:3:/input", "mnist:3", "/input"),
    ("mnist:latest:/data/x", "mnist:latest", "/data/x"),
    ("digits/2/output:/model", "digits/2/output", "/model"),
])
def test_data_specs(text, ref, mount):
    assert parse_data(text) == MountRequest(ref=ref, mount=mount)


@pytest.mark.parametrize("text", ["mnist", "mnist:input", ":/input", "", "mnist:3:"])
def test_malformed_data_specs_say_how_to_fix(text):
    with pytest.raises(InvalidSpec) as err:
        parse_data(text)
    assert "NAME[:VERSION]:MOUNT" in err.value.hint


def test_mounts_are_normalized_checked_and_never_twice():
    assert check_mounts(["mnist:/input/", {"ref": "x:2", "mount": "/data"}]) == [
        MountRequest(ref="mnist", mount="/input"), MountRequest(ref="x:2", mount="/data")]
    with pytest.raises(InvalidSpec, match="two --data mounts"):
        check_mounts(["a:/input", "b:/input/."])
    for bad in (["a:/etc"], ["a:/code"], ["a:/"], ["a:/output/x"], ["a:/lib64"], ["a:/job.log"]):
        with pytest.raises(UnsafePath):
            check_mounts(bad)
    for bad in (["a:/x/../etc"], ["BAD:/input"], ["a:0:/input"], [{"ref": 1, "mount": "/x"}], "a:/x"):
        with pytest.raises((InvalidSpec, InvalidName, UnsafePath)):
            check_mounts(bad)


@pytest.mark.parametrize("target", ["/input", "/input/x", "/data", "/mnt2"])
def test_good_mount_targets(target):
    assert check_mount_target(target) == target


def test_params():
    assert parse_param("lr=0.1") == ("lr", "0.1")
    assert parse_param("note=a=b") == ("note", "a=b")
    assert check_params({"lr": 0.1, "n": 3}) == {"lr": "0.1", "n": "3"}
    assert check_params(["a=1", "b=2"]) == {"a": "1", "b": "2"}
    for bad in ("lr", "=1", "1x=2", "a-b=1", "PATH=/x", "cuda_visible_devices=1", "a=\0"):
        with pytest.raises(InvalidSpec):
            parse_param(bad)
    with pytest.raises(InvalidSpec):
        check_params("lr=1")


def test_project_names_and_job_keys():
    assert check_project("mnist-2_a") == "mnist-2_a"
    for bad in ("", "Mnist", "-x", "a/b", "x" * 65, "a b", None, 3):
        with pytest.raises(InvalidName):
            check_project(bad)
    assert tuple(parse_job_key("digits/12")) == ("digits", 12)
    project, number = parse_job_key("digits/12")
    assert (project, number) == ("digits", 12)
    for bad in ("digits", "digits/0", "digits/x", "/3", "Dig/1", "d/01", "d/١٢", "d/" + "9" * 19, "d/-1"):
        with pytest.raises(InvalidSpec):
            parse_job_key(bad)


@given(projects, numbers)
def test_job_keys_round_trip(project, number):
    key = JobKey(project, number)
    assert JobKey.parse(str(key)) == key
    assert key.output_name == f"{project}/{number}/output"
    check_dataset_name(key.output_name)


def test_dataset_names_and_refs():
    for good in ("mnist", "a.b-c_d", "digits/3/output"):
        assert check_dataset_name(good) == good
    for bad in ("", "A", "..", "a..b", "x/3/input", "x/0/output", "-a", "a" * 65, None):
        with pytest.raises(InvalidName):
            check_dataset_name(bad)
    assert DatasetRef.parse("mnist") == DatasetRef("mnist") == DatasetRef.parse("mnist:latest")
    assert DatasetRef.parse("mnist:3") == DatasetRef("mnist", 3)
    assert model.parse_ref("digits/3/output:2") == ("digits/3/output", 2)
    for bad in ("mnist:x", "mnist:0", "mnist:03", "mnist:-1", "Mnist:1", 7):
        with pytest.raises(InvalidName):
            DatasetRef.parse(bad)


@given(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True).filter(lambda n: ".." not in n),
       st.none() | numbers)
def test_dataset_refs_round_trip(name, version):
    ref = DatasetRef(name, version)
    assert DatasetRef.parse(str(ref)) == ref


def test_resources_and_their_stored_form():
    assert Resources().to_dict() == {"gpus": 0, "cpu": True}
    assert Resources(gpu_count=2, nodes=3).to_dict() == {"gpus": 2, "cpu": False, "nodes": 3}
    assert Resources.from_dict({"gpus": 2, "cpu": False, "nodes": 3}) == Resources(gpu_count=2, nodes=3)
    assert Resources.from_dict(None) == Resources()
    for bad in ({"gpu_count": -1}, {"nodes": 0}, {"gpu_count": True}, {"gpu_count": 1.5},
                {"nodes": model.MAX_NODES + 1}):
        with pytest.raises(InvalidSpec):
            Resources(**bad)


specs = st.builds(
    JobSpec, command=st.text(min_size=1), code_tree=st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
    params=st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True), st.text()),
    data=st.lists(st.builds(Mount, ref=st.just("mnist:1"), tree=st.just("ab" * 32),
                            mount=st.sampled_from(["/input", "/data", "/x/y"])), max_size=3).map(tuple),
    resources=st.builds(Resources, gpu_count=st.integers(0, 8), nodes=st.integers(1, 4)),
    message=st.text(), max_runtime=st.none() | st.floats(min_value=1, max_value=1e6))


@given(specs)
def test_a_spec_round_trips_through_its_stored_form(spec):
    stored = spec.to_dict()
    assert tuple(stored) == model.SPEC_FIELDS
    assert JobSpec.from_dict(msgspec.json.decode(msgspec.json.encode(stored))) == spec


def _submission(**kw) -> dict:
    return {"project": "mnist", "command": "python train.py", "code_path": "/home/a/mnist", **kw}


def test_a_submission_names_its_code_by_path_or_upload_handle_never_by_tree():
    assert "code_tree" not in {f.name for f in dataclasses.fields(Submission)}
    sub = msgspec.convert({"project": "p", "command": "x", "code_upload": "cu-" + "ab" * 16}, Submission)
    assert (sub.code_upload, sub.code_path) == ("cu-" + "ab" * 16, None)


def test_a_submission_body_decodes_into_a_checked_value():
    sub = msgspec.convert(_submission(gpus=2, data=["mnist:/input"], params={"lr": 0.1}, max_runtime=60),
                          Submission)
    assert sub.resources == Resources(gpu_count=2)
    assert sub.mounts == [MountRequest(ref="mnist", mount="/input")]
    spec = sub.spec(code_tree="ab" * 32, data=(Mount(ref="mnist:1", tree="cd" * 32, mount="/input"),))
    assert spec.params == {"lr": "0.1"} and spec.max_runtime == 60.0


@pytest.mark.parametrize("bad", [
    {"project": "Bad"}, {"command": "  "}, {"code_path": "relative"}, {"code_upload": "zz"},
    {"code_upload": "ab" * 32},                                     # a tree id is not a handle: never taken
    {"code_upload": "cu-" + "0" * 32},                              # with a code_path too: one or the other
    {"gpus": -1}, {"nodes": 0}, {"max_runtime": 0}, {"max_runtime": float("inf")},
    {"max_runtime": 1e300}, {"max_runtime": float("nan")}, {"max_runtime": -1}, {"max_runtime": True},
    {"env": "nope"}, {"mode": "serve"}, {"idem_key": "short"}, {"params": {"PATH": "/x"}},
    {"data": ["mnist:/etc"]}, {"gpus": "2"}, {"data": "mnist:/input"}, {"message": 3},
])
def test_a_bad_submission_is_refused_with_a_hint(bad):
    with pytest.raises((InvalidSpec, InvalidName, UnsafePath, msgspec.ValidationError)) as err:
        msgspec.convert(_submission(**bad), Submission)
    if not isinstance(err.value, msgspec.ValidationError):
        assert err.value.hint


@pytest.mark.parametrize("bad, said", [
    ({"gpus": model.MAX_GPUS + 1}, "--gpu"), ({"gpus": 10**30}, "--gpu"),
    ({"command": "x" * (model.MAX_COMMAND + 1)}, "command"),
    ({"command": "é" * (model.MAX_COMMAND // 2 + 1)}, "command"),               # counted in bytes
    ({"message": "m" * (model.MAX_MESSAGE + 1)}, "message"),
    ({"params": {f"p{i}": "1" for i in range(model.MAX_PARAMS + 1)}}, "params"),
    ({"params": {"a": "v" * (model.MAX_PARAM_VALUE + 1)}}, "--param a"),
    ({"data": [f"mnist:/in{i}" for i in range(model.MAX_MOUNTS + 1)]}, "mounts"),
    ({"data": ["mnist:/" + "a" * 256]}, "too long"), ({"code_path": "/a\0b"}, "NUL"),
    ({"code_path": "/" + "a/" * 2100}, "too long"), ({"code_path": "/" + "n" * 256}, "too long"),
])
def test_what_does_not_fit_is_refused_naming_the_limit(bad, said):
    with pytest.raises((InvalidSpec, UnsafePath), match=said) as err:
        msgspec.convert(_submission(**bad), Submission)
    assert err.value.hint and len(err.value.message) < 300


def test_the_limits_themselves_are_allowed():
    sub = msgspec.convert(_submission(gpus=model.MAX_GPUS, command="x" * model.MAX_COMMAND,
                                      message="m" * model.MAX_MESSAGE, code_path="/" + "n" * 255,
                                      params={f"p{i}": "v" * 10 for i in range(model.MAX_PARAMS)}), Submission)
    assert sub.resources.gpu_count == model.MAX_GPUS


def test_an_upload_may_not_take_a_jobs_output_name_that_the_runtime_uses():
    assert check_dataset_name("mnist/3/output") == "mnist/3/output"       # a job's output, published as such
    assert model.check_upload_name("mnist") == "mnist" and model.check_upload_name("mnist-3-output")
    with pytest.raises(InvalidName, match="output of job mnist/3") as err:
        model.check_upload_name("mnist/3/output")
    assert "--name mnist-3-output" in err.value.hint
    with pytest.raises(InvalidName, match="not a valid dataset name"):
        model.check_upload_name("mnist/3/outputs")


def test_a_restart_changes_only_what_it_names():
    old = {"command": "python a.py", "code_tree": "ab" * 32, "resources": {"gpus": 1, "cpu": False},
           "data": [{"ref": "mnist:1", "tree": "cd" * 32, "mount": "/input"}], "params": {"lr": "0.1", "b": "2"},
           "env": "default", "max_runtime": None}
    old = decode_job({**old, "id": "mnist/4", "project": "mnist", "number": 4, "state": "success"})  # as shown
    sub = Restart(params={"lr": "0.2"}, gpus=0).submission(JobKey("mnist", 4), old)
    assert (sub.command, sub.gpus, sub.message) == ("python a.py", 0, "restart of mnist/4")
    assert (sub.code_path, sub.code_upload) == (None, None)         # the daemon passes the old tree on itself
    assert sub.params == {"lr": "0.2", "b": "2"} and sub.mounts == [MountRequest(ref="mnist:1", mount="/input")]
