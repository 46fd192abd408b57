"""What the PII detectors share: the span they return and the cues that mark a number as not personal."""

import re
from typing import NamedTuple


class Span(NamedTuple):
    """A detected piece of PII in original-text coordinates: `text[start:end] == value`."""

    start: int
    end: int
    type: str
    value: str


# A number right after one of these cues is a business identifier (order, parcel, invoice, book), not a
# person's phone or card, even when it happens to pass a checksum: 1 in 10 random digit strings is
# Luhn-valid. The cue must sit directly before the number (optionally with ":", "#", "是", "为").
_BUSINESS_CUE = re.compile(
    r"(?:订单(?:编)?号|订单|运单(?:编)?号|快递单号|物流单号|单号|流水号|交易(?:单)?号|发票号(?:码)?|合同(?:编)?号|"
    r"工单号|商品编号|ISBN(?:-1[03])?|ISSN|DOI|"
    r"order\s*(?:no\.?|number|id|#)|tracking\s*(?:no\.?|number|id|#)|invoice\s*(?:no\.?|number|#)|"
    r"transaction\s*(?:id|no\.?)|ref(?:erence)?\s*(?:no\.?|number|#)|waybill\s*(?:no\.?|number)?)"
    r"\s*[:：#]?\s*(?:是|为|is)?\s*$",
    re.IGNORECASE,
)


def after_business_cue(text: str, start: int) -> bool:
    """True when the number starting at `start` is labelled as an order/tracking/invoice/ISBN number."""
    return _BUSINESS_CUE.search(text, max(0, start - 24), start) is not None


# Digit runs must not continue into letters or digits: hex digests, serials and longer numbers are not PII.
NUM_START = r"(?<![0-9A-Za-z])(?<!\d[.-])"
NUM_END = r"(?![0-9A-Za-z])(?![.-]\d)"
