"""Chinese postal addresses, parsed into levels so a mask keeps the shape and drops the place:
北京市朝阳区建国路88号 -> [CITY][DISTRICT][STREET][NUMBER].

An address starts at a province-level name, at a jieba place word (`ns`), right after an address label
(地址/住址/位于 ...), or at a noun that starts "<street><number>". From there it reads segments. A unit of
China's division table (divisions.py: every province-, prefecture- and county-level unit) gets the level
of its code, whatever its suffix: 河北省石家庄市新乐市 -> [PROVINCE][CITY][DISTRICT], 湖北省仙桃市 ->
[PROVINCE][DISTRICT]. Anything else is read by its suffix:

    CITY      市 州 自治州 盟 地区       (a 市 right after a CITY is a county-level city: DISTRICT)
    DISTRICT  区 县 旗 镇 乡 (自治县, 新区 ...; towns join the district before them)
    STREET    路 街 大道 道 巷 弄 胡同 里
    NUMBER    <n>号 / 号院 / 号楼, then building and room parts: 华星时代广场A座1203室, 3栋2单元501室

Levels only go down (a second segment of the same level joins the previous one: 南山区科技园南区 is one
DISTRICT), a number only follows a street (or, as building/room parts, a district: 幸福小区3栋2单元), and
an address needs two levels including a street or a number, so 北京市 or 朝阳区的天气 stay as they are.
"""

import re
from bisect import bisect_left

from bessemer.data.pii.common import Span
from bessemer.data.pii.divisions import CITY, DISTRICT, division_at, province_names
from bessemer.data.text import segment
from bessemer.data.text.script import HAN, HAN_CHARS

LEVELS = ("PROVINCE", "CITY", "DISTRICT", "STREET", "NUMBER")
STREET, NUMBER = DISTRICT + 1, DISTRICT + 2

_SUFFIXES = {
    CITY: ("自治州", "地区", "市", "州", "盟"),
    DISTRICT: ("自治县", "自治旗", "区", "县", "旗", "镇", "乡"),
    STREET: ("大道", "大街", "胡同", "路", "街", "道", "巷", "弄", "里"),
}
_BODY_LEN = {CITY: (1, 7), DISTRICT: (1, 8), STREET: (2, 10)}
# Characters that (almost) never occur inside a place name but do occur in the sentence around one
# (朝阳区的天气, 住在北京市, 大家都知道): a segment cannot run across them.
_STOP = "的是在了与及或我你他她它们这那哪也就很又要想把被让给说没吗呢吧啊住址等"
_BODY = rf"[{HAN_CHARS}](?<![{_STOP}])"
_SEGMENT = {
    level: re.compile(rf"(?:{_BODY}){{{lo},{hi}}}?(?:{'|'.join(_SUFFIXES[level])})")
    for level, (lo, hi) in _BODY_LEN.items()
}
_NUM = r"(?:[0-9０-９]+(?:-[0-9]+)?|[一二三四五六七八九十百零〇]{1,4})"
_HOUSE_NUMBER = re.compile(rf"{_NUM}(?:号院|号楼|号)")
_BUILDING_PART = re.compile(rf"(?:{_BODY}){{0,12}}?[A-Za-z0-9]{{1,5}}(?:号楼|单元|栋|幢|座|楼|层|室|号)")
# Right after a district only a building can follow (幸福小区3栋), not a bare house number.
_BUILDING = re.compile(r"[A-Za-z0-9]{1,5}(?:号楼|单元|栋|幢|座)")
_LABEL = re.compile(
    r"(?:家庭住址|联系地址|收货地址|通讯地址|地址|住址|家住在|住在|家住|位于|寄到|送到|送至|寄至|坐落于|地处|办公地点|现居)"
    r"\s*[:：]?\s*"
)
# A street suffix or a house or building number: every address has one, at most this far from its start.
_TAIL = re.compile(r"大道|大街|胡同|[路街道巷弄里]|[0-9０-９一二三四五六七八九十]+(?:号|栋|幢|座|单元|室|层|楼)")
_MAX_TO_TAIL = 48
# Place words that are ordinary nouns, not names: 城市主干路 and 城镇公共道路 are no address.
_GENERIC = frozenset(
    "城市 城镇 城区 市区 县城 乡镇 城乡 农村 山区 郊区 辖区 景区 园区 新区 社区 小区 街道 道路 公路 马路 铁路 街区 "
    "本市 本县 本区 本省 本州 全市 全县 全区 全省 各省 各市 各县 各区 该市 该县 该区 我市 我县 我区 我省 外省 外市 "
    "省市 市县 县市 区县 地市 大城市 中小城市 主干路 次干路 支路 快速路 高速路 人行道 车道 通道 渠道 轨道 频道 "
    "隧道".split()
)


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
    # A unit of the division table is tagged by its level, whatever its suffix (新乐市, a county-level city:
    # DISTRICT); levels only go down.
    unit = division_at(text, i)
    if unit and unit[1] > last:
        return unit
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
    if text[i:end] in _GENERIC:
        return None
    if level == CITY and last == CITY:
        level = DISTRICT  # a 市 under a 市 that the table does not know: a county-level city
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
    # An address has a street or a house number, so an anchor with neither close behind it is skipped.
    tails = [m.start() for m in _TAIL.finditer(text)]
    if not tails or not HAN.search(text):
        return []
    if tokens is None:
        tokens = segment.tokens(text)

    def viable(i: int) -> bool:
        k = bisect_left(tails, i)
        return k < len(tails) and tails[k] - i <= _MAX_TO_TAIL

    # Only the words in the windows before a tail can start an address.
    near: list[tuple[int, int, str, str]] = []
    token_starts = [t[0] for t in tokens]
    lo = 0
    for window_start, window_end in _windows(tails):
        a = max(lo, bisect_left(token_starts, window_start))
        lo = bisect_left(token_starts, window_end + 1)
        near += tokens[a:lo]
    starts = {i for name in province_names() for i in _find_all(text, name)}
    starts |= {m.end() for m in _LABEL.finditer(text)}
    starts = {i for i in starts if viable(i)}
    starts |= {s for s, _, _, flag in near if flag == "ns" or division_at(text, s)}
    street_starts = {s for s, _, _, flag in near if flag[:1] == "n" or flag == "j"} - starts
    # Addresses anchored at a place first; then "<street><number>" without one, where no address is yet.
    found: list[list[Span]] = []
    for anchors, street_only in ((starts, False), (street_starts, True)):
        covered = 0
        for i in sorted(anchors):
            if i < covered or any(p[0].start <= i < p[-1].end for p in found):
                continue
            parts = _parse_at(text, i)
            if parts and street_only and (parts[0].type != "STREET" or _overlaps(parts, found)):
                parts = None
            if parts:
                found.append(parts)
                covered = parts[-1].end
    return sorted(found)


def _windows(tails: list[int]):
    """The merged ranges [tail - _MAX_TO_TAIL, tail] over the sorted tail positions."""
    start, end = tails[0] - _MAX_TO_TAIL, tails[0]
    for t in tails[1:]:
        if t - _MAX_TO_TAIL > end:
            yield start, end
            start = t - _MAX_TO_TAIL
        end = t
    yield start, end


def _overlaps(parts: list[Span], found: list[list[Span]]) -> bool:
    return any(parts[0].start < p[-1].end and p[0].start < parts[-1].end for p in found)


def _find_all(text: str, word: str):
    i = text.find(word)
    while i != -1:
        yield i
        i = text.find(word, i + 1)


def detect_addresses(text: str) -> list[Span]:
    return [Span(p[0].start, p[-1].end, "ADDRESS", text[p[0].start : p[-1].end]) for p in parse_addresses(text)]
