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
