"""MemoryConfig: one typed object from defaults < YAML < environment < explicit overrides.

Why these cases: a pod is configured by env vars and a mounted YAML file; a wrong precedence, a
duplicated env name or a leaked secret in ``/config`` output are operational bugs that no other
test would notice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_memory.config import ENV_PREFIX, ConfigError, MemoryConfig, env_table, project_dir


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_env_or_yaml() -> None:
    cfg = MemoryConfig.load(env={})
    assert cfg.store.backend is None and cfg.store.effective_backend == "local"
    assert cfg.redis.url is None
    assert cfg.recall.max_files == 5
    assert cfg.store.local_root == Path("~/.harness")


def test_env_values_are_parsed_into_types() -> None:
    cfg = MemoryConfig.load(
        env={
            "HARNESS_MEMORY_COS_BUCKET": "mem-1250000000",
            "HARNESS_MEMORY_COS_REGION": "ap-guangzhou",
            "HARNESS_MEMORY_COS_TIMEOUT": "2.5",
            "HARNESS_MEMORY_COS_ANONYMOUS": "true",
            "HARNESS_MEMORY_REDIS_URL": "redis://127.0.0.1:1/0",
            "HARNESS_MEMORY_SESSION_FIRST_THRESHOLD_TOKENS": "1234",
            "HARNESS_MEMORY_AUTO_ENABLED": "false",
            "HARNESS_MEMORY_LOCAL_ROOT": "/data/.harness",
            "UNRELATED": "ignored",
        }
    )
    assert cfg.store.effective_backend == "cos"  # a bucket implies COS
    assert cfg.store.cos_timeout == 2.5 and cfg.store.cos_anonymous is True
    assert cfg.redis.url == "redis://127.0.0.1:1/0"
    assert cfg.session.first_threshold_tokens == 1234
    assert cfg.auto.enabled is False
    assert cfg.store.local_root == Path("/data/.harness")


def test_precedence_defaults_yaml_env_overrides(tmp_path: Path) -> None:
    yaml_file = _write(
        tmp_path / "hm.yaml",
        "store:\n  cos_timeout: 3\n  cos_retries: 2\n  cos_region: from-yaml\nsession:\n  keep_messages: 7\n",
    )
    env = {"HARNESS_MEMORY_COS_TIMEOUT": "4", "HARNESS_MEMORY_COS_REGION": "from-env"}

    from_yaml = MemoryConfig.load(yaml_file, env={})
    assert (from_yaml.store.cos_timeout, from_yaml.store.cos_retries) == (3.0, 2)
    assert from_yaml.session.keep_messages == 7
    assert from_yaml.store.cos_pool_size == 32  # untouched default

    from_env = MemoryConfig.load(yaml_file, env=env)
    assert from_env.store.cos_timeout == 4.0 and from_env.store.cos_region == "from-env"
    assert from_env.store.cos_retries == 2  # YAML still fills what env does not set

    overridden = MemoryConfig.load(yaml_file, env=env, store={"cos_timeout": 5})
    assert overridden.store.cos_timeout == 5.0
    assert overridden.store.cos_region == "from-env"  # overrides merge, not replace, a section


def test_yaml_path_from_env(tmp_path: Path) -> None:
    yaml_file = _write(tmp_path / "c.yaml", "server:\n  port: 9999\n")
    cfg = MemoryConfig.load(env={"HARNESS_MEMORY_CONFIG": str(yaml_file)})
    assert cfg.server.port == 9999


def test_env_names_are_unique_and_cover_every_field() -> None:
    rows = env_table()
    names = [row[0] for row in rows]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert all(name.startswith(ENV_PREFIX) and name.isupper() for name in names)
    paths = {row[1] for row in rows}
    for section, info in MemoryConfig.model_fields.items():
        model = info.annotation
        assert isinstance(model, type)
        for field in model.model_fields:  # type: ignore[attr-defined]
            assert f"{section}.{field}" in paths
    assert ("HARNESS_MEMORY_COS_BUCKET", "store.cos_bucket") in {(r[0], r[1]) for r in rows}
    assert all(row[3] for row in rows), "every setting needs a description for the README"


def test_every_env_name_reaches_its_field() -> None:
    """Each listed env var really sets its field: a junk value either lands in the field (text
    fields) or is refused with an error naming that variable (typed fields)."""
    junk = "junk-%value"
    for name, path, _default, _desc in env_table():
        section, field = path.split(".")
        try:
            cfg = MemoryConfig.load(env={name: junk})
        except ConfigError as exc:
            assert name in str(exc), (name, str(exc))
            continue
        value = getattr(getattr(cfg, section), field)
        shown = value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
        if path == "agent.snapshots_dir":  # a relative folder is made absolute at load time
            shown = str(Path(shown).relative_to(project_dir()))
        assert shown == junk, (name, value)


def test_public_dict_masks_secrets() -> None:
    cfg = MemoryConfig.load(
        env={},
        store={
            "cos_secret_id": "AKIDxyz",
            "cos_secret_key": "sk-123",
            "cos_token": "tok",
            "cos_bucket": "mem-1250000000",
        },
        model={"api_key": "sk-model", "light_api_key": "sk-light"},
        server={"api_token": "bearer-1", "admin_token": "bearer-2"},
    )
    public = cfg.public_dict()
    text = repr(public)
    for secret in ("AKIDxyz", "sk-123", "tok", "sk-model", "sk-light", "bearer-1", "bearer-2"):
        assert f"'{secret}'" not in text
    assert public["store"]["cos_secret_key"] == "***" and public["server"]["api_token"] == "***"
    assert public["store"]["cos_bucket"] == "mem-1250000000"  # not a secret
    assert public["model"]["light_api_key"] == "***"
    assert public["server"]["admin_token"] == "***"
    unset = MemoryConfig.load(env={}).public_dict()
    assert unset["store"]["cos_secret_key"] is None  # unset secrets stay visibly unset
    assert cfg.store.cos_secret_key is not None
    assert cfg.store.cos_secret_key.get_secret_value() == "sk-123"
    assert "sk-123" not in repr(cfg)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HARNESS_MEMORY_COS_TIMEOUT": "soon"}, "HARNESS_MEMORY_COS_TIMEOUT"),
        ({"HARNESS_MEMORY_COS_RETRIES": "-1"}, "HARNESS_MEMORY_COS_RETRIES"),
        ({"HARNESS_MEMORY_BACKEND": "s3"}, "HARNESS_MEMORY_BACKEND"),
        (
            {"HARNESS_MEMORY_SESSION_FIRST_THRESHOLD_TOKENS": "0"},
            "HARNESS_MEMORY_SESSION_FIRST_THRESHOLD_TOKENS",
        ),
        ({"HARNESS_MEMORY_REDIS_SOCKET_TIMEOUT": "fast"}, "HARNESS_MEMORY_REDIS_SOCKET_TIMEOUT"),
        ({"HARNESS_MEMORY_RECALL_MAX_FILES": "9"}, "HARNESS_MEMORY_RECALL_MAX_FILES"),
    ],
)
def test_bad_env_value_names_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        MemoryConfig.load(env=env)


def test_bad_yaml_and_sections_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        MemoryConfig.load(_write(tmp_path / "bad.yaml", "store: [unclosed\n"), env={})
    with pytest.raises(ConfigError, match="mapping"):
        MemoryConfig.load(_write(tmp_path / "list.yaml", "- a\n- b\n"), env={})
    with pytest.raises(ConfigError, match="cannot read"):
        MemoryConfig.load(tmp_path / "missing.yaml", env={})
    with pytest.raises(ConfigError, match="unknown config section"):
        MemoryConfig.load(env={}, storage={"backend": "local"})
    with pytest.raises(ConfigError, match="cos_bukket"):
        MemoryConfig.load(_write(tmp_path / "typo.yaml", "store:\n  cos_bukket: x\n"), env={})


def test_empty_yaml_section_is_allowed(tmp_path: Path) -> None:
    """A section whose keys are all commented out is ``null`` in YAML: treat it as empty."""
    yaml_file = _write(tmp_path / "empty.yaml", "store:\n  # cos_bucket: later\nsession:\n")
    cfg = MemoryConfig.load(yaml_file, env={"HARNESS_MEMORY_COS_REGION": "ap-guangzhou"})
    assert cfg.store.cos_region == "ap-guangzhou"
    assert MemoryConfig.load(yaml_file, env={}).session.keep_messages == 5
    with pytest.raises(ConfigError, match=r"'store' .* must be a mapping"):
        MemoryConfig.load(_write(tmp_path / "scalar.yaml", "store: cos\n"), env={})


def test_a_relative_snapshots_dir_is_made_absolute_when_the_config_is_loaded(tmp_path: Path) -> None:
    """Beside the config file (set in it, by the environment, or the default), else the project's."""
    config = tmp_path / "conf" / "harness.yaml"
    config.parent.mkdir()
    config.write_text("agent:\n  project: p\n")
    beside = tmp_path / "conf"
    assert MemoryConfig.load(config, env={}).agent.snapshots_dir == beside / "snapshots"
    assert MemoryConfig.load(config, env={"HARNESS_MEMORY_SNAPSHOTS_DIR": "x/y"}).agent.snapshots_dir == beside / "x/y"
    config.write_text("agent:\n  snapshots_dir: starter\n")
    assert MemoryConfig.load(config, env={}).agent.snapshots_dir == beside / "starter"
    assert MemoryConfig.load(env={}).agent.snapshots_dir == project_dir() / "snapshots"
    assert MemoryConfig.load(env={"HARNESS_MEMORY_SNAPSHOTS_DIR": str(tmp_path)}).agent.snapshots_dir == tmp_path
    assert project_dir().is_absolute() and (project_dir() / "pyproject.toml").is_file()  # this checkout
