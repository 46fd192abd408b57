import pytest

from bessemer.config import load_config
from bessemer.errors import ConfigError
from bessemer.config.precision_rules import ModulePrecision, parse_rules, resolve

BASE = ModulePrecision("bf16", "bf16", "fp32", "tensorwise")


def test_later_rules_override_earlier_ones_key_by_key():
    rules = parse_rules(["layers.*: fp8=rowwise", "*norm: param=fp32, compute=fp32", "layers.0.*: fp8=none"])
    assert resolve("layers.3.attention.wq", rules, BASE) == ModulePrecision("bf16", "bf16", "fp32", "rowwise")
    assert resolve("layers.0.attention.wq", rules, BASE).fp8 is None
    assert resolve("layers.3.ffn_norm", rules, BASE) == ModulePrecision("fp32", "fp32", "fp32", "rowwise")
    assert resolve("norm", rules, BASE).param == "fp32"
    assert resolve("output", rules, BASE) == BASE


@pytest.mark.parametrize("text, words", [
    ("layers.*", "PATTERN: key=value"),
    ("*norm: param=fp64", "fp32, bf16, fp16"),
    ("*norm: fp8=e4m3", "tensorwise"),
    ("*norm: dtype=fp32", "unknown key 'dtype'"),
    ("*norm: param", "key=value"),
    (": param=fp32", "empty module pattern"),
])
def test_bad_rules_say_what_is_wrong(text, words):
    with pytest.raises(ConfigError, match="precision.rules") as e:
        parse_rules([text])
    assert words in str(e.value)


def test_rules_from_the_command_line_keep_their_commas():
    cfg = load_config(None, ['--precision.rules=["*norm: param=fp32, compute=fp32", "output: fp8=none"]'])
    assert cfg.precision.rules == ["*norm: param=fp32, compute=fp32", "output: fp8=none"]


def test_fp8_on_fp16_is_refused():
    with pytest.raises(ConfigError, match="bf16 or fp32 base"):
        load_config(None, ["--precision.dtype=fp16", "--precision.fp8.enabled=true"])


@pytest.mark.parametrize("override, words", [
    ("--precision.scaler.min_scale=0", "min_scale"),
    ("--precision.scaler.backoff_factor=1.5", "backoff_factor"),
    ("--precision.offload.fraction=0", "fraction"),
    ("--precision.activation_checkpoint.save_ops=mm,matmul", "unknown op(s) matmul"),
    ("--precision.fp8.recipe=delayed", "unknown recipe"),
])
def test_bad_precision_settings_are_refused(override, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert words in str(e.value)
