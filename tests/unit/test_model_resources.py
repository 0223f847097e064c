"""What a job asks of each box: GPUs, boxes, cores and memory; their stored form, which old
specs (with neither cores nor memory) still read as, and the submission's defaults."""

from __future__ import annotations

import msgspec
import pytest

from floydd import model
from floydd.answers import decode_job
from floydd.errors import InvalidSpec
from floydd.model import JobKey, Resources, Restart, Submission, describe_needs, format_size, parse_size


def test_cores_and_memory_are_stored_only_when_asked_and_old_specs_read_as_asking_none():
    assert Resources(gpu_count=1, cpus=0.5, memory=2 << 30).to_dict() == {"gpus": 1, "cpu": False, "cpus": 0.5,
                                                                     "memory": 2 << 30}
    assert Resources.from_dict({"gpus": 1, "cpu": False}) == Resources(gpu_count=1)        # a spec from before
    assert Resources(cpus=2.5).cpu_milli == 2500 and Resources().cpu_milli == 0
    for bad in ({"cpus": -1}, {"cpus": model.MAX_CPUS + 1}, {"cpus": 0.0001}, {"cpus": True}, {"memory": -1},
                {"memory": 1.5}, {"memory": model.MAX_MEMORY + 1}):
        with pytest.raises(InvalidSpec):
            Resources(**bad)


@pytest.mark.parametrize("text, size", [("16G", 16 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29), ("64k", 65536),
                                        ("2t", 2 << 40), ("0", 0), ("8 GB", 8 << 30), (4096, 4096)])
def test_sizes_are_read_in_powers_of_1024(text, size):
    assert parse_size(text) == size


def test_sizes_and_needs_read_as_people_write_them():
    assert [format_size(n) for n in (300, 512 << 20, 3 << 29, 16 << 30)] == ["300 B", "512 MiB", "1.5 GiB", "16 GiB"]
    assert describe_needs(2, 4000, 16 << 30) == "2 GPUs, 4 CPUs and 16 GiB"
    assert (describe_needs(1), describe_needs(0, 1000), describe_needs(0, 500), describe_needs(0)) == \
        ("1 GPU", "1 CPU", "0.5 CPUs", "CPU")


def test_a_submission_takes_the_daemons_defaults_only_where_it_said_nothing():
    body = {"project": "mnist", "command": "python train.py", "code_path": "/home/a/mnist"}
    plain = msgspec.convert(body, Submission)
    assert plain.resources == Resources()
    assert plain.with_defaults(cpus=1, memory=0).resources == Resources(cpus=1)
    asked = msgspec.convert({**body, "cpus": 4, "memory": "8G"}, Submission).with_defaults(cpus=1, memory=1 << 30)
    assert asked.resources == Resources(cpus=4, memory=8 << 30)
    none = msgspec.convert({**body, "cpus": 0, "memory": 0}, Submission).with_defaults(cpus=1, memory=1 << 30)
    assert none.resources == Resources()
    with pytest.raises(InvalidSpec, match="no unit"):
        msgspec.convert({**body, "memory": "16"}, Submission)


def test_a_restart_keeps_what_the_job_asked_and_an_old_job_gets_the_defaults():
    old = {"command": "python a.py", "code_tree": "ab" * 32, "resources": {"gpus": 1, "cpu": False, "cpus": 3},
           "data": [], "params": {}, "env": "default", "max_runtime": None, "id": "m/1", "project": "m", "number": 1,
           "state": "success"}
    assert Restart().submission(JobKey("m", 1), decode_job(old)).cpus == 3
    assert Restart(memory="1G").submission(JobKey("m", 1), decode_job(old)).resources == \
        Resources(gpu_count=1, cpus=3, memory=1 << 30)
    older = {**old, "resources": {"gpus": 1, "cpu": False}}
    assert Restart().submission(JobKey("m", 1), decode_job(older)).cpus is None        # the daemon fills in job_cpus
