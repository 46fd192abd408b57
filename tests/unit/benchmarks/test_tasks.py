import json

import pytest

from bessemer.benchmarks.tasks import expand, multiple_choice_items, perplexity_texts, read_task
from bessemer.errors import BessemerError


def write(tmp_path, name, text):
    (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path / name


def jsonl(tmp_path, name, records):
    return write(tmp_path, name, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


ITEMS = [{"id": f"q{i}", "context": f"Q{i}?", "choices": ["yes", "no"], "gold": i % 2} for i in range(4)]


def test_defaults_read_the_bench_layout(tmp_path):
    jsonl(tmp_path, "d.jsonl", ITEMS)
    task = read_task(write(tmp_path, "t.toml", 'data = "d.jsonl"\n'))
    assert (task.name, task.kind, task.num_fewshot, task.target_delimiter) == ("t", "multiple_choice", 0, " ")
    items = multiple_choice_items(task)
    assert [(i.id, i.context, i.choices, i.gold) for i in items[:2]] == [
        ("q0", "Q0?", ["yes", "no"], 0), ("q1", "Q1?", ["yes", "no"], 1)]


def test_mmlu_style_fields_letters_and_templates(tmp_path):
    jsonl(tmp_path, "m.jsonl", [{"question": "2+2", "A": "3", "B": "4", "answer": "B"},
                                {"question": "1+1", "A": "2", "B": "5", "answer": 0}])
    task = read_task(write(tmp_path, "m.toml", 'data = "m.jsonl"\ntemplate = "{question}\\nA. {A}\\nB. {B}\\nAnswer:"\n'
                                               'choices = ["A", "B"]\ngold = "answer"\n'
                                               'description = "Arithmetic.\\n\\n"\n'))
    first, second = multiple_choice_items(task)
    assert first.context == "Arithmetic.\n\n2+2\nA. 3\nB. 4\nAnswer:"
    assert (first.choices, first.gold, second.gold) == (["A", "B"], 1, 0)
    # Choices as the texts themselves, the answer still a letter.
    task.choices = ["{A}", "{B}"]
    assert [(i.choices, i.gold) for i in multiple_choice_items(task)] == [(["3", "4"], 1), (["2", "5"], 0)]


def test_gold_as_text_or_digits(tmp_path):
    jsonl(tmp_path, "d.jsonl", [{"context": "c", "choices": ["a", "b", "c"], "gold": "c"},
                                {"context": "c", "choices": ["a", "b", "c"], "gold": "1"}])
    task = read_task(write(tmp_path, "t.toml", 'data = "d.jsonl"\n'))
    assert [i.gold for i in multiple_choice_items(task)] == [2, 1]


def test_fewshot_first_examples_without_the_item_itself(tmp_path):
    """lm-eval's first_n sampler over the item's own file: the first N records other than the item."""
    jsonl(tmp_path, "d.jsonl", ITEMS)
    task = read_task(write(tmp_path, "t.toml", 'data = "d.jsonl"\nnum_fewshot = 2\ntemplate = "Q: {context}\\nA:"\n'))
    items = multiple_choice_items(task)
    assert items[0].context == "Q: Q1?\nA: no\n\nQ: Q2?\nA: yes\n\nQ: Q0?\nA:"
    assert items[1].context == "Q: Q0?\nA: yes\n\nQ: Q2?\nA: yes\n\nQ: Q1?\nA:"
    assert items[3].context.startswith("Q: Q0?\nA: yes\n\nQ: Q1?\nA: no\n\n")
    # From another file the examples are its first ones, none excluded.
    jsonl(tmp_path, "shots.jsonl", ITEMS[:2])
    task = read_task(write(tmp_path, "t2.toml", 'data = "d.jsonl"\nfewshot_data = "shots.jsonl"\nnum_fewshot = 2\n'))
    assert multiple_choice_items(task)[0].context == "Q0? yes\n\nQ1? no\n\nQ0?"
    task.num_fewshot = 3
    with pytest.raises(BessemerError, match="only 2 examples"):
        multiple_choice_items(task)


@pytest.mark.parametrize("text, words", [
    ('data = "d.jsonl"\nnum_fewshots = 2\n', "did you mean 'num_fewshot'"),
    ('data = "d.jsonl"\nkind = "generate"\n', "multiple_choice, perplexity"),
    ('kind = "multiple_choice"\n', "set `data`"),
    ('data = "missing.jsonl"\n', "not found"),
    ('data = "d.jsonl"\nnum_fewshot = -1\n', "num_fewshot must be"),
    ('data = "d.jsonl"\nchoices = 3\n', "choices must be"),
    ('data = "d.jsonl\n', "not valid TOML"),
])
def test_task_file_errors_name_the_key(tmp_path, text, words):
    jsonl(tmp_path, "d.jsonl", ITEMS)
    with pytest.raises(BessemerError, match=words):
        read_task(write(tmp_path, "t.toml", text))


@pytest.mark.parametrize("record, words", [
    ({"context": "c", "choices": ["a"], "gold": 3}, "expected an index below 1"),
    ({"context": "c", "choices": "ab", "gold": 0}, "non-empty list of strings"),
    ({"prompt": "c", "choices": ["a"], "gold": 0}, "names 'context'; the item has prompt"),
])
def test_bad_items_name_file_and_line(tmp_path, record, words):
    jsonl(tmp_path, "d.jsonl", [ITEMS[0], record])
    task = read_task(write(tmp_path, "t.toml", 'data = "d.jsonl"\n'))
    with pytest.raises(BessemerError, match=words) as e:
        multiple_choice_items(task)
    assert "d.jsonl:2" in str(e.value)


def test_perplexity_texts_and_directories_of_tasks(tmp_path):
    jsonl(tmp_path, "p.jsonl", [{"body": "one"}, {"body": "two"}, {"body": "three"}])
    (tmp_path / "tasks").mkdir()
    write(tmp_path / "tasks", "b.toml", 'kind = "perplexity"\ndata = "../p.jsonl"\ntext = "body"\nlimit = 2\n')
    write(tmp_path / "tasks", "a.toml", 'name = "x"\nkind = "perplexity"\ndata = "../p.jsonl"\ntext = "body"\n')
    tasks = expand([tmp_path / "tasks"])
    assert [t.name for t in tasks] == ["x", "b"]
    assert perplexity_texts(tasks[1]) == ["one", "two"]
    with pytest.raises(BessemerError, match="share the name"):
        expand([tmp_path / "tasks", tmp_path / "tasks" / "a.toml"])
