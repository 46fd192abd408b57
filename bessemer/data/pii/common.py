"""What the PII detectors share: the span they return, the script test, and the number context that decides,
before any pattern fires, that a number is not personal data."""

import re
from typing import NamedTuple

from bessemer.data.text.script import HAN


class Span(NamedTuple):
    """A detected piece of PII in original-text coordinates: `text[start:end] == value`."""

    start: int
    end: int
    type: str
    value: str


def mostly_han(text: str) -> bool:
    """More Han characters than Latin letters: the document's phone region is CN, its names Chinese."""
    han = len(HAN.findall(text))
    return han > 0 and han >= len(re.findall(r"[A-Za-z]", text))


# Digit runs must not continue into letters or digits: hex digests, serials and longer numbers are not PII.
NUM_START = r"(?<![0-9A-Za-z])(?<!\d[.-])"
NUM_END = r"(?![0-9A-Za-z])(?![.-]\d)"

# --- number context --------------------------------------------------------------------------------------
# A number right after one of these labels identifies a thing, not a person: an order, parcel, invoice, book,
# product model or serial, a database key. That holds even when the number passes a checksum: 1 in 10 random
# digit strings is Luhn-valid, and E + 8 digits is as much a model number as a passport. The label must sit
# directly before the number (optionally with ":", "#", "=", "是", "为").
_CODE_LABEL = re.compile(
    r"(?:订单(?:编)?号|订单|运单(?:编)?号|快递单号|物流单号|单号|流水号|交易(?:单)?号|发票(?:代码|号码|号)|合同(?:编)?号|"
    r"工单号|商品编号|产品编号|(?<![证卡照])编号|编码|序列号|串号|型号|机型|货号|款号|批号|批次号|条码|条形码|"
    r"ISBN(?:-1[03])?|ISSN|DOI|SKU|IMEI|"
    r"order\s*(?:no\.?|number|id|#)|tracking\s*(?:no\.?|number|id|#)|invoice\s*(?:no\.?|number|#)|"
    r"transaction\s*(?:id|no\.?)|ref(?:erence)?\s*(?:no\.?|number|#)|waybill\s*(?:no\.?|number)?|"
    r"serial\s*(?:no\.?|number|#)?|\bS/?N|model\s*(?:no\.?|number|#)?|part\s*(?:no\.?|number|#)|"
    r"product\s*(?:code|id|no\.?)|item\s*(?:no\.?|number|#))"
    r"\s*[:：#]?\s*(?:是|为|is)?\s*$"
    # key=value and "key": value, where the key names an identifier: id=4111111111111111, "user_id": "..."
    r"|\b[A-Za-z_]*(?:id|key)\s*=\s*[\"']?$|\"[A-Za-z_]*id\"\s*:\s*\"?$",
    re.IGNORECASE,
)
# ... and a number followed by a unit is an amount, a count or a size: 财政收入达15000000000元, 12000000人.
_UNIT_AFTER = re.compile(
    r"\s?(?:元|块|角|万|亿|千|百|人|名|位|户|次|条|节|章|款|项|页|册|本|份|股|个|件|台|辆|架|艘|吨|米|千米|公里|里|亩|"
    r"平方|立方|克|千克|公斤|斤|升|毫升|度|岁|年|月|日|天|小时|分钟|秒|倍|%|％|‰|"
    r"(?:percent|per\s*cent|dollars?|yuan|euros?|USD|CNY|RMB|EUR|people|persons|times|tons?|km|kg|bytes?|"
    r"[KMGT]i?B)\b)",
    re.IGNORECASE,
)
# ... or preceded by a currency or an ordinal: ¥15000000000, $ 4111111111111111, 第5.2.1.3节, § 5.2.1.3.
_BEFORE = re.compile(
    r"(?:[¥￥$€£]|\b(?:RMB|USD|CNY|EUR)|人民币|第|§|\b(?:[Ss]ection|[Ss]ec\.|[Cc]lause|[Aa]rticle|[Aa]rt\.|[Cc]hapter|"
    r"[Tt]able|[Ff]ig(?:ure|\.)?|[Ee]q(?:uation|\.)?|[Pp]aragraph|[Pp]ara\.|[Rr]ule|[Ss]tep)|公式|附录|附表)\s*$"
)


def not_personal_number(text: str, start: int, end: int) -> bool:
    """True when the number `text[start:end]` is labelled as a code, carries a unit, or is an ordinal or a
    section/amount, so that no PII pattern may take it."""
    lo = max(0, start - 24)
    return bool(
        _CODE_LABEL.search(text, lo, start) or _BEFORE.search(text, lo, start) or _UNIT_AFTER.match(text, end)
    )
