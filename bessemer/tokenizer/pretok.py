"""Domain-aware pre-tokenization: one regex, serialized inside tokenizer.json. No torch.

BPE never merges across pre-token boundaries, so the regex decides which boundaries no token may cross.
It is one `Split(Regex(PATTERN), behavior="isolated")` of HF tokenizers (Oniguruma syntax) followed by
`ByteLevel(use_regex=False)` (BPE) or `Metaspace` (Unigram), so `Tokenizer.from_file` and transformers'
`PreTrainedTokenizerFast` reproduce it exactly. The alternatives, tried in order at each position:

 1. `第(?=[NUMERAL\\p{N}])`        第 when a numeral follows (第一千一百七十九条, 第2024号): its own piece
 2. `(?<=[NUMERAL\\p{N}])[ATTACH]` 条/款/项/章/节/编/卷/部/号/年/月/日/个/次 right after a numeral: its own piece
 3. `(?<=第)[NUMERAL]+|[NUMERAL]{2,}|[NUMERAL](?=[ATTACH])`   a numeral that is a number, whole: a run after
    第, a run of two or more (一千一百七十九, 二〇二四, 千万), or one character before an ATTACH character (三|月)
 4. `\\p{N}{1,3}`                   digit groups of at most three (2024 -> 202 4), as GPT-4 does
 5. ` ?(?:(?!第[NUMERAL\\p{N}]|[NUMERAL]{2}|[NUMERAL][ATTACH])\\p{Han})+`   a Han run with at most one leading
    space; it stops before whatever 1-3 cut, so 民法典第一千条 -> 民法典|第|一千|条, while a single numeral
    character inside a word stays in it (一些, 统一, 十分, 之一)
 6. `'(?i:[sdmt]|ll|ve|re)`         English contractions
 7. ` ?[\\p{L}\\p{M}&&[^\\p{Han}]]+`   a word (letters and combining marks) with at most one leading space
 8. ` ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*`   a symbol run (operators, punctuation, emoji), newlines after it kept
 9. `\\s*[\\r\\n]`                    whitespace up to and including line breaks
10. `\\s+(?!\\S)` then `\\s+`          other whitespace runs; the last space before a word goes to the word, so
    indentation, tabs and trailing spaces stay pieces of their own (code) while prose words keep " word"

Why single numerals stay in words: 一, 十, 百, 千, 万 sit inside common words (一些, 统一, 十分, 一般); cutting
every one off cost compression on ordinary text. A lone numeral is a number only next to 第 or a counted
unit (ATTACH), and those boundaries are kept; a run of two or more is kept whole either way. The price: a
word whose numeral is followed by an ATTACH character is cut there (统一|部|署 reads 一部 as "one unit").
bench/tokenizer_compression.py measures both sides on real statutes.
"""

from typing import Iterator

NUMERALS = "零〇一二三四五六七八九十百千万亿两"
ATTACH = "条款项章节编卷部号年月日个次"
ORDINAL = "第"

_NUM = f"[{NUMERALS}\\p{{N}}]"
PATTERN = "|".join([
    f"{ORDINAL}(?={_NUM})",
    f"(?<={_NUM})[{ATTACH}]",
    f"(?<={ORDINAL})[{NUMERALS}]+|[{NUMERALS}]{{2,}}|[{NUMERALS}](?=[{ATTACH}])",
    "\\p{N}{1,3}",
    f" ?(?:(?!{ORDINAL}{_NUM}|[{NUMERALS}]{{2}}|[{NUMERALS}][{ATTACH}])\\p{{Han}})+",
    "'(?i:[sdmt]|ll|ve|re)",
    " ?[\\p{L}\\p{M}&&[^\\p{Han}]]+",
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*",
    "\\s*[\\r\\n]",
    "\\s+(?!\\S)",
    "\\s+",
])
METASPACE = "\u2581"  # ▁, SentencePiece's space


def split_pretokenizer():
    """The regex split alone (no byte mapping): pieces of the original text with their offsets."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Split(Regex(PATTERN), behavior="isolated")


def pretokenizer(kind: str):
    """The full pre-tokenizer of a tokenizer kind: the split, then byte-level (bpe) or metaspace (unigram)."""
    from tokenizers import pre_tokenizers

    if kind == "bpe":
        tail = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    elif kind == "sentencepiece":
        # split=False: the regex already decided the pieces; "never" keeps a string's first character as it is
        # (a prepended space could not be told apart from a real one when decoding).
        tail = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="never", split=False)
    else:
        raise AssertionError(kind)
    return pre_tokenizers.Sequence([split_pretokenizer(), tail])


def _is_han_word(piece: str) -> bool:
    """A piece from alternative 5 (a Han run, maybe with its leading space) of two or more characters."""
    core = piece[1:] if piece.startswith(" ") else piece
    return len(core) > 1 and all(_is_han(c) for c in core) and not all(c in NUMERALS for c in core)


def _is_han(c: str) -> bool:
    o = ord(c)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0x20000 <= o <= 0x3134F or 0xF900 <= o <= 0xFAFF
            or o in (0x3005, 0x3007))


class JiebaSegmenter:
    """Cuts a text into training sequences so that no pre-token spans two jieba words.

    The regex pieces are kept; each Han-run piece is cut further at jieba's word boundaries, and the cut
    points end one sequence and start the next. The trainer counts the pre-tokens of each sequence
    separately, so a merge is only ever learned inside one jieba word. Non-Han text between Han runs stays in
    one sequence with its context (the regex's look-arounds see what they would see in the whole text).
    """

    def __init__(self):
        from bessemer.data.text.segment import load_jieba

        self._cut = load_jieba().cut
        self._split = split_pretokenizer()

    def __call__(self, text: str) -> list[str]:
        out: list[str] = []
        start = 0  # start of the sequence being built
        for piece, (a, b) in self._split.pre_tokenize_str(text):
            if not _is_han_word(piece):
                continue
            lead = 1 if piece.startswith(" ") else 0
            cuts = []
            pos = a + lead
            for word in self._cut(piece[lead:], HMM=True):
                pos += len(word)
                if pos < b:
                    cuts.append(pos)
            if not cuts:
                continue
            out.append(text[start:cuts[0]])
            out.extend(text[x:y] for x, y in zip(cuts, cuts[1:]))
            start = cuts[-1]
        out.append(text[start:])
        return [s for s in out if s]


def jieba_sequences(texts: Iterator[str]) -> Iterator[list[str]]:
    segment = JiebaSegmenter()
    for text in texts:
        yield segment(text)
