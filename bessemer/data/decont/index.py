"""The benchmark side of decontamination: the n-gram hashes of every item of the task files `bessemer eval`
reads (bessemer/benchmarks/tasks.py), in one dict, built once per process.

What of an item is indexed (datatrove's NGramsDecontIndexer indexes lighteval's query and gold the same way,
with `find_query_ngrams` on): the item's own prompt (its template rendered, without the task's description and
few-shot examples, which are not the item) followed by the task's delimiter and the right answer, as one text,
so that the n-grams of the question alone, of the answer alone and those across both are all found; and, when
the template has text of its own ("Question: {q}\nAnswer:"), the same with the fields alone, as the item reads
where it was copied without the prompt format.
`choices = "all"` indexes the prompt followed by each answer (wrong ones too), `"none"` the prompt alone. A
perplexity task's documents are indexed whole. An item shorter than n units has no n-gram and is not looked
for (as in datatrove): `Benchmark.indexed` counts the items that are.
"""

import dataclasses
import itertools
import os
import string
from dataclasses import dataclass

from bessemer.benchmarks.tasks import Task, multiple_choice_items, perplexity_items
from bessemer.data.decont.ngrams import Units, Window, text_hashes
from bessemer.errors import BessemerError

CHOICES = ("gold", "all", "none")


def item_texts(task: Task, choices: str = "gold") -> list[tuple[str, list[str]]]:
    """(item id, the texts indexed for it) for every item of a task (module doc)."""
    if task.kind == "perplexity":
        if task.data is None:
            raise BessemerError(f"{task.path}: a perplexity task over token shards has no text to look for in "
                                f"documents; give it `data` (JSONL with a {task.text!r} field)")
        return [(item_id, [text]) for item_id, text in perplexity_items(task)]
    bare = dataclasses.replace(task, num_fewshot=0, description="")
    variants = [multiple_choice_items(bare)]
    fields = fields_only(task.template)
    if fields != task.template:
        variants.append(multiple_choice_items(dataclasses.replace(bare, template=fields)))
    out = []
    for same in zip(*variants):
        texts = []
        for item in same:
            answers = {"gold": [item.choices[item.gold]], "all": item.choices, "none": []}[choices]
            texts += [item.context + task.target_delimiter + a for a in answers] or [item.context]
        out.append((same[0].id, texts))
    return out


def fields_only(template: str) -> str:
    """The template's fields alone, a space between them ("Question: {q}\nAnswer:" -> "{q}"): the item as it
    appears outside the benchmark's prompt format, where "Question:" and "Answer:" would break the n-grams that
    run from the question into the answer."""
    fields = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is not None:
            fields.append("{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
    return " ".join(fields)


@dataclass
class Benchmark:
    name: str
    items: int = 0
    indexed: int = 0  # items with at least one n-gram; the others are shorter than n
    ngrams: int = 0  # distinct n-grams it brought to the index (one also in an earlier task counts there)

    def describe(self) -> str:
        return (f"{self.items:,} item{'s' * (self.items != 1)}, {self.indexed:,} long enough, "
                f"{self.ngrams:,} n-grams")


@dataclass
class Match:
    """A window of a document whose n-gram is a benchmark item's."""

    benchmark: str
    item: str
    window: Window


class NGramIndex:
    """n-gram hash -> the benchmark and item it came from (the first task and item that has it)."""

    def __init__(self, tasks: list[Task], n: int, cjk_n: int, choices: str = "gold"):
        self.n, self.cjk_n = n, cjk_n
        self.benchmarks = [Benchmark(t.name) for t in tasks]
        self._items: list[list[str]] = []
        owner: dict[int, int] = {}
        for b, (task, bench) in enumerate(zip(tasks, self.benchmarks)):
            ids = []
            for i, (item_id, texts) in enumerate(item_texts(task, choices)):
                ids.append(item_id)
                found = False
                for text in texts:
                    words, chars = text_hashes(text, n, cjk_n)
                    for h in itertools.chain(words.tolist(), chars.tolist()):
                        found = True
                        if h not in owner:
                            owner[h] = (b << 32) | i
                            bench.ngrams += 1
                bench.indexed += found
            bench.items = len(ids)
            self._items.append(ids)
        self._owner = owner

    def __len__(self) -> int:
        return len(self._owner)

    def hit(self, text: str) -> bool:
        """Whether any n-gram of `text` is a benchmark's: the fast path, for every document."""
        words, chars = text_hashes(text, self.n, self.cjk_n)
        keys = self._owner.keys()
        return not (keys.isdisjoint(words.tolist()) and keys.isdisjoint(chars.tolist()))

    def matches(self, text: str) -> list[Match]:
        """Every window of `text` whose n-gram is a benchmark's, with where it lies (the slow path)."""
        out = []
        for w in Units(text).windows(self.n, self.cjk_n, self._owner.__contains__):
            o = self._owner[w.hash]
            b, i = o >> 32, o & 0xFFFFFFFF
            out.append(Match(self.benchmarks[b].name, self._items[b][i], w))
        return out


_CACHE: dict[tuple, NGramIndex] = {}


def _stamp(path) -> tuple:
    if path is None:
        return ()
    st = os.stat(path)
    return str(path), st.st_mtime_ns, st.st_size


def load_index(tasks: list[Task], n: int, cjk_n: int, choices: str = "gold") -> NGramIndex:
    """The index of these tasks, built once per process (every shard's step of a run asks for the same one);
    the files' sizes and modification times are part of the key, so an edited benchmark is read again."""
    key = (tuple(repr(t) for t in tasks), tuple(_stamp(p) for t in tasks for p in (t.path, t.data)), n, cjk_n,
           choices)
    if key not in _CACHE:
        if len(_CACHE) >= 4:
            _CACHE.clear()
        _CACHE[key] = NGramIndex(tasks, n, cjk_n, choices)
    return _CACHE[key]
