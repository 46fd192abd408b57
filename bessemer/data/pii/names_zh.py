"""Person names: Chinese here (jieba words and cues), English in names_en.py.

A Chinese name is a surname (the ~330 common single ones, the compound ones) and a given name of one or two
characters with no function character (至 所 对 在 中 ...), and it must be a jieba word or words that are not
ordinary vocabulary (`_words_name` has the rules):

- jieba's dictionary tags many ordinary words `nr` (高峰 peak, 阳光 sunshine, 文明 civilisation, 仲裁庭), so a
  dictionary `nr` word is a name next to a title or as a form field's value (李娜女士, 联系人：李娜), after a
  label when it has three characters (审判长王建国), and with no cue only when it reads as a private
  person's full name: three characters, rare in jieba's corpus, typical given-name characters (张桂兰);
- a word the dictionary does not know (jieba's HMM found it: 董娜, 郭秀梅, 张伟) is a name after a cue, and
  with no cue when its given-name characters are typical of given names: how typical comes from jieba's own
  dictionary (`_given_scores`), which tells names from new terms of art (单采, 易制, 关衔);
- a dictionary word with any other tag is a name only as a form field's value (负责人：程子，); never
  otherwise (项目经理, 班主任老师, 历史老师, 高峰表示 stay), and a surname character inside a word is never a name
  on its own.

Cues: roles and labels before a name (原告, 被告人, 审判长, 书记员, 委托诉讼代理人, 辩护人, 患者, 联系人, 经理 ...
— the role stays, the name after it goes), titles after one (先生, 女士, 老师 ...: 王先生 -> [PERSON]先生), and
lists after a cued name (被告人张某、李明和王芳: every name of the list). Names already pseudonymised with 某
(王某, 李某某) are left as they are.

Once a full name is found, its other mentions in the same document are masked too (`_repeats`): the full name
again where no cue stands before it (患者董娜 … 董娜今日复诊), and a two-character given name on its own
(郭秀梅 … 秀梅说), each only where jieba's words begin and end with it, so a name inside a longer word stays.
"""

import re
from bisect import bisect_right
from collections import Counter
from functools import lru_cache

from bessemer.data.pii.common import Span
from bessemer.data.pii.divisions import division_at
from bessemer.data.text import segment
from bessemer.data.text.script import HAN_RUN
from bessemer.data.text.segment import OOV, Token

# The ~330 most common single-character surnames (well over 95% of the population), less those that far more
# often start an ordinary word (和 时 由 都 来 但 明 海 相 银 ...), and the compound ones.
SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蔡蒋余杜叶程苏魏吕丁任沈"
    "姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔"
    "汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕"
    "单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳穆农司卓古吉缪简车项连芦麦"
    "褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩"
    "佘池查麻苑迟邝封谈匡鞠惠荆乐冀郁胥班储原栗燕楚鄢劳谌奚皮粟冼蔺楼满厉伊仝郜阎"
    "于萧赖洪向鹿雍羊乌赫茹诸湛宾戎茅檀阚闻帅屠朴禹漆芮阙浦邸辜裘亓邰逯慕亢嵇揭昝衡尧扈晁井况杭卿狄伏薄隆宿奉"
)
COMPOUND_SURNAMES = frozenset(
    "欧阳 司马 上官 诸葛 东方 皇甫 尉迟 公孙 慕容 长孙 宇文 司徒 夏侯 令狐 端木 独孤 南宫 西门 轩辕 呼延 澹台 闻人 "
    "万俟 申屠 太史 钟离 宗政 濮阳 公冶 赫连 百里 东郭 司空".split()  # not 第五: far more often "fifth"
)

_COMPOUND_FIRST = frozenset(s[0] for s in COMPOUND_SURNAMES)

# Roles and labels after which the next words are a person's name. Court documents: parties, judges, clerks,
# agents and counsel; forms and letters: contact, recipient, patient; titles written before a name.
_ROLES = (
    "原告 被告 被告人 上诉人 被上诉人 原审原告 原审被告 第三人 申请人 被申请人 再审申请人 申请执行人 被执行人 "
    "审判长 审判员 代理审判员 人民陪审员 陪审员 书记员 法官助理 执行员 委托诉讼代理人 委托代理人 诉讼代理人 "
    "法定代理人 指定代理人 法定代表人 辩护人 公诉人 检察员 证人 被害人 罪犯 犯罪嫌疑人 嫌疑人 当事人 "
    "姓名 联系人 紧急联系人 收件人 收货人 寄件人 负责人 经办人 签收人 持卡人 开户人 户主 患者 病人 乘客 "
    "客户姓名 被保险人 投保人 受益人 监护人 签名 记者 通讯员 主持人 "
    "经理 总经理 副总经理 董事长 总监 主任 院长 校长 局长 处长 科长 书记 主席 教授 医生 律师 法官 警官"
).split()
_ZH_LABEL = re.compile("(?:" + "|".join(sorted(_ROLES, key=len, reverse=True)) + r")[\s:：\u3000]*")
_ZH_TITLE = re.compile(
    r"(?:先生|女士|小姐|同学|老师|经理|总监|主任|医生|大夫|教授|律师|院长|校长|局长|处长|科长|书记|董事长|"
    r"总经理|警官|阿姨|师傅)"
)
# Characters that are not part of a given name: function words and the commonest word-forming morphemes
# that follow a surname-like character in ordinary vocabulary (项至, 单处, 方对, 应由 ...).
_NOT_GIVEN = frozenset(
    "的了在是与和及或对由为于以被把将从向至所其该此这那等中后前内外上下不有无也都而则即可应须已又并之者个"
    "项条款章节人数年月日时处损报用选列危任先知因新毒划名权份类位号市省县区镇乡村路街道某诉称说讲问看去来到"
    "一二三四五六七八九十百千万两零未"
)
# Single characters that are surnames but far more often words right before a title (向老师请教, 和老师).
_NOT_ALONE_BEFORE_TITLE = frozenset("向和于同时由及与将从在是对把给跟为被让请找叫问位各这那该此老小大全")
# Words that refuse a label ("联系人：待定").
_NOT_NAMES = frozenset(["待定", "本人", "同上", "不详", "未知", "匿名", "暂无", "先生", "女士", "小姐"])
_LIST_SEP = re.compile(r"、|和|及|与")


def surname_len(name: str) -> int:
    """Length of the surname `name` starts with (2 for compound, 1 for single), 0 if none."""
    if name[:2] in COMPOUND_SURNAMES:
        return 2
    return 1 if name[:1] in SURNAMES else 0


def _name_shaped(name: str) -> bool:
    """Surname + a given name of 1-2 characters with no function character, all Han, not pseudonymised."""
    k = surname_len(name)
    given = name[k:]
    return (
        k > 0
        and 1 <= len(given) <= 2
        and HAN_RUN.fullmatch(name) is not None
        and not any(c in _NOT_GIVEN for c in given)
        and name not in _NOT_NAMES
    )


def _is_name_flag(flag: str) -> bool:
    return flag == OOV or flag.startswith("nr")


# Cue strengths: a title after the name (李娜女士), a label before it in running text (被告人张伟), a label that
# heads a field whose whole value is the name (联系人：程子，).
TITLE, LABEL, FIELD = "title", "label", "field"
# Part-of-speech flags of words that are not a name or its first part: verbs, adverbs, prepositions,
# conjunctions, particles, pronouns, directions, numbers, measure and time words (应当, 申请, 查明 ...).
_FUNCTION_FLAGS = tuple("vdpcurfmqtyeo")
# Function characters that jieba's HMM glues onto the front of an unknown name (由马健, 和胡俊).
_LEADING = frozenset("由和与向于对给被把让跟从在是为将及或请叫找问替帮")
# Without a cue, a new word (not in jieba's dictionary) is a name when its given-name characters are typical
# of given names (score below: 单采, 易制, 关衔 are terms of art); a dictionary `nr` word when it is a surname
# and two such characters, rare in jieba's corpus (张桂兰, not 仲裁庭 or 申请书).
_MAX_NAME_FREQ = 50
_MIN_GIVEN_SCORE = 0.12
# ... or, for a new word, 0.08 or a character of at least 40 dictionary names (杨 0.06 in 60 names, 柳 0.09).
_MIN_NEW_WORD_SCORE, _MIN_NEW_WORD_NAMES = 0.08, 40
_MIN_GIVEN_SCORE_TWO = 0.35  # a two-character `nr` word after a label: 李俊 (俊 0.68), not 陈述 (述 0.12)
_MIN_MULTI_SCORE = 0.15  # a given name jieba cut off as a common word: 郭/建平, 黄/建军


@lru_cache(maxsize=1)
def _given_scores() -> tuple[dict[str, float], Counter[str]]:
    """How typical a character is of given names, from jieba's dictionary: the share of its dictionary words
    that are surname-led `nr`/`nrfg` words with the character in the given name (俊 0.68, 芳 0.45, 淑 0.40,
    明 0.29, 述 0.12, 书 0.02), and the number of such names. Computed once per process."""
    names: Counter[str] = Counter()
    words: Counter[str] = Counter()
    for word, flag in segment.tag_table().items():
        words.update(set(word))
        if flag in ("nr", "nrfg") and 2 <= len(word) <= 3 and word[0] in SURNAMES and HAN_RUN.fullmatch(word):
            names.update(set(word[1:]))
    return {c: n / (words[c] + 5) for c, n in names.items()}, names


def _typical_given(given: str, threshold: float, min_names: int | None = None) -> bool:
    scores, names = _given_scores()
    return all(scores.get(c, 0.0) >= threshold or (min_names and names[c] >= min_names) for c in given)


def _dictionary_name(word: str) -> bool:
    k = surname_len(word)
    rare = segment.frequency(word) <= _MAX_NAME_FREQ
    return len(word) - k == 2 and rare and _typical_given(word[k:], _MIN_GIVEN_SCORE)


def _words_name(toks: list[Token], i: int, j: int, cue: str | None) -> bool:
    """Whether the words toks[i:j] make one name.

    One word: a word jieba's dictionary lacks (with no cue, only with a typical given name and not led by a
    preposition). A dictionary `nr` word next to a title or as a field's value; after a label when it has
    three characters or a typical given name (jieba's two-character `nr` words are mostly ordinary words:
    陈述, 查明, 高峰); with no cue when it reads as a private person's full name (`_dictionary_name`: 张桂兰,
    not 仲裁庭). Any other noun only as a field's value.
    Several words: with no cue, a surname word then a given name jieba tags as a name or place, or made of
    typical given-name characters (王/秀英, 赵/桂兰, 连/婷婷); with a cue, the given name's words may carry
    any tag, since jieba cuts unknown names arbitrarily (欧阳/霞, 高洋/娟, 郑/华彬, 蔡/欣然), unless the first
    word is a verb or function word (应当/自)."""
    name = "".join(t.word for t in toks[i:j])
    if not _name_shaped(name):
        return False
    first = toks[i]
    if j - i == 1:
        if first.flag == OOV:  # without a cue: not 向定, 于本 (a preposition and a word), nor 单采, 易制 (terms)
            return cue is not None or (
                name[0] not in _LEADING
                and _typical_given(name[surname_len(name) :], _MIN_NEW_WORD_SCORE, _MIN_NEW_WORD_NAMES)
            )
        if first.flag.startswith("nr"):
            if cue == FIELD:
                return True
            if cue == TITLE:  # 李娜女士, not 丁香医生
                return _typical_given(name[surname_len(name) :], _MIN_GIVEN_SCORE)
            if cue == LABEL:
                return len(name) >= 3 or _typical_given(name[surname_len(name) :], _MIN_GIVEN_SCORE_TWO)
            return _dictionary_name(name)
        return cue == FIELD and not first.flag.startswith(_FUNCTION_FLAGS)
    bare_surname = surname_len(name) >= len(first.word)
    if cue is None:
        given = toks[i + 1]
        return (
            j - i == 2
            and bare_surname
            and first.word not in _LEADING
            and (given.flag.startswith(("nr", "ns")) or _typical_given(given.word, _MIN_MULTI_SCORE))
            and division_at(given.word, 0) is None
        )
    if bare_surname:  # 任/建国 and 曾/桂兰 are names whatever jieba's tag; 向/仲裁 and 于/主 are not
        return first.word not in _LEADING
    return not first.flag.startswith(_FUNCTION_FLAGS)


def _name_after(toks: list[Token], i: int, cue: str | None) -> tuple[int, int] | None:
    """The longest name that starts with word `i` (a label ends there, or no cue)."""
    t = toks[i]
    if t.flag == OOV and len(t.word) >= 3:  # jieba's HMM glued a neighbour on: 由马健, 陈柳去, 原告张三诉
        if t.word[0] in _LEADING and _name_shaped(t.word[1:]):
            return t.start + 1, t.end
        k = surname_len(t.word)
        if k and t.word[-1] in _NOT_GIVEN and _name_shaped(t.word[:-1]):
            return t.start, t.end - 1
    if not surname_len("".join(x.word for x in toks[i : i + 2])):  # 上/官军: jieba may cut a compound surname
        return None
    for j in range(min(len(toks), i + 3), i, -1):
        if _words_name(toks, i, j, cue):
            return t.start, toks[j - 1].end
    return None


def _name_before_title(toks: list[Token], j: int, p: int) -> tuple[int, int] | None:
    """The name ending where a title starts at `p`; word `j` contains or starts at `p`."""
    t = toks[j]
    if t.start < p:  # 王先生 / 王老师 as one word tagged a name (not 班主任): the surname before the title
        k = surname_len(t.word)
        if k and t.start + k == p and _is_name_flag(t.flag) and t.word[:k] not in _NOT_ALONE_BEFORE_TITLE:
            return t.start, p
        return None
    for i in range(max(0, j - 3), j):
        if _words_name(toks, i, j, TITLE):
            return toks[i].start, p
    prev = toks[j - 1] if j else None  # 王/老师: a surname alone
    if prev and surname_len(prev.word) == len(prev.word) and prev.word not in _NOT_ALONE_BEFORE_TITLE:
        return prev.start, p
    return None


def detect_chinese_names(text: str, toks: list[Token] | None = None) -> list[Span]:
    """Chinese person names in `text`; `toks` is its segmentation when the caller has it."""
    toks = segment.tokens(text) if toks is None else toks
    starts = [t.start for t in toks]
    at = {s: i for i, s in enumerate(starts)}
    found: dict[tuple[int, int], None] = {}

    def take_list(hit: tuple[int, int] | None, cue: str) -> None:
        """A cued name and the names listed after it: 被告人张某某、李明和王芳."""
        while hit:
            found[hit] = None
            sep = _LIST_SEP.match(text, hit[1])
            nxt = at.get(sep.end()) if sep else None
            hit = _name_after(toks, nxt, cue) if nxt is not None else None

    for m in _ZH_LABEL.finditer(text):
        i = at.get(m.end())
        if i is None:
            continue
        # A separated label whose value ends before the next Han word is a form field: 联系人：程子，
        value = _name_after(toks, i, FIELD)
        if value and m.group()[-1] in ":： \u3000\t" and not HAN_RUN.match(text, value[1]):
            take_list(value, FIELD)
        else:
            take_list(_name_after(toks, i, LABEL), LABEL)
    for m in _ZH_TITLE.finditer(text):
        if hit := _name_before_title(toks, bisect_right(starts, m.start()) - 1, m.start()):
            found[hit] = None
    for i, t in enumerate(toks):  # no cue: a word jieba's dictionary lacks, or a surname + given-name pair
        c = t.word[0]
        if not (c in SURNAMES or c in _LEADING or c in _COMPOUND_FIRST) or (i and toks[i - 1].word[-1].isdigit()):
            continue  # 300米丘陵: after a number, 米 is a metre
        if hit := _name_after(toks, i, None):
            found[hit] = None
    for hit in _repeats(text, toks, [text[s:e] for s, e in found]):
        found.setdefault(hit, None)
    return [Span(s, e, "PERSON", text[s:e]) for s, e in found]


def _repeats(text: str, toks: list[Token], names: list[str]) -> list[tuple[int, int]]:
    """Document-level propagation: the other mentions of the full names found, and of their two-character
    given names when those are not ordinary words (a given name jieba counts more than _MAX_NAME_FREQ times,
    建国 or 国庆, is left), where word boundaries fall at both ends (module doc)."""
    parts = set()
    for name in names:
        k = surname_len(name)
        if not _name_shaped(name):
            continue
        parts.add(name)
        given = name[k:]
        if len(given) == 2 and segment.frequency(given) <= _MAX_NAME_FREQ:
            parts.add(given)
    if not parts:
        return []
    starts = {t.start for t in toks}
    # jieba glues a function character onto an unknown name (由马健, 陈柳去): such a word still bounds it
    starts |= {t.start + 1 for t in toks if t.word[0] in _LEADING}
    ends = {t.end for t in toks} | {t.end - 1 for t in toks if t.word[-1] in _NOT_GIVEN}
    pattern = re.compile("|".join(sorted(map(re.escape, parts), key=len, reverse=True)))
    return [(m.start(), m.end()) for m in pattern.finditer(text) if m.start() in starts and m.end() in ends]
