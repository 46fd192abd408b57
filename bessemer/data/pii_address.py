"""Chinese postal addresses, parsed into levels so a mask keeps the shape and drops the place:
北京市朝阳区建国路88号 -> [CITY][DISTRICT][STREET][NUMBER].

A suffix parser: an address starts at a province name (the 34 provincial-level divisions), at a jieba place
token (`ns`), right after an address label (地址/住址/位于 ...), or at a noun that starts "<street><number>";
from there it reads segments whose last characters name their level:

    PROVINCE  省 自治区 特别行政区 (or a bare province name)
    CITY      市 州 自治州 盟 地区       (北京/上海/天津/重庆 are CITY: they are municipalities)
    DISTRICT  区 县 旗 镇 乡 (自治县, 新区 ...)
    STREET    路 街 大道 道 巷 弄 胡同 里
    NUMBER    <n>号 / 号院 / 号楼, then building and room parts: 华星时代广场A座1203室, 3栋2单元501室

Levels only go down (a second segment of the same level joins the previous one: 南山区科技园南区 is one
DISTRICT), a number only follows a street (or, as building/room parts, a district: 幸福小区3栋2单元), and
an address needs two levels including a street or a number, so 北京市 or 朝阳区的天气 stay as they are.
"""

import re

from bessemer.data.pii_common import Span

LEVELS = ("PROVINCE", "CITY", "DISTRICT", "STREET", "NUMBER")
PROVINCE, CITY, DISTRICT, STREET, NUMBER = range(5)

PROVINCES = [
    "北京",
    "天津",
    "上海",
    "重庆",
    "河北",
    "山西",
    "辽宁",
    "吉林",
    "黑龙江",
    "江苏",
    "浙江",
    "安徽",
    "福建",
    "江西",
    "山东",
    "河南",
    "湖北",
    "湖南",
    "广东",
    "海南",
    "四川",
    "贵州",
    "云南",
    "陕西",
    "甘肃",
    "青海",
    "台湾",
    "内蒙古",
    "广西",
    "西藏",
    "宁夏",
    "新疆",
    "香港",
    "澳门",
]
MUNICIPALITIES = frozenset(["北京", "天津", "上海", "重庆"])
_PROVINCE_SUFFIXES = ("维吾尔自治区", "壮族自治区", "回族自治区", "自治区", "特别行政区", "省", "市")

_SUFFIXES = {
    CITY: ("自治州", "地区", "市", "州", "盟"),
    DISTRICT: ("自治县", "自治旗", "区", "县", "旗", "镇", "乡"),
    STREET: ("大道", "大街", "胡同", "路", "街", "道", "巷", "弄", "里"),
}
_BODY_LEN = {CITY: (1, 7), DISTRICT: (1, 8), STREET: (2, 10)}
# Characters that (almost) never occur inside a place name but do occur in the sentence around one
# (朝阳区的天气, 住在北京市, 大家都知道): a segment cannot run across them.
_STOP = "的是在了与及或我你他她它们这那哪也就很又要想把被让给说没吗呢吧啊住址等"
_BODY = rf"[\u4e00-\u9fff](?<![{_STOP}])"
_SEGMENT = {
    level: re.compile(rf"(?:{_BODY}){{{lo},{hi}}}?(?:{'|'.join(_SUFFIXES[level])})")
    for level, (lo, hi) in _BODY_LEN.items()
}
_NUM = r"(?:[0-9０-９]+(?:-[0-9]+)?|[一二三四五六七八九十百零〇]{1,4})"
_HOUSE_NUMBER = re.compile(rf"{_NUM}(?:号院|号楼|号)")
_BUILDING_PART = re.compile(rf"(?:{_BODY}){{0,12}}?[A-Za-z0-9]{{1,5}}(?:号楼|单元|栋|幢|座|楼|层|室|号)")
# Right after a district only a building can follow (幸福小区3栋), not a bare house number.
_BUILDING = re.compile(r"[A-Za-z0-9]{1,5}(?:号楼|单元|栋|幢|座)")
_LABEL = re.compile(r"(?:地址|住址|住在|家住|位于|寄到|送到|送至|寄至|坐落于|地处|办公地点|现居)\s*[:：]?\s*")


def _province_at(text: str, i: int) -> tuple[int, int] | None:
    for name in PROVINCES:
        if text.startswith(name, i):
            end = i + len(name)
            for suffix in _PROVINCE_SUFFIXES:
                if text.startswith(suffix, end) and (suffix != "市" or name in MUNICIPALITIES):
                    end += len(suffix)
                    break
            return end, CITY if name in MUNICIPALITIES else PROVINCE
    return None


def _segment_at(text: str, i: int, last: int) -> tuple[int, int] | None:
    """(end, level) of the segment starting at `i` whose level may follow `last`; the shortest wins."""
    if i >= len(text):
        return None
    if last == STREET:
        m = _HOUSE_NUMBER.match(text, i) or _BUILDING_PART.match(text, i)
    else:
        m = _BUILDING.match(text, i) if last == DISTRICT else None
    if m:
        end = m.end()
        while b := _BUILDING_PART.match(text, end):  # 478号 华星时代广场A座 1203室
            end = b.end()
        return end, NUMBER
    if last == NUMBER:
        return None
    if last == -1 and (p := _province_at(text, i)):
        return p[0], p[1]
    best = None
    for level in (CITY, DISTRICT, STREET):
        if level < last:
            continue
        m = _SEGMENT[level].match(text, i)
        if m and (best is None or m.end() < best[0]):
            best = (m.end(), level)
    if best is None:
        return None
    end, level = best
    extended = True
    while extended:  # 杭州 + 市, 望京街 + 道
        extended = False
        for suffix in _SUFFIXES[level]:
            if text.startswith(suffix, end):
                end, extended = end + len(suffix), True
                break
    return end, level


def _parse_at(text: str, i: int) -> list[Span] | None:
    parts: list[Span] = []
    last = -1
    while (seg := _segment_at(text, i, last)) is not None:
        end, level = seg
        if parts and level == last:
            prev = parts.pop()
            parts.append(Span(prev.start, end, LEVELS[level], text[prev.start : end]))
        else:
            parts.append(Span(i, end, LEVELS[level], text[i:end]))
        last, i = level, end
    if len(parts) >= 2 and any(p.type in ("STREET", "NUMBER") for p in parts):
        return parts
    return None


def parse_addresses(text: str, tokens: list[tuple[int, int, str, str]] | None = None) -> list[list[Span]]:
    """Every address in `text` as its level spans (type PROVINCE/CITY/DISTRICT/STREET/NUMBER), left to
    right. `tokens` is jieba's (start, end, word, flag) segmentation, used to find where addresses start."""
    if not re.search(r"[\u4e00-\u9fff]", text):
        return []
    if tokens is None:
        from bessemer.data.pii_names import segment

        tokens = segment(text)
    starts = {i for name in PROVINCES for i in _find_all(text, name)}
    starts |= {m.end() for m in _LABEL.finditer(text)}
    starts |= {s for s, _, _, flag in tokens if flag == "ns"}
    street_starts = {s for s, _, _, flag in tokens if flag[:1] == "n" or flag == "j"} - starts
    found, covered = [], 0
    for i in sorted(starts | street_starts):
        if i < covered:
            continue
        parts = _parse_at(text, i)
        if parts and i in street_starts and parts[0].type != "STREET":
            parts = None  # without a place anchor, only "<street><number>" is taken
        if parts:
            found.append(parts)
            covered = parts[-1].end
    return found


def _find_all(text: str, word: str):
    i = text.find(word)
    while i != -1:
        yield i
        i = text.find(word, i + 1)


def detect_addresses(text: str) -> list[Span]:
    return [Span(p[0].start, p[-1].end, "ADDRESS", text[p[0].start : p[-1].end]) for p in parse_addresses(text)]
