"""Fake-GPU specs, inventory with and without NVML, NVML field errors, to_dict."""

from __future__ import annotations

import json
import logging
import sys
import threading
from types import SimpleNamespace

import pynvml
import pytest

from floydd.errors import InvalidSpec
from floydd.node import GpuInfo, Inventory, NodeInfo, parse_fake_gpus
from floydd.node import _nvml

GIB = 1024 ** 3


@pytest.fixture(autouse=True)
def fresh_nvml_session(monkeypatch):
    """Each test starts with a session that has not logged or counted anything, on a box
    whose libnvidia-ml loads (``pynvml``'s calls are faked per test)."""
    monkeypatch.setattr(_nvml, "session", _nvml._Session())
    monkeypatch.setattr(_nvml, "pynvml", pynvml)


def no_nvml(monkeypatch):
    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(pynvml, "nvmlInit", fail)


class FakeNvml:
    """Two boards: board 0 answers everything, board 1 supports only memory (as some do)."""

    def __init__(self, monkeypatch):
        self.inits = self.shutdowns = 0
        not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def per_board(board0, error=not_supported):
            def read(handle, *args):
                if handle == 0:
                    return board0
                raise error
            return read

        def memory(handle):
            return SimpleNamespace(total=80 * GIB, used=(3 if handle == 0 else 1) * GIB)

        def init():
            self.inits += 1

        def shutdown():
            self.shutdowns += 1

        for name, value in {
            "nvmlInit": init, "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetUUID": lambda h: f"GPU-{h}aaa",
            "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",  # older bindings answer bytes
            "nvmlDeviceGetMemoryInfo": memory,
            "nvmlDeviceGetUtilizationRates": per_board(SimpleNamespace(gpu=87, memory=40)),
            "nvmlDeviceGetTemperature": per_board(61),
            "nvmlDeviceGetPowerUsage": per_board(312_500,
                                                 pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)),
        }.items():
            monkeypatch.setattr(pynvml, name, value)


# -- fake GPU specs --------------------------------------------------------------------------

@pytest.mark.parametrize("spec, names", [
    ("2", ["FAKE GPU-16GB"] * 2),
    ("0", []),
    ("4xA100-80GB", ["FAKE A100-80GB"] * 4),
    ("2xH100-80GB,1xT4-16GB", ["FAKE H100-80GB", "FAKE H100-80GB", "FAKE T4-16GB"]),
    (" 1 x RTX-4090-24gb , A10-24GB ", ["FAKE RTX-4090-24GB", "FAKE A10-24GB"]),
])
def test_fake_gpu_specs(spec, names):
    gpus = parse_fake_gpus(spec)
    assert [g.name for g in gpus] == names
    assert [g.index for g in gpus] == list(range(len(names)))
    assert [g.uuid for g in gpus] == [f"GPU-fake-{i}" for i in range(len(names))]
    assert all(g.fake and g.memory_used == 0 and g.utilization == 0 for g in gpus)


def test_fake_gpu_memory_comes_from_the_model():
    assert [g.memory_total for g in parse_fake_gpus("1xH100-80GB,1xT4-16GB")] == [80 * GIB, 16 * GIB]


@pytest.mark.parametrize("spec", ["", "  ", "x", "two", "-1", "2x", "2xA100", "2xA100-0GB", "0xA100-80GB",
                                  "65", "40xA-1GB,30xB-1GB", "2xA100-80GB,", "2xA100-80MB", "2*A100-80GB"])
def test_bad_fake_gpu_specs_say_how_to_write_one(spec):
    with pytest.raises(InvalidSpec) as err:
        parse_fake_gpus(spec)
    assert repr(spec) in err.value.message
    assert err.value.hint


# -- inventory ---------------------------------------------------------------------------------

def test_without_nvml_the_node_has_no_gpus_and_says_so_once(monkeypatch, tmp_path, caplog):
    no_nvml(monkeypatch)
    shutdowns = []
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shutdowns.append(1))
    with caplog.at_level(logging.DEBUG, logger="floydd.node"):
        first, second = Inventory(disk_path=tmp_path), Inventory(disk_path=tmp_path)
    info = first.sample()
    assert (info.gpus, info.gpu_source) == ((), "none")
    assert [r.levelno for r in caplog.records if "NVML not available" in r.message] == [logging.INFO, logging.DEBUG]
    first.close()
    second.close()
    assert shutdowns == []  # never initialised, never shut down


def test_without_nvidias_library_pynvml_is_never_imported(monkeypatch, tmp_path, caplog):
    """Issue 23: a box without the driver does not pay for pynvml (~1.7 MiB of idle RSS)."""
    monkeypatch.setattr(_nvml, "pynvml", None)
    monkeypatch.setattr(_nvml, "LIBRARY", "libnvidia-ml-not-here.so.1")
    monkeypatch.delitem(sys.modules, "pynvml")
    with caplog.at_level(logging.DEBUG, logger="floydd.node"):
        info = Inventory(disk_path=tmp_path).sample()
    assert (info.gpus, info.gpu_source) == ((), "none")
    assert _nvml.pynvml is None and "pynvml" not in sys.modules
    assert ["NVML Shared Library Not Found" in r.message for r in caplog.records
            if "NVML not available" in r.message] == [True]


def test_nvml_readings_and_field_errors_become_none(monkeypatch, tmp_path):
    nvml = FakeNvml(monkeypatch)
    inventory = Inventory(disk_path=tmp_path)
    info = inventory.sample()
    assert info.gpu_source == "nvml"
    assert info.gpus == (
        GpuInfo(index=0, uuid="GPU-0aaa", name="NVIDIA H100 80GB HBM3", memory_total=80 * GIB,
                memory_used=3 * GIB, utilization=87, temperature=61, power_w=312.5),
        GpuInfo(index=1, uuid="GPU-1aaa", name="NVIDIA H100 80GB HBM3", memory_total=80 * GIB,
                memory_used=1 * GIB, utilization=None, temperature=None, power_w=None))
    inventory.close()
    inventory.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_nvml_failing_after_init_gives_no_gpus_not_an_error(monkeypatch, tmp_path):
    FakeNvml(monkeypatch)

    def lost():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lost)
    with Inventory(disk_path=tmp_path) as inventory:
        assert inventory.sample().gpus == ()


def test_fake_gpus_only_when_asked_and_without_touching_nvml(monkeypatch, tmp_path):
    def must_not_init():
        raise AssertionError("NVML must not be used when fake GPUs are configured")
    monkeypatch.setattr(pynvml, "nvmlInit", must_not_init)
    info = Inventory(disk_path=tmp_path, fake_gpus="2xA100-80GB").sample()
    assert info.gpu_source == "fake" and [g.name for g in info.gpus] == ["FAKE A100-80GB"] * 2
    with pytest.raises(InvalidSpec):
        Inventory(disk_path=tmp_path, fake_gpus="lots")
    no_nvml(monkeypatch)  # and with the option empty or unset, no fakes appear
    assert Inventory(disk_path=tmp_path, fake_gpus="").sample().gpu_source == "none"
    assert Inventory(disk_path=tmp_path).sample().gpus == ()


def test_machine_figures_and_a_state_dir_that_does_not_exist_yet(monkeypatch, tmp_path):
    no_nvml(monkeypatch)
    info = Inventory(disk_path=tmp_path / "not" / "yet").sample()
    assert info.cpus >= 1 and 0.0 <= info.cpu_percent <= 100.0
    assert 0 < info.memory_available <= info.memory_total
    assert 0 < info.disk_free <= info.disk_total and info.disk_path == str(tmp_path / "not" / "yet")


def test_to_dict_is_json_and_round_trips(tmp_path):
    info = Inventory(disk_path=tmp_path, fake_gpus="1xT4-16GB").sample()
    data = json.loads(json.dumps(info.to_dict()))
    assert data["gpus"][0]["name"] == "FAKE T4-16GB" and data["gpu_source"] == "fake"
    assert NodeInfo.from_dict(data) == info


def test_inventory_starts_no_threads(monkeypatch, tmp_path):
    no_nvml(monkeypatch)
    before = threading.active_count()
    inventory = Inventory(disk_path=tmp_path)
    for _ in range(3):
        inventory.sample()
    assert threading.active_count() == before
    inventory.close()


def test_public_surface_is_pinned():
    import floydd.node

    assert sorted(floydd.node.__all__) == ["GpuInfo", "Inventory", "NodeInfo", "forget_process_tree",
                                           "job_processes", "parse_fake_gpus", "sample_process_tree"]
