"""PII detectors and redaction: positive and negative cases per detector, addresses, actions, the step."""

import json
import subprocess
import sys

import pytest
import zstandard

from bessemer.data.document import Document
from bessemer.data.phases import run_pipeline
from bessemer.data.pii.numbers import (
    card_brand,
    detect_bank_cards,
    detect_emails,
    detect_ips,
    detect_passports,
    detect_resident_ids,
    id_check_char,
    is_resident_id,
    luhn_ok,
)
from bessemer.data.pii.phones import detect_phones
from bessemer.data.pii.redact import PiiStep, redact
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.steps import Step, register_step

# Checksums computed here independently of the module under test.
_W = [2 ** (17 - i) % 11 for i in range(17)]  # ISO 7064 MOD 11-2 weights: 7 9 10 5 8 4 2 1 6 3 ...


def make_id(first17: str) -> str:
    return first17 + "10X98765432"[sum(int(c) * w for c, w in zip(first17, _W)) % 11]


def make_card(prefix_and_body: str) -> str:
    """Append the Luhn check digit."""
    digits = [int(c) for c in prefix_and_body][::-1]
    total = sum(d if i % 2 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(digits))
    return prefix_and_body + str((10 - total % 10) % 10)


def values(spans) -> list[str]:
    return [s.value for s in spans]


# --- resident IDs ---


def test_id_checksum_matches_the_published_example_and_weights():
    assert _W == [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    assert id_check_char("11010519491231002") == "X"  # GB 11643-1999 example
    assert make_id("44030419900307451") == "440304199003074511"[:17] + id_check_char("44030419900307451")


@pytest.mark.parametrize(
    "first17", ["11010519491231002", "44030419900307451", "32010620000229123", "65010219751103887"]
)
def test_valid_resident_ids_are_found(first17):
    rid = make_id(first17)
    assert is_resident_id(rid)
    assert values(detect_resident_ids(f"身份证号：{rid}，请核对")) == [rid]
    assert values(detect_resident_ids(f"ID {rid[:6]} {rid[6:14]} {rid[14:]}.")) == [f"{rid[:6]} {rid[6:14]} {rid[14:]}"]


def test_lowercase_x_check_char_is_accepted():
    assert values(detect_resident_ids("11010519491231002x")) == ["11010519491231002x"]


def test_resident_ids_failing_a_rule_are_left_alone():
    good = make_id("11010519491231002")
    wrong_check = good[:17] + ("0" if good[17] != "0" else "1")
    bad_date = make_id("11010519490231002")  # 1949-02-31
    future = make_id("11010520990101002")
    bad_region = make_id("99010519491231002")
    old = make_id("11010518991231002")  # born 1899
    for rid in (wrong_check, bad_date, future, bad_region, old):
        assert not is_resident_id(rid), rid
        assert detect_resident_ids(f"号码 {rid} 。") == []
    # inside a longer number or glued to letters it is not an ID
    assert detect_resident_ids(f"9{good}") == [] and detect_resident_ids(f"{good}7") == []
    assert detect_resident_ids(f"sha{good}ab") == []


def test_legacy_15_digit_ids_need_a_real_date_and_region():
    assert values(detect_resident_ids("旧身份证 110105491231002 已换")) == ["110105491231002"]
    assert detect_resident_ids("旧身份证 110105491331002 已换") == []  # month 13
    assert detect_resident_ids("旧身份证 990105491231002 已换") == []  # region 99
    assert detect_resident_ids("110105490229002") == []  # 1949 is not a leap year
    assert detect_resident_ids("card 372848661101896") == []  # a mistyped Amex number, not a 1966 ID
    assert values(detect_resident_ids("old ID card 372848661101896")) == ["372848661101896"]


# --- bank cards ---


def test_luhn_and_brands():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert card_brand("4111111111111111") == "visa"
    assert card_brand("5500000000000004") == "mastercard"
    assert card_brand("2221000000000009") == "mastercard"
    assert card_brand("378282246310005") == "amex"
    assert card_brand("6011111111111117") == "discover"
    assert card_brand("3530111333300000") == "jcb"
    assert card_brand(make_card("621700123456789012")) == "unionpay"
    assert card_brand("9111111111111111") is None


@pytest.mark.parametrize(
    "text, found",
    [
        ("卡号 4111 1111 1111 1111 已绑定", "4111 1111 1111 1111"),
        ("card 4111-1111-1111-1111.", "4111-1111-1111-1111"),
        ("Amex 3782 822463 10005", "3782 822463 10005"),
        ("银行卡6217001234567890125尾号0125", None),  # filled in below with a valid 19-digit card
    ],
)
def test_luhn_valid_cards_are_found(text, found):
    if found is None:
        card = make_card("621700123456789012")
        text, found = f"银行卡{card}尾号{card[-4:]}", card
    assert values(detect_bank_cards(text)) == [found]


def test_cards_failing_luhn_or_iin_are_left_alone():
    valid = make_card("622202123456789012")
    invalid = valid[:-1] + str((int(valid[-1]) + 1) % 10)
    assert detect_bank_cards(f"卡号 {invalid}") == []
    assert detect_bank_cards("9" + make_card("00000000000000")[1:]) == []  # no issuer starts with 9
    assert detect_bank_cards(make_card("123456789012345")) == []
    # Luhn-valid by chance, but labelled as an order / tracking number
    assert detect_bank_cards(f"订单号：{valid}") == [] and detect_bank_cards(f"order no. {valid}") == []
    assert detect_bank_cards(f"运单号 {valid}") == []


# --- phones ---


@pytest.mark.parametrize(
    "phone",
    [
        "13800138000",
        "138-0013-8000",
        "138 0013 8000",
        "138.0013.8000",
        "+86 138 0013 8000",
        "+8613800138000",
        "0086-13800138000",
        "(+86)13800138000",
        "010-62345678",
        "(010)62345678",
        "（0755）8888 8888",
        "021 6234 5678",
        "0571-87654321-8021",
        "+86-10-62345678",
        "+1 (415) 555-0132",
        "+44 20 7946 0958",
        "+81 3-1234-5678",
        "(415) 555-0132",
        "415-555-0132",
    ],
)
def test_phone_formats(phone):
    assert phone in values(detect_phones(f"电话：{phone}，谢谢"))
    assert redact(f"电话：{phone}，谢谢") == ("电话：[PHONE]，谢谢", redact(f"电话：{phone}，谢谢", action="tag")[1])


@pytest.mark.parametrize(
    "text",
    [
        "2024-05-01",
        "20240501",
        "12345678901",
        "10000000000",
        "1380013800",
        "138001380001",
        "ISBN 978-7-111-12345-6",
        "0-306-40615-2",
        "价格 ¥1,299.00",
        "订单号：13800138000",
        "时间 2024-05-01 12:30:45",
        "010-12345678",
        "099-62345678",
        "v1.3.8.0",
        "1714567890123",
        "共 1,234,567 人",
        "Decimal('+35236450.6')",
        "delta +1234567.89",
    ],
)
def test_not_phones(text):
    assert detect_phones(text) == []


# --- emails, IPs, passports ---


def test_emails():
    text = "邮箱zhang.san@example.com.cn或者 ops+alerts@corp-mail.io; not: a@b, @handle, x@localhost"
    assert values(detect_emails(text)) == ["zhang.san@example.com.cn", "ops+alerts@corp-mail.io"]


@pytest.mark.parametrize(
    "text, ips",
    [
        ("服务器 192.168.1.10 宕机", ["192.168.1.10"]),
        ("from 8.8.8.8:53 and 10.0.0.1/24", ["8.8.8.8", "10.0.0.1"]),
        ("v6 2001:db8::8a2e:370:7334 和 fe80::1", ["2001:db8::8a2e:370:7334", "fe80::1"]),
        ("mapped ::ffff:192.0.2.128 ok", ["::ffff:192.0.2.128"]),
        ("版本 1.2.3.4", []),
        ("v1.2.3.4", []),
        ("version 10.0.1.4", []),
        ("Release: 2.0.1.4", []),
        ("1.2.3", []),
        ("256.1.1.1", []),
        ("01.02.03.04", []),
        ("1.2.3.4.5", []),
        ("12:30:45", []),
        ("bind 0.0.0.0 or 127.0.0.1, mask 255.255.255.0", []),
        ("std::vector", []),
        ("::1", []),
        ("3.14159", []),
    ],
)
def test_ips(text, ips):
    assert values(detect_ips(text)) == ips


def test_passports():
    assert values(detect_passports("护照 E12345678 已过期")) == ["E12345678"]
    assert values(detect_passports("G87654321")) == ["G87654321"]
    assert values(detect_passports("护照号码：EA1234567")) == ["EA1234567"]
    assert values(detect_passports("Passport No. 123456789 issued")) == ["123456789"]
    assert values(detect_passports("UK passport: GB1234567")) == ["GB1234567"]
    assert detect_passports("型号 EA1234567") == []  # other formats need a cue
    assert detect_passports("code E1234567 or E123456789") == []
    assert detect_passports("passport office opens at 9. Room 123456789") == []  # cue stops at the sentence


# --- names ---


@pytest.mark.parametrize(
    "text, name",
    [
        ("请联系张伟先生，电话见下", "张伟"),
        ("王先生明天到", "王"),
        ("欧阳娜娜女士已经签收", "欧阳娜娜"),
        ("联系人：李娜，手机见下", "李娜"),
        ("姓名：张思远 性别：男", "张思远"),
        ("收件人：司马相如", "司马相如"),
        ("负责人：赵敏", "赵敏"),
        ("找周晓明老师", "周晓明"),
        ("张伟说今天下雨", "张伟"),
        ("Mr. John Smith called", "John Smith"),
        ("Dear Dr. Zhang Wei,", "Zhang Wei"),
        ("Name: Alice Johnson", "Alice Johnson"),
        ("signed by Robert Brown on Monday", "Robert Brown"),
        ("Contact: Mary-Jane O'Neil", "Mary-Jane O'Neil"),
        ("联系人：Tom Hanks", "Tom Hanks"),
    ],
)
def test_names_with_cues(text, name):
    out, spans = redact(text, types=["PERSON"])
    assert [s.value for s in spans] == [name]
    assert name not in out


@pytest.mark.parametrize(
    "text",
    [
        "高峰时期交通拥堵",
        "明长城很长",
        "阳光明媚，田野金黄",
        "向老师请教问题",
        "各位女士先生",
        "阿里巴巴集团在杭州成立",
        "我们去了上海和北京",
        "Contact: Sales Department",
        "Company Name: Acme Corp",
        "Mr. President said",
        "The Name of the Rose",
        "联系人：待定",
    ],
)
def test_not_names(text):
    assert redact(text, types=["PERSON"]) == (text, [])


# --- addresses ---


@pytest.mark.parametrize(
    "text, masked",
    [
        ("北京市朝阳区建国路88号", "[CITY][DISTRICT][STREET][NUMBER]"),
        ("广东省深圳市南山区科技园南区深南大道10000号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("浙江省杭州市西湖区文三路478号华星时代广场A座1203室", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("新疆维吾尔自治区乌鲁木齐市天山区解放北路8号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("寄到上海市浦东新区世纪大道100号，谢谢", "寄到[CITY][DISTRICT][STREET][NUMBER]，谢谢"),
        ("明天去人民路100号取件", "明天去[STREET][NUMBER]取件"),
        ("地址：幸福小区3栋2单元501室", "地址：[DISTRICT][NUMBER]"),
        ("北京市朝阳区三里屯路19号院1号楼附近有家店", "[CITY][DISTRICT][STREET][NUMBER]附近有家店"),
        # every unit of the division table by its level: county-level cities, 盟/旗, autonomous prefectures,
        # counties directly under a province, municipalities (CITY), short names
        ("河北省石家庄市新乐市长寿街道88号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("广东省江门市恩平市建设路12号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("孝感市应城市人民路5号", "[CITY][DISTRICT][STREET][NUMBER]"),
        ("内蒙古自治区锡林郭勒盟正蓝旗上都镇人民路8号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("吉林省延边朝鲜族自治州延吉市光明街12号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("湖北省仙桃市沔阳大道88号", "[PROVINCE][DISTRICT][STREET][NUMBER]"),
        ("天津市和平区南京路189号", "[CITY][DISTRICT][STREET][NUMBER]"),
        ("浙江杭州西湖区文三路478号", "[PROVINCE][CITY][DISTRICT][STREET][NUMBER]"),
        ("我家住在牧野区文化路298号3栋2单元1908室。", "我家住在[DISTRICT][STREET][NUMBER]。"),
        ("公司位于阿里地区噶尔县朝阳北路347号", "公司位于[CITY][DISTRICT][STREET][NUMBER]"),
    ],
)
def test_addresses(text, masked):
    assert redact(text, types=["ADDRESS"])[0] == masked


@pytest.mark.parametrize(
    "text",
    ["北京市", "朝阳区的天气很好", "我住在深圳市南山区科技园附近", "上海3号线", "大家都知道朝阳区的事", "5月1号见"],
)
def test_not_addresses(text):
    assert redact(text, types=["ADDRESS"])[0] == text


# --- redact, actions, the step ---


def test_overlaps_resolve_to_the_longest_span():
    text = "13800138000@163.com"
    assert redact(text) == ("[EMAIL]", redact(text, action="tag")[1])
    assert [s.type for s in redact(text)[1]] == ["EMAIL"]


def test_mixed_text_masks_everything_once():
    rid = make_id("11010519491231002")
    text = (
        f"联系人：张伟，电话13800138000，身份证{rid}，邮箱zw@example.com，地址：北京市朝阳区建国路88号。"
        "版本 1.2.3.4，日期 2024-05-01。"
    )
    out, _ = redact(text)
    assert out == (
        "联系人：[PERSON]，电话[PHONE]，身份证[ID_NUMBER]，邮箱[EMAIL]，地址：[CITY][DISTRICT][STREET][NUMBER]。"
        "版本 1.2.3.4，日期 2024-05-01。"
    )


def test_hash_is_stable_salted_and_normalised():
    a, _ = redact("电话 13800138000", action="hash", salt="s1")
    b, _ = redact("call 138-0013-8000 now", action="hash", salt="s1")
    c, _ = redact("电话 13800138000", action="hash", salt="s2")
    token = a.split()[-1]
    assert token.startswith("[PHONE:") and len(token) == len("[PHONE:") + 7
    assert token in b and token not in c


def test_types_and_actions_are_validated():
    with pytest.raises(ValueError, match="valid types: EMAIL"):
        redact("x", types=["SSN"])
    with pytest.raises(ValueError, match="valid actions: mask, hash, tag"):
        PiiStep(action="drop")
    assert redact("a@b.com 13800138000", types=["PHONE"])[0] == "a@b.com [PHONE]"


@pytest.mark.parametrize("action", ["mask", "hash"])
def test_step_records_spans_without_raw_values(action):
    rid = make_id("44030419900307451")
    text = f"张伟先生 13800138000 {rid} zw@example.com 北京市朝阳区建国路88号"
    step = PiiStep(action=action, salt="secret-salt")
    docs = list(step.run([Document("d1", text), Document("d2", "nothing here")]))
    meta = docs[0].metadata["pii"]
    dumped = json.dumps(meta, ensure_ascii=False) + json.dumps(step.stats()) + repr(step)
    for raw in ("张伟", "13800138000", rid, "zw@example.com", "建国路", "88号", "secret-salt"):
        assert raw not in dumped and raw not in docs[0].text
    assert meta["counts"] == {"ADDRESS": 1, "EMAIL": 1, "ID_NUMBER": 1, "PERSON": 1, "PHONE": 1}
    assert [s["type"] for s in meta["spans"]][-4:] == ["CITY", "DISTRICT", "STREET", "NUMBER"]
    assert [text[s["start"] : s["end"]] for s in meta["spans"]][:2] == ["张伟", "13800138000"]
    assert docs[1].metadata["pii"] == {"action": action, "counts": {}, "spans": []}
    assert step.stats()["docs"] == 2 and step.stats()["docs_touched"] == 1


def test_tag_keeps_text_and_records_values():
    text = "mail zw@example.com"
    (doc,) = PiiStep(action="tag").run([Document("d", text)])
    assert doc.text == text
    assert doc.metadata["pii"]["spans"] == [{"start": 5, "end": 19, "type": "EMAIL", "value": "zw@example.com"}]


def test_data_package_does_not_import_torch():
    code = "import sys, bessemer.data.pii.redact as p; p.redact('张伟先生 13800138000'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_id_shaped_numbers_are_not_cards():
    # 62 is Gansu's region code and UnionPay's IIN: an ID with a wrong check char that passes Luhn stays
    first17 = "62010219850612001"
    wrong = next(
        first17[:-1] + d + c
        for d in "0123456789"
        for c in "0123456789"
        if luhn_ok(first17[:-1] + d + c) and c != id_check_char(first17[:-1] + d)
    )
    assert card_brand(wrong) == "unionpay" and not is_resident_id(wrong)
    assert detect_bank_cards(f"号码 {wrong}") == [] and detect_resident_ids(f"号码 {wrong}") == []
    card = make_card("62170012345678901")
    assert detect_bank_cards(f"身份证号：{card}") == [] and values(detect_bank_cards(f"卡号：{card}")) == [card]


# --- field libraries: phones (libphonenumber), every card network, SSNs ---


@pytest.mark.parametrize(
    "phone",
    ["762-461-2032x4106", "(776)790-7583x0098", "+1-402-650-0385x7578", "001-561-268-2125x96046",
     "414.260.0584x5609", "+81 3-0538-0604", "+49 30 12345678"],
)
def test_phone_extensions_and_international_forms(phone):
    for text in (f"call {phone} now", f"请拨打{phone}联系"):
        assert values(detect_phones(text)) == [phone], text


def test_plain_ten_digit_numbers_need_a_valid_area_code_or_a_phone_word():
    assert values(detect_phones("record 2125550143 added")) == ["2125550143"]  # 212: New York
    assert detect_phones("record 7767907583 added") == []  # 776 is not assigned
    assert values(detect_phones("my number is 7767907583")) == ["7767907583"]
    assert detect_phones("sha 2125550143ab") == [] and detect_phones("3.2125550143") == []


@pytest.mark.parametrize(
    "network, prefix, length",
    [("visa", "4", 13), ("visa", "4", 19), ("mastercard", "2720", 16), ("mastercard", "55", 16), ("amex", "34", 15),
     ("discover", "644", 16), ("discover", "6011", 19), ("jcb", "3589", 16), ("jcb", "2131", 15),
     ("diners", "36", 14), ("diners", "3095", 16), ("maestro", "6759", 12), ("maestro", "5018", 19),
     ("unionpay", "62", 17), ("mir", "2200", 16)],
)
def test_every_network_by_iin_and_length(network, prefix, length):
    card = make_card(prefix + "7" * (length - len(prefix) - 1))
    assert card_brand(card) == network
    assert values(detect_bank_cards(f"paid with {card} today")) == [card]
    assert detect_bank_cards(f"paid with {card[:-1]}{(int(card[-1]) + 1) % 10} today") == []  # Luhn fails


def test_us_social_security_numbers():
    assert [s.type for s in redact("SSN 638-33-5875.")[1]] == ["ID_NUMBER"]
    assert redact("her social security number: 638335875")[0] == "her social security number: [ID_NUMBER]"
    for not_ssn in ("666-12-3456", "900-12-3456", "123-00-4567", "record 638335875", "2023-05-1234"):
        assert redact(not_ssn, types=["ID_NUMBER"])[1] == [], not_ssn


# --- number context decided before a pattern fires ---


@pytest.mark.parametrize(
    "text",
    ["财政收入达15000000000元", "全市常住人口13800138000人", "增长率为13800138000%", "第5.2.1.3节", "见§ 10.1.2.3",
     "Section 10.1.2.3 applies", "型号E12345678", "model no. G87654321", "id=4111111111111111",
     '{"user_id": "4111111111111111"}', "序列号4111111111111111", "订单号4111111111111111", "S/N 4111111111111111",
     "¥4111111111111111", "产品编号110105194912310021"],
)
def test_amounts_sections_and_codes_are_not_pii(text):
    assert redact(text) == (text, [])


# --- names: roles are cues, ordinary words are not names ---


@pytest.mark.parametrize(
    "text",
    ["项目经理", "班主任老师", "历史老师", "高峰表示", "高峰时期", "申请人应当自收到通知之日起",
     "审判长查明当事人是否到庭",
     "被害人陈述；", "告知原告向仲裁机构申请仲裁", "原告方某诉称", "被告人王某某", "经当事人申请，仲裁庭可以先行裁定",
     "Virginia Beach is nice", "May Day parade", "Grace Church on Main Street", "Apple said on Monday"],
)
def test_ordinary_words_stay(text):
    assert redact(text, types=["PERSON"]) == (text, [])


def test_statute_text_passes_unmasked():
    from importlib.resources import files

    statute = files("bessemer.demo").joinpath("zh.txt").read_text(encoding="utf-8")
    statute += (
        "第一百零四条 申请人向海事法院申请设立海事赔偿责任限制基金，应当提交书面申请。"
        "被申请人应当自收到申请书副本之日起"
        "十五日内提出异议。审判长查明当事人是否到庭，宣布案由。当事人陈述；证人证言；被害人陈述。"
        "城市主干路、主要商业区等无障碍设施的改造，属于城镇公共道路的除外。"
    )
    assert redact(statute) == (statute, [])


# --- no raw PII at rest: the exclusion sink ---


class RejectMarked(Step):
    """Drops documents containing "#reject#", before the pii step."""

    name = "reject"

    def process(self, doc):
        return "marked" if "#reject#" in doc.text else None


register_step("test-reject-marked", RejectMarked)


@pytest.mark.parametrize("steps, shards", [
    ([{"name": "test-reject-marked"}, {"name": "pii"}], 1),
    ([{"name": "test-reject-marked"}, {"name": "dedup"}, {"name": "pii", "action": "hash", "salt": "s"}], 2),
])
def test_documents_rejected_before_the_pii_step_are_redacted_in_the_sink(tmp_path, steps, shards):
    (tmp_path / "in").mkdir()
    for f in range(2):
        rows = [{"text": f"#reject# 联系人：张伟，电话13800138000，邮箱zw{f}@example.com"}, "{broken: zw@example.com",
                {"text": "a document repeated in both files, mail ops@example.com for a copy of the report " * 3},
                {"text": f"kept {f}: call 415-555-0132"}]
        lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
        (tmp_path / "in" / f"f{f}.jsonl").write_text("\n".join(lines))
    cfg = Pipeline.from_dict({"input": {"paths": [str(tmp_path / "in")]}, "steps": steps,
                              "executor": {"shards": shards}, "output": {"dir": str(tmp_path / "out")}})
    stats = run_pipeline(cfg)
    assert stats["complete"] and stats["conserved"]
    sunk = [json.loads(line) for p in sorted((tmp_path / "out" / "rejected").rglob("*.jsonl.zst"))
            for line in zstandard.ZstdDecompressor().stream_reader(p.read_bytes()).read().splitlines()]
    assert {d["metadata"]["reason"] for d in sunk} >= {"reject.marked", "input.invalid_json"}
    assert len(sunk) == stats["docs_rejected"]
    dumped = json.dumps(sunk, ensure_ascii=False)
    for raw in ("张伟", "13800138000", "@example.com"):
        assert raw not in dumped
    assert all("pii" in d["metadata"] for d in sunk)
