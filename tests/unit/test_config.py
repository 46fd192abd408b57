import tomllib

import pytest

from bessemer.config import JobConfig, all_keys, check_data_parallel, describe, load_config, split_overrides, to_toml
from bessemer.errors import ConfigError


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_file_and_overrides_in_order(tmp_path):
    path = write(tmp_path, "[train]\nsteps = 7\nlr = 1e-3\n[run]\ndir = 'x'\n")
    cfg = load_config(path, ["--train.steps=9", "--train.deterministic=true", "--precision.dtype=bf16"])
    assert cfg.train.steps == 9  # the command line wins over the file
    assert cfg.train.lr == 1e-3 and cfg.run.dir == "x"
    assert cfg.train.deterministic is True and cfg.precision.dtype == "bf16"
    assert cfg.train.micro_batch == JobConfig().train.micro_batch  # untouched keys keep their defaults


def test_int_in_file_is_accepted_for_float_field(tmp_path):
    assert load_config(write(tmp_path, "[train]\nlr = 1\n")).train.lr == 1.0


@pytest.mark.parametrize("override, expected", [
    ("--train.stpes=5", "train.steps"),
    ("--trian.steps=5", "train.steps"),
    ("--model.vocab=5", "model.vocab_size"),
])
def test_mistyped_key_names_the_closest_valid_one(override, expected):
    with pytest.raises(ConfigError, match=f"did you mean '{expected}'"):
        load_config(None, [override])


def test_unknown_key_in_file_names_the_file(tmp_path):
    path = write(tmp_path, "[train]\nwarmpu = 3\n")
    with pytest.raises(ConfigError, match=r"train\.warmpu.*c\.toml.*train\.warmup"):
        load_config(path)


@pytest.mark.parametrize("override, message", [
    ("--train.steps=abc", "train.steps: expected an integer, got 'abc'"),
    ("--train.lr=fast", "train.lr: expected a number"),
    ("--train.deterministic=maybe", "expected true or false"),
    ("--train.schedule=step", "not one of cosine, linear, constant"),
    ("--train.steps=0", "train.steps must be > 0"),
    ("--train.micro_batch=3", "multiple of train.micro_batch"),
    ("--train", "must look like --section.key=value"),
    ("--model.name=gpt5", "unknown size 'gpt5'"),
    ("--train=3", "'train' is a section"),
    ("--fault.hang_timeout_s=-5", "fault.hang_timeout_s must be \"auto\", 0"),
    ("--fault.hang_timeout_s=soon", "fault.hang_timeout_s: expected float | auto"),
    ("--fault.hang_timeout_s=600", "must be below parallel.timeout_s"),
    ("--fault.hang_rank=1", "fault.hang_rank = 1 needs fault.hang_at_step > 0"),
])
def test_bad_values_are_named(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, [override])


def test_hang_timeout_is_auto_off_or_seconds_below_the_collective_timeout():
    assert load_config(None, []).fault.hang_timeout_s == "auto"
    assert load_config(None, ["--fault.hang_timeout_s=0"]).fault.hang_timeout_s == 0
    assert load_config(None, ["--fault.hang_timeout_s=20"]).fault.hang_timeout_s == 20
    assert load_config(None, ["--fault.hang_timeout_s=700", "--parallel.timeout_s=900"]).fault.hang_timeout_s == 700


def test_wrong_type_in_toml_file(tmp_path):
    with pytest.raises(ConfigError, match="train.steps: expected int, got the string '5'"):
        load_config(write(tmp_path, "[train]\nsteps = '5'\n"))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[train\nsteps = 1"))


def test_space_separated_overrides():
    assert split_overrides(["--train.steps", "5", "--run.dir=x"]) == ["--train.steps=5", "--run.dir=x"]


def test_resolved_toml_round_trips(tmp_path):
    cfg = load_config(None, ["--train.steps=3", '--run.dir=a "quoted" dir', "--train.lr=1e-05"])
    text = to_toml(cfg)
    tomllib.loads(text)  # valid TOML
    again = load_config(write(tmp_path, text))
    assert again == cfg


def test_every_field_is_documented():
    text = describe()
    for key in all_keys(JobConfig):
        assert f"  {key} (" in text, key
    for line in text.splitlines():
        if line.startswith("      "):
            assert line.strip(), "empty doc line"


def test_repo_configs_load():
    for name in ("debug", "demo"):
        load_config(f"configs/{name}.toml")


def test_global_batch_must_split_over_data_parallel_ranks():
    cfg = load_config(None, ["--train.global_batch=8", "--train.micro_batch=2"])
    check_data_parallel(cfg.train, 4)
    with pytest.raises(ConfigError, match=r"multiple of train.micro_batch \(2\) x data-parallel ranks \(3\) = 6"):
        check_data_parallel(cfg.train, 3)
