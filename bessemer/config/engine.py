"""The config engine: TOML files, `--section.key=value` overrides, type coercion, TOML writing and `--help`
text, for any tree of dataclasses whose fields carry a doc (`opt`). It knows no section: bessemer's sections
live in sections.py, their cross-field checks in validate.py. No torch.
"""

import dataclasses
import difflib
import tomllib
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from bessemer.errors import ConfigError


def opt(default: Any, doc: str) -> Any:
    """A config field with a default and a one-line doc (units, sentinel values)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def section(cls: type, doc: str) -> Any:
    """A nested section (a dataclass) as a field."""
    return field(default_factory=cls, metadata={"doc": doc})


# ---------------------------------------------------------------------------------------------- loading

def read_toml(path: str | Path, what: str) -> dict:
    """A TOML file as a dict; a missing or malformed file is a ConfigError naming it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} file not found: {path}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def load(cls: type, path: str | Path | None, overrides: typing.Sequence[str] = ()) -> Any:
    """Defaults of `cls`, then the TOML file, then `--section.key=value` overrides (not validated here)."""
    cfg = cls()
    if path is not None:
        _apply_table(cfg, read_toml(path, "config"), prefix="", where=str(path))
    for item in overrides:
        key, value = parse_override(item)
        set_key(cfg, key, value, where="command line", parse=True)
    return cfg


def parse_override(item: str) -> tuple[str, str]:
    """`--train.steps=50` -> ("train.steps", "50")."""
    body = item[2:] if item.startswith("--") else item
    if "=" not in body:
        raise ConfigError(f"override {item!r} must look like --section.key=value")
    key, value = body.split("=", 1)
    return key.strip(), value


def split_overrides(argv: typing.Sequence[str]) -> list[str]:
    """Normalise `--a.b value` to `--a.b=value`; returns the overrides in order."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
        else:
            out.append(arg)
            i += 1
    return out


def all_keys(cfg_or_cls: Any, prefix: str = "") -> list[str]:
    """Every dotted leaf key, e.g. 'train.steps'."""
    keys = []
    for f in dataclasses.fields(cfg_or_cls):
        name = prefix + f.name
        if _is_section(f):
            keys += all_keys(_section_type(f), name + ".")
        else:
            keys.append(name)
    return keys


def _is_section(f: dataclasses.Field) -> bool:
    return isinstance(f.type, type) and dataclasses.is_dataclass(f.type)


def _section_type(f: dataclasses.Field) -> type:
    return f.type  # type: ignore[return-value]


def _unknown_key(key: str, root: Any, where: str) -> ConfigError:
    candidates = all_keys(root) + [f.name for f in dataclasses.fields(root)]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; valid sections: {', '.join(f.name for f in dataclasses.fields(root))}"
    return ConfigError(f"unknown config key '{key}' ({where}){hint}")


def set_key(cfg: Any, key: str, value: Any, where: str, parse: bool = False) -> None:
    """Set a dotted key. With `parse` (command-line text), strings are parsed as the field's type; values
    from a TOML file must already have the right type."""
    obj, parts = cfg, key.split(".")
    for i, part in enumerate(parts):
        f = next((f for f in dataclasses.fields(obj) if f.name == part), None)
        if f is None:
            raise _unknown_key(key, cfg, where)
        if i < len(parts) - 1:
            if not _is_section(f):
                raise _unknown_key(key, cfg, where)
            obj = getattr(obj, part)
        else:
            if _is_section(f):
                raise ConfigError(f"'{key}' is a section, not a key ({where}); set one of its keys, e.g. "
                                  f"{all_keys(_section_type(f), key + '.')[0]}")
            if not parse and isinstance(value, str) and not _takes_string(f.type):
                raise ConfigError(f"{key}: expected {_type_name(f.type)}, got the string {value!r} ({where})")
            setattr(obj, part, coerce(value, f.type, key, where))


def _takes_string(tp: Any) -> bool:
    """Whether a TOML string is a valid value for the type: str, a Literal, or a union with either."""
    if tp is str or typing.get_origin(tp) is Literal:
        return True
    return typing.get_origin(tp) in (types.UnionType, typing.Union) and any(map(_takes_string, typing.get_args(tp)))


def _field_at(cfg: Any, key: str) -> dataclasses.Field | None:
    """The field a dotted key names, or None when there is none."""
    obj, f = cfg, None
    for part in key.split("."):
        if f is not None:
            if not _is_section(f):
                return None
            obj = getattr(obj, f.name)
        f = next((f for f in dataclasses.fields(obj) if f.name == part), None)
        if f is None:
            return None
    return f


def _apply_table(cfg: Any, table: dict, prefix: str, where: str) -> None:
    for name, value in table.items():
        key = prefix + name
        f = _field_at(cfg, key)
        if isinstance(value, dict) and not (f is not None and typing.get_origin(f.type) is dict):
            _apply_table(cfg, value, key + ".", where)
        else:
            set_key(cfg, key, value, where)


_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def coerce(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check (TOML values) or parse (command-line strings) `value` as type `tp`."""
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{key}: expected {expected}, got {value!r} ({where})")

    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, choices))} ({where})")
        return value
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if isinstance(value, str) and value.lower() in ("", "none", "null") and len(args) < len(typing.get_args(tp)):
            return None
        errors = []
        for member in args:  # the first member that accepts the value
            try:
                return coerce(value, member, key, where)
            except ConfigError as e:
                errors.append(e)
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r} ({where})")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, str):
            value = _parse_list(value, key, where)
        if not isinstance(value, list):
            raise bad("a list")
        return [coerce(v.strip() if isinstance(v, str) else v, item_tp, key, where) for v in value]
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        assert key_tp is str, f"config tables are keyed by strings, not {key_tp!r} ({key})"
        if isinstance(value, str):
            value = _parse_table(value, key, where)
        if not isinstance(value, dict):
            raise bad("a table of name = value")
        return {str(k).strip(): coerce(v.strip() if isinstance(v, str) else v, value_tp, f"{key}.{k}", where)
                for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise bad("true or false")
    if tp is int:
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                raise bad("an integer") from None
        raise bad("an integer")
    if tp is float:
        if isinstance(value, bool):
            raise bad("a number")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise bad("a number") from None
        raise bad("a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad("a string")
    raise AssertionError(f"unsupported config type {tp!r} for {key}")


def _parse_list(text: str, key: str, where: str) -> list:
    """A command-line list: a TOML array (`["a: x=1, y=2", "b"]`, needed when items hold commas) or bare
    comma-separated items (`2,2` or `[2,2]`)."""
    if text.lstrip().startswith("[") and ('"' in text or "'" in text):
        try:
            return tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{key}: {text!r} is not a TOML array ({e}) ({where})") from None
    return [v for v in text.strip().strip("[]").split(",") if v.strip()]


def _parse_table(text: str, key: str, where: str) -> dict:
    """A command-line table: `web:0.45,code:0.3` (or `web=0.45,...`), or a TOML inline table `{web = 0.45}`;
    empty text is the empty table."""
    if text.lstrip().startswith("{"):
        try:
            return tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{key}: {text!r} is not a TOML inline table ({e}) ({where})") from None
    out = {}
    for item in filter(str.strip, text.split(",")):
        name, sep, value = item.replace("=", ":", 1).partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"{key}: expected name:value items separated by commas (web:0.45,code:0.3), got "
                              f"{item.strip()!r} ({where})")
        out[name.strip()] = value
    return out


# ---------------------------------------------------------------------------------------------- writing

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table; keys quoted unless bare
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise AssertionError(f"cannot write {v!r} as TOML")


def _toml_key(k: str) -> str:
    return k if k and all(c.isascii() and (c.isalnum() or c in "_-") for c in k) else _toml_value(k)


def to_toml(cfg: Any, prefix: str = "") -> str:
    """The resolved config as TOML; `load_config` reads it back to an equal config."""
    plain, subs = [], []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if _is_section(f):
            subs.append(to_toml(value, prefix + f.name + "."))
        elif value is not None:
            plain.append(f"{f.name} = {_toml_value(value)}")
    head = [f"[{prefix[:-1]}]"] if prefix and plain else []
    body = "\n".join(head + plain)
    return "\n\n".join(p for p in [body] + subs if p) + ("\n" if not prefix else "")


def describe(cls: type) -> str:
    """Every section and key with type, default and doc — the body of `bessemer train --help`."""
    lines = []

    def walk(c: type, prefix: str) -> None:
        for f in dataclasses.fields(c):
            if _is_section(f):
                lines.append(f"\n[{prefix}{f.name}]  {f.metadata.get('doc', '')}")
                walk(_section_type(f), prefix + f.name + ".")
            else:
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
                tp = _type_name(f.type)
                lines.append(f"  {prefix}{f.name} ({tp}, default {_toml_value(default) if default is not None else 'unset'})")
                lines.append(f"      {f.metadata.get('doc', '')}")

    walk(cls, "")
    return "\n".join(lines).lstrip("\n")


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(map(str, typing.get_args(tp)))
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if typing.get_origin(tp) is dict:
        return f"table of {' to '.join(map(_type_name, typing.get_args(tp)))}"
    return getattr(tp, "__name__", str(tp))
