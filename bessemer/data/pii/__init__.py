"""Personal data: the `pii` step and its detectors (docs/data-pii.md).

    redact.py           PiiStep (the `pii` step), `redact`, `find_pii`: overlap resolution and the actions
    common.py           the span the detectors return, the number context shared by the number detectors
    numbers.py          emails, resident IDs, US SSNs, payment cards, IPs, passports
    phones.py           phones: China's numbering plan, every other country through libphonenumber
    names_zh.py         Chinese person names (jieba words and cues)
    names_en.py         English person names (cues, SSA given names)
    address.py          Chinese addresses, parsed into levels; divisions.py: China's administrative divisions
"""
