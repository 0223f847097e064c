from pathlib import Path

import pytest

from floydd.config import load, socket_path_for, preset_for_tests
from floydd.errors import UserError


def test_layers_defaults_toml_env_flags(tmp_path):
    (tmp_path / "floydd.toml").write_text('stop_grace = 3.0\nsandbox = "none"\nnode_name = "from-toml"\n')
    env = {"FLOYDD_STATE_DIR": str(tmp_path), "FLOYDD_NODE_NAME": "from-env"}
    config = load({"sandbox": "bwrap"}, env=env)
    assert config.stop_grace == 3.0           # TOML over default
    assert config.node_name == "from-env"     # env over TOML
    assert config.sandbox == "bwrap"          # flag over TOML
    assert config.tail_interval == 0.2        # default
    assert config.state_dir == tmp_path


def test_unset_flags_do_not_override(tmp_path):
    config = load({"sandbox": None}, env={"FLOYDD_STATE_DIR": str(tmp_path), "FLOYDD_SANDBOX": "none"})
    assert config.sandbox == "none"


def test_bad_values_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="stop_grace"):
        load({}, env={"FLOYDD_STATE_DIR": str(tmp_path), "FLOYDD_STOP_GRACE": "soon"})
    (tmp_path / "floydd.toml").write_text("nonsense = 1\n")
    with pytest.raises(UserError, match="unknown keys: nonsense"):
        load({}, env={"FLOYDD_STATE_DIR": str(tmp_path)})
    (tmp_path / "floydd.toml").write_text("stop_grace = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        load({}, env={"FLOYDD_STATE_DIR": str(tmp_path)})


def test_config_is_frozen(tmp_path):
    config = preset_for_tests(tmp_path)
    with pytest.raises(AttributeError):
        config.sandbox = "none"


def test_long_state_dirs_get_a_short_socket_path_both_sides_agree(tmp_path):
    deep = tmp_path / ("x" * 120)
    path = socket_path_for(deep)
    assert len(str(path)) < 108
    assert path == socket_path_for(Path(str(deep)))
    assert socket_path_for(tmp_path) == tmp_path / "floydd.sock"


def test_sandbox_and_build_keys_from_toml_and_env(tmp_path):
    (tmp_path / "floydd.toml").write_text('sandbox = "require"\nbuild_network = false\nwheelhouse = "/srv/wheels"\n'
                                          'system = true\njob_env_pass = "HTTPS_PROXY, MY_*"\n')
    config = load({}, env={"FLOYDD_STATE_DIR": str(tmp_path)})
    assert (config.sandbox, config.build_network, config.wheelhouse, config.system) == \
        ("require", False, "/srv/wheels", True)
    assert config.job_env_pass == "HTTPS_PROXY, MY_*"
    config = load({}, env={"FLOYDD_STATE_DIR": str(tmp_path), "FLOYDD_BUILD_NETWORK": "yes",
                           "FLOYDD_SANDBOX": "prefer"})
    assert config.build_network is True and config.sandbox == "prefer"
    with pytest.raises(UserError, match="build_network"):
        load({}, env={"FLOYDD_STATE_DIR": str(tmp_path), "FLOYDD_BUILD_NETWORK": "maybe"})
    with pytest.raises(UserError, match="sandbox 'sometimes'"):
        load({}, env={"FLOYDD_STATE_DIR": str(tmp_path), "FLOYDD_SANDBOX": "sometimes"})


def test_the_settings_line_names_what_the_operator_changed_and_nothing_else(tmp_path):
    from floydd.config import Config, settings_line
    assert settings_line(Config(state_dir=tmp_path, node_name="x")) == "defaults"     # where and who: not settings
    line = settings_line(Config(state_dir=tmp_path, sandbox="require", job_cpus=2.0))
    assert line == "job_cpus=2.0 sandbox=require"


def test_the_flood_limits_have_defaults_come_from_toml_and_env_and_refuse_negatives(tmp_path):
    c = load(env={}, file=None, flags={"state_dir": str(tmp_path)})
    assert (c.max_upload_gb, c.max_log_mb, c.max_metric_points, c.max_queued_per_person) == (100.0, 256.0, 1_000_000,
                                                                                              1000)
    (tmp_path / "floydd.toml").write_text("max_log_mb = 16\nmax_queued_per_person = 50\n")
    c = load(env={"FLOYDD_MAX_UPLOAD_GB": "0", "FLOYDD_MAX_METRIC_POINTS": "500"}, flags={"state_dir": str(tmp_path)})
    assert (c.max_upload_gb, c.max_log_mb, c.max_metric_points, c.max_queued_per_person) == (0.0, 16.0, 500, 50)
    with pytest.raises(UserError, match="max_log_mb = -1.0 is negative") as exc:
        load(env={"FLOYDD_MAX_LOG_MB": "-1"}, flags={"state_dir": str(tmp_path)})
    assert "0 (no limit)" in exc.value.hint
