import pytest

from floydd.errors import InvalidName, InvalidSpec
from floydd.jobs.spec import check_project, parse_data, parse_job_key, parse_param


@pytest.mark.parametrize("text,ref,mount", [
    ("mnist:/input", "mnist", "/input"),
    ("mnist:3:/input", "mnist:3", "/input"),
    ("mnist:latest:/data/x", "mnist:latest", "/data/x"),
    ("digits/2/output:/model", "digits/2/output", "/model"),
])
def test_data_specs(text, ref, mount):
    assert parse_data(text) == {"ref": ref, "mount": mount}


@pytest.mark.parametrize("text", ["mnist", "mnist:input", ":/input", "", "mnist:3:"])
def test_malformed_data_specs_say_how_to_fix(text):
    with pytest.raises(InvalidSpec) as err:
        parse_data(text)
    assert "NAME[:VERSION]:MOUNT" in err.value.hint


def test_params():
    assert parse_param("lr=0.1") == ("lr", "0.1")
    assert parse_param("note=a=b") == ("note", "a=b")
    for bad in ("lr", "=1", "1x=2", "a-b=1", "PATH=/x", "cuda_visible_devices=1"):
        with pytest.raises(InvalidSpec):
            parse_param(bad)


def test_project_names_and_job_keys():
    assert check_project("mnist-2_a") == "mnist-2_a"
    for bad in ("", "Mnist", "-x", "a/b", "x" * 65, "a b"):
        with pytest.raises(InvalidName):
            check_project(bad)
    assert parse_job_key("digits/12") == ("digits", 12)
    for bad in ("digits", "digits/0", "digits/x", "/3", "Dig/1"):
        with pytest.raises(InvalidSpec):
            parse_job_key(bad)
