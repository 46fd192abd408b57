"""Task files: a small TOML file that says where a benchmark's items are and how to render them.

A multiple-choice task turns each JSONL record into (context, choices, gold) and a perplexity task names the
texts (or token shards) to score. No torch, no tokenizer: rendering is string work only, the same rendering
lm-eval-harness does for the matching YAML (docs/eval.md has the field-by-field correspondence).
"""

import json
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bessemer.errors import BessemerError

KINDS = ("multiple_choice", "perplexity")
_KEYS = {
    "name": "the task's name in results (default: the file's name without .toml)",
    "kind": "multiple_choice | perplexity",
    "data": "JSONL file of items, relative to the task file",
    "template": "the prompt: item fields in braces, e.g. \"{question}\\nAnswer:\" (literal braces doubled)",
    "choices": "the field holding the list of choices, or a list of templates, one per choice",
    "gold": "the field holding the answer: an index, a choice's text, or a letter A, B, ...",
    "target_delimiter": "between the prompt and each choice (default one space)",
    "num_fewshot": "solved examples before each item (default 0)",
    "fewshot_data": "JSONL the examples come from, first ones first (default: `data`, the item itself skipped)",
    "fewshot_delimiter": "after each solved example (default a blank line)",
    "description": "text before everything else, e.g. \"The following are questions about physics.\\n\\n\"",
    "id": "the field holding an item's id (default id; the line number when absent)",
    "text": "perplexity: the field holding each document's text (default text)",
    "shards": "perplexity: a token shard directory (index.json) instead of `data`",
    "max_tokens": "perplexity over shards: how many tokens to score (default 1,000,000)",
    "domain": "perplexity over shards: score only this domain's documents (default: every document, in order)",
    "limit": "score only the first N items (default all)",
}


@dataclass
class Item:
    """One multiple-choice question, rendered: the model scores `context + delimiter + choice` for each."""

    id: str
    context: str
    choices: list[str]
    gold: int


@dataclass
class Task:
    name: str
    kind: str
    path: Path  # the task file
    data: Path | None = None
    template: str = "{context}"
    choices: str | list[str] = "choices"
    gold: str = "gold"
    target_delimiter: str = " "
    num_fewshot: int = 0
    fewshot_data: Path | None = None
    fewshot_delimiter: str = "\n\n"
    description: str = ""
    id: str = "id"
    text: str = "text"
    shards: Path | None = None
    max_tokens: int = 1_000_000
    domain: str = ""
    limit: int | None = None


def _closest(key: str, options) -> str:
    import difflib

    match = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def read_task(path: str | Path) -> Task:
    """Read and check a task file; every problem names the file and the key."""
    path = Path(path)
    if not path.is_file():
        raise BessemerError(f"task file {path} not found")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BessemerError(f"{path}: not valid TOML: {e}") from None
    for key in raw:
        if key not in _KEYS:
            raise BessemerError(f"{path}: unknown key {key!r}{_closest(key, _KEYS)}; valid keys: {', '.join(_KEYS)}")
    kind = raw.get("kind", "multiple_choice")
    if kind not in KINDS:
        raise BessemerError(f"{path}: kind {kind!r} is not one of {', '.join(KINDS)}")
    task = Task(name=raw.get("name", path.stem), kind=kind, path=path)
    for key in ("template", "gold", "target_delimiter", "fewshot_delimiter", "description", "id", "text", "domain"):
        if key in raw:
            if not isinstance(raw[key], str):
                raise BessemerError(f"{path}: {key} must be a string, got {raw[key]!r}")
            setattr(task, key, raw[key])
    if "choices" in raw:
        c = raw["choices"]
        if not (isinstance(c, str) or (isinstance(c, list) and c and all(isinstance(x, str) for x in c))):
            raise BessemerError(f"{path}: choices must be a field name or a list of templates, got {c!r}")
        task.choices = c
    for key in ("num_fewshot", "max_tokens", "limit"):
        if key in raw:
            if not isinstance(raw[key], int) or raw[key] < (1 if key != "num_fewshot" else 0):
                raise BessemerError(f"{path}: {key} must be a whole number >= {0 if key == 'num_fewshot' else 1}, "
                                    f"got {raw[key]!r}")
            setattr(task, key, raw[key])
    for key in ("data", "fewshot_data", "shards"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise BessemerError(f"{path}: {key} must be a path, got {raw[key]!r}")
            setattr(task, key, (path.parent / raw[key]).resolve())
    if (task.data is None) == (task.shards is None) or (task.shards is not None and kind != "perplexity"):
        raise BessemerError(f"{path}: set `data` (a JSONL file){' or `shards`' if kind == 'perplexity' else ''}, "
                            f"exactly one")
    if task.domain and task.shards is None:
        raise BessemerError(f"{path}: domain applies to a perplexity task over `shards` only")
    for key in ("data", "fewshot_data", "shards"):
        p = getattr(task, key)
        if p is not None and not p.exists():
            raise BessemerError(f"{path}: {key} {p} not found")
    return task


def read_records(path: Path) -> list[dict]:
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise BessemerError(f"{path}:{n}: not valid JSON: {e}") from None
            if not isinstance(record, dict):
                raise BessemerError(f"{path}:{n}: expected a JSON object, got {type(record).__name__}")
            record.setdefault("_line", n)
            records.append(record)
    return records


def render(template: str, record: dict, where: str) -> str:
    """str.format with the record's fields; a missing field names the template and the fields there are."""
    try:
        return string.Formatter().vformat(template, (), record)
    except KeyError as e:
        fields = ", ".join(k for k in record if k != "_line")
        raise BessemerError(f"{where}: the template {template!r} names {e.args[0]!r}; the item has {fields}") from None
    except (IndexError, ValueError) as e:
        raise BessemerError(f"{where}: cannot render {template!r}: {e}") from None


def _choices(task: Task, record: dict, where: str) -> list[str]:
    if isinstance(task.choices, list):
        return [render(t, record, where) for t in task.choices]
    value = record.get(task.choices)
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise BessemerError(f"{where}: field {task.choices!r} must hold a non-empty list of strings, got {value!r}")
    return value


def _gold(task: Task, record: dict, choices: list[str], where: str) -> int:
    """lm-eval's reading of a target: an index (int, or digits), else a choice's text, else a letter."""
    value = record.get(task.gold)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, str):
        if value in choices:
            value = choices.index(value)
        elif len(value) == 1 and value.upper() in string.ascii_uppercase:
            value = string.ascii_uppercase.index(value.upper())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(choices):
        raise BessemerError(f"{where}: gold {task.gold!r} is {value!r}; expected an index below {len(choices)}, a "
                            f"choice's text or a letter")
    return value


def multiple_choice_items(task: Task) -> list[Item]:
    """Every item of a multiple-choice task, its context holding the description and the few-shot examples."""
    records = read_records(task.data)
    if task.limit is not None:
        records = records[: task.limit]
    shot_path = task.fewshot_data or task.data
    shots = read_records(shot_path) if task.num_fewshot else []
    same_file = shot_path == task.data
    parsed = {}

    def rendered(record: dict, path: Path) -> tuple[str, list[str], int]:
        key = (path, record["_line"])
        if key not in parsed:
            where = f"{path}:{record['_line']}"
            choices = _choices(task, record, where)
            parsed[key] = render(task.template, record, where), choices, _gold(task, record, choices, where)
        return parsed[key]

    items = []
    for record in records:
        context, choices, gold = rendered(record, task.data)
        prefix = task.description
        if task.num_fewshot:
            # The first N examples, the item itself excluded when they come from its own file (lm-eval's
            # `first_n` sampler; an identical record elsewhere in the file is excluded as well).
            pool = [s for s in shots if not same_file or _fields(s) != _fields(record)]
            if len(pool) < task.num_fewshot:
                raise BessemerError(f"{task.path}: num_fewshot {task.num_fewshot} but only {len(pool)} examples")
            for shot in pool[: task.num_fewshot]:
                q, c, g = rendered(shot, shot_path)
                prefix += q + task.target_delimiter + c[g] + task.fewshot_delimiter
        item_id = str(record.get(task.id, f"{task.data.name}:{record['_line']}"))
        items.append(Item(item_id, prefix + context, choices, gold))
    return items


def _fields(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "_line"}


def perplexity_items(task: Task) -> list[tuple[str, str]]:
    """(id, text) of every document of a perplexity task over `data`."""
    records = read_records(task.data)
    if task.limit is not None:
        records = records[: task.limit]
    items = []
    for record in records:
        text = record.get(task.text)
        if not isinstance(text, str):
            raise BessemerError(f"{task.data}:{record['_line']}: field {task.text!r} must hold a string, got "
                                f"{type(text).__name__}")
        items.append((str(record.get(task.id, f"{task.data.name}:{record['_line']}")), text))
    return items


def perplexity_texts(task: Task) -> list[str]:
    return [text for _, text in perplexity_items(task)]


def expand(paths: list[str | Path]) -> list[Task]:
    """Task files, or directories of them (every *.toml inside, sorted)."""
    tasks = []
    for p in map(Path, paths):
        files = sorted(p.glob("*.toml")) if p.is_dir() else [p]
        if not files:
            raise BessemerError(f"{p} holds no task files (*.toml)")
        tasks += [read_task(f) for f in files]
    names = [t.name for t in tasks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise BessemerError(f"two task files share the name {dup[0]!r}; set `name` in one of them")
    return tasks
