"""Person-name detection for Chinese and English text — conservative on purpose.

jieba's `nr` tag alone is far too noisy to mask on (it tags 高峰, 阳光, 明长城, 东南风 as names), so a name
needs a cue as well:
- a label before it (姓名/联系人/收件人/负责人 ...: , Name:, Contact:, signed by),
- a title after it (先生/女士/小姐/同学/老师/经理 ...) or before it (Mr/Mrs/Ms/Dr/Prof),
- or a jieba `nr` token starting with a known surname, next to a verb or noun that only people take
  (张伟说, 联系王芳, 李娜的手机).
Place and organisation names (jieba `ns`/`nt`) are never taken as names.
"""

import re
from functools import lru_cache

from bessemer.data.pii_common import Span

_HAN = r"\u4e00-\u9fff"

# The ~250 most common single-character surnames (covering well over 95% of the population) and the
# compound ones. A given name is 1-2 characters after it.
SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蔡蒋余杜叶程苏魏吕丁任沈"
    "姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔"
    "汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕"
    "单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳穆农司卓古吉缪简车项连芦麦"
    "褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩"
    "佘池查麻苑迟邝封谈匡鞠惠荆乐冀郁胥班储原栗燕楚鄢劳谌奚皮粟冼蔺楼满厉伊仝郜阎"
)
COMPOUND_SURNAMES = frozenset(
    [
        "欧阳",
        "司马",
        "上官",
        "诸葛",
        "东方",
        "皇甫",
        "尉迟",
        "公孙",
        "慕容",
        "长孙",
        "宇文",
        "司徒",
        "夏侯",
        "令狐",
        "端木",
        "独孤",
        "南宫",
        "西门",
        "轩辕",
        "呼延",
        "澹台",
        "闻人",
        "万俟",
        "申屠",
        "太史",
        "钟离",
        "宗政",
        "濮阳",
        "公冶",
        "赫连",
        "百里",
        "东郭",
        "司空",
        "第五",
    ]
)

# Labels after which the next words are a person's name.
_ZH_LABEL = re.compile(
    r"(?:姓名|联系人|收件人|收货人|寄件人|负责人|申请人|经办人|签收人|法定代表人|持卡人|开户人|户主|患者|乘客|"
    r"客户姓名|被保险人|投保人|监护人|紧急联系人|签名)\s*[:：]?\s*"
)
_ZH_TITLE = re.compile(
    r"(?:先生|女士|小姐|同学|老师|经理|总监|主任|医生|大夫|教授|律师|院长|校长|局长|处长|科长|书记|董事长|"
    r"总经理|警官|阿姨|师傅)"
)
# Words right after an `nr` token that only people take: 张伟说 / 李娜的手机.
_ZH_PERSON_AFTER = re.compile(
    r"(?:说|表示|指出|认为|告诉|介绍|称|回忆|打电话|来电|的电话|的手机|的邮箱|的身份证|的银行卡|的地址|的护照|本人)"
)
# ... or right before it: 联系王芳 / 致李明.
_ZH_PERSON_BEFORE = re.compile(r"(?:联系|致|感谢|通知|转告|告诉|委托|授权|寄给|交给|发给|打给)$")
# Single characters that are surnames but far more often words right before a title (向老师请教, 和老师).
_NOT_ALONE_BEFORE_TITLE = frozenset("向和于同时由及与将从在是对把给跟为被让请找叫问位各这那该此老小大全")
# Tokens jieba tags as names that are common words or that refuse a label ("联系人：待定").
_NOT_NAMES = frozenset(["待定", "本人", "同上", "不详", "未知", "匿名", "无", "暂无", "先生", "女士", "小姐"])

_EN_NAME = r"(?:[A-Z]'|Mc|Mac)?[A-Z][a-z]+(?:-[A-Z][a-z]+)?"
_EN_FULL = rf"{_EN_NAME}(?:\s+(?:[A-Z]\.\s+)?{_EN_NAME}){{0,2}}"
_EN_TITLE = re.compile(rf"\b(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Professor|Sir|Madam|Dame)\.?\s+(?P<name>{_EN_FULL})")
_EN_LABEL = re.compile(
    rf"(?:(?<![Cc]ompany )(?<![Pp]roduct )(?<![Ff]ile )(?<![Pp]roject )(?<![Bb]rand )(?<![Hh]ost )"
    rf"\b(?:[Nn]ame|NAME|[Ff]ull [Nn]ame|[Cc]ontact(?: [Pp]erson)?|[Aa]ttn\.?|[Aa]ttention|[Rr]ecipient|[Aa]ddressee|"
    rf"[Pp]atient|[Aa]pplicant|[Cc]ardholder|[Cc]ustomer)\s*[:：]\s*|\b[Ss]igned\s+by\s+|(?:{_ZH_LABEL.pattern}))"
    rf"(?P<name>{_EN_FULL})"
)
# Capitalised words that follow a title or label without being a name.
_EN_NOT_NAME = frozenset(
    [
        "The",
        "A",
        "An",
        "President",
        "Chairman",
        "Speaker",
        "Secretary",
        "Director",
        "Manager",
        "Department",
        "Team",
        "Support",
        "Sales",
        "Service",
        "Services",
        "Office",
        "Center",
        "Centre",
        "Company",
        "Inc",
        "Ltd",
        "Group",
        "Customer",
        "Admin",
        "Administrator",
        "Unknown",
        "None",
        "Anonymous",
        "Please",
        "See",
        "Same",
        "Above",
        "Below",
        "Chinese",
        "English",
    ]
)


@lru_cache(maxsize=1)
def _posseg():
    try:
        import jieba
        import jieba.posseg
    except ImportError as e:  # pragma: no cover - jieba is a core dependency
        raise ImportError("Chinese name detection needs jieba: pip install 'jieba>=0.42'") from e
    jieba.setLogLevel(60)  # silence "Building prefix dict ..." on every process start
    return jieba.posseg


def segment(text: str) -> list[tuple[int, int, str, str]]:
    """jieba POS segmentation as (start, end, word, flag) in text coordinates."""
    out, pos = [], 0
    for pair in _posseg().cut(text):
        out.append((pos, pos + len(pair.word), pair.word, pair.flag))
        pos += len(pair.word)
    return out


def _surname_len(name: str) -> int:
    """Length of the surname `name` starts with (2 for compound, 1 for single), 0 if none."""
    if name[:2] in COMPOUND_SURNAMES:
        return 2
    return 1 if name[:1] in SURNAMES else 0


def _plausible_zh_name(name: str) -> bool:
    k = _surname_len(name)
    return k > 0 and 1 <= len(name) - k <= 2 and name not in _NOT_NAMES


def _name_before_title(text: str, p: int, starts: set[int]) -> tuple[int, int] | None:
    """The name that ends where a title begins at `p` (张伟先生, 欧阳娜娜女士, 王先生), longest plausible first,
    preferring one whose start is a jieba word boundary."""
    fallback = None
    for k in (4, 3, 2, 1):
        s = p - k
        name = text[s:p] if s >= 0 else ""
        if not re.fullmatch(rf"[{_HAN}]+", name or "-"):
            continue
        surname = _surname_len(name)
        if not surname or len(name) - surname > 2 or name in _NOT_NAMES:
            continue
        if len(name) == surname and name in _NOT_ALONE_BEFORE_TITLE:
            continue
        if s in starts:
            return s, p
        left = text[s - 1] if s > 0 else ""
        if fallback is None and not re.fullmatch(f"[{_HAN}]", left or "-"):
            fallback = (s, p)
    if fallback is None and p >= 1 and text[p - 1] in SURNAMES and text[p - 1] not in _NOT_ALONE_BEFORE_TITLE:
        fallback = (p - 1, p)  # 王先生: jieba keeps "王先生" as one word, so no boundary sits at "王"
    return fallback


def _name_after_label(text: str, s: int, tokens: list[tuple[int, int, str, str]]) -> tuple[int, int] | None:
    """The Chinese name that starts right after a label at `s`, cut at jieba word boundaries."""
    run = re.match(rf"[{_HAN}]{{2,}}", text[s : s + 8])
    if not run:
        return None
    first = next((t for t in tokens if t[0] == s), None)
    if first is None:
        return None
    end, i = first[1], tokens.index(first)
    # jieba sometimes splits an unknown name (张/思远); join following short tokens while it stays name-sized.
    while end - s < 2 + (_surname_len(text[s:]) == 2) and i + 1 < len(tokens) and tokens[i + 1][1] - s <= 4:
        i += 1
        end = tokens[i][1]
    name = text[s:end]
    if not re.fullmatch(rf"[{_HAN}]{{2,4}}", name) or name in _NOT_NAMES:
        return None
    # After a label a surname-shaped word is a name even where jieba guesses a place (负责人：许娥 -> ns).
    if _plausible_zh_name(name) or (first[3].startswith("nr") and first[3] != "nrt"):
        return s, end
    return None


def detect_person_names(text: str, tokens: list[tuple[int, int, str, str]] | None = None) -> list[Span]:
    """`tokens` is jieba's segmentation of `text` when the caller already has it (see `segment`)."""
    spans: list[Span] = []
    for m in _EN_TITLE.finditer(text):
        spans += _en_name_span(m)
    for m in _EN_LABEL.finditer(text):
        spans += _en_name_span(m)
    if re.search(f"[{_HAN}]", text):
        spans += _zh_names(text, tokens if tokens is not None else segment(text))
    return spans


def _en_name_span(m: re.Match) -> list[Span]:
    words = list(re.finditer(r"\S+", m.group("name")))
    while words and words[-1].group() in _EN_NOT_NAME:
        words.pop()
    if not words or words[0].group() in _EN_NOT_NAME:
        return []
    start, end = m.start("name"), m.start("name") + words[-1].end()
    return [Span(start, end, "PERSON", m.string[start:end])]


def _zh_names(text: str, tokens: list[tuple[int, int, str, str]]) -> list[Span]:
    starts = {t[0] for t in tokens}
    found: dict[tuple[int, int], None] = {}
    for m in _ZH_LABEL.finditer(text):
        hit = _name_after_label(text, m.end(), tokens)
        if hit:
            found[hit] = None
    for m in _ZH_TITLE.finditer(text):
        hit = _name_before_title(text, m.start(), starts)
        if hit:
            found[hit] = None
    for s, e, word, flag in tokens:
        if flag not in ("nr", "nrfg") or not re.fullmatch(rf"[{_HAN}]{{2,4}}", word) or not _plausible_zh_name(word):
            continue
        if _ZH_PERSON_AFTER.match(text, e) or _ZH_PERSON_BEFORE.search(text, max(0, s - 4), s):
            found[(s, e)] = None
    return [Span(s, e, "PERSON", text[s:e]) for s, e in found]
