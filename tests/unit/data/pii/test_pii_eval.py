"""Leak rate and decoy damage of PII redaction on a generated, seeded evaluation set.

Sentences in Chinese and English are built from templates. Each holds planted PII (IDs and cards valid by
construction, phones, emails, IPs, passports, names with cues, addresses) and/or decoys that look like
PII but are not (checksum-invalid IDs/cards, dates, ISBNs, versions, prices, order numbers, article
numbers, timestamps, years, long numbers, hashes, place and common words next to titles).

    leak rate    = planted values still present in the redacted text / planted values
    decoy damage = decoy values no longer present verbatim / decoys

Run with `-s` to see the table; docs/data-pii.md quotes it.
"""

import datetime
import ipaddress
import random
import time
from collections import Counter

from bessemer.data.pii.redact import redact

SEED = 20240501
N_SENTENCES = 3000
MAX_LEAK = 0.01
MAX_DAMAGE = 0.02

_W = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
_PROVINCE_CODES = [*range(11, 16), *range(21, 24), *range(31, 38), *range(41, 47), *range(50, 55), *range(61, 66)]
_SURNAMES = list("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蔡蒋余杜叶程苏魏") + [
    "欧阳",
    "司马",
    "诸葛",
    "上官",
]
_GIVEN = list("伟芳娜秀敏静丽强磊军洋勇艳杰娟涛明超兰霞平刚桂英华玉萍红娥玲芬燕彬鹏辉思远宇轩梓涵浩然欣怡子墨雨桐晨曦")
_FIRST = [
    "John",
    "Mary",
    "Robert",
    "Linda",
    "Michael",
    "Sarah",
    "David",
    "Emily",
    "James",
    "Laura",
    "Daniel",
    "Anna",
    "Thomas",
    "Grace",
    "Kevin",
    "Olivia",
]
_LAST = [
    "Smith",
    "Johnson",
    "Brown",
    "Taylor",
    "Miller",
    "Wilson",
    "Moore",
    "Anderson",
    "Thompson",
    "Harris",
    "Clark",
    "Lewis",
    "Walker",
    "Young",
]
_ADDR = [
    ("广东省", "深圳市", "南山区"),
    ("广东省", "广州市", "天河区"),
    ("浙江省", "杭州市", "西湖区"),
    ("江苏省", "南京市", "鼓楼区"),
    ("四川省", "成都市", "武侯区"),
    ("湖北省", "武汉市", "洪山区"),
    ("山东省", "青岛市", "市南区"),
    ("福建省", "厦门市", "思明区"),
    ("陕西省", "西安市", "雁塔区"),
    ("", "北京市", "朝阳区"),
    ("", "上海市", "浦东新区"),
    ("", "天津市", "和平区"),
    ("", "重庆市", "渝中区"),
    ("河南省", "郑州市", "金水区"),
    ("湖南省", "长沙市", "岳麓区"),
    ("云南省", "昆明市", "五华区"),
    ("广西壮族自治区", "南宁市", "青秀区"),
    ("内蒙古自治区", "呼和浩特市", "新城区"),
    ("江西省", "南昌市", "红谷滩区"),
    ("黑龙江省", "哈尔滨市", "南岗区"),
    ("贵州省", "贵阳市", "云岩区"),
    ("安徽省", "合肥市", "蜀山区"),
]
_STREETS = [
    "建国路",
    "中山路",
    "人民路",
    "解放大道",
    "深南大道",
    "文三路",
    "长安街",
    "南京东路",
    "淮海中路",
    "科技园南路",
    "学院路",
    "天府大道",
    "珞喻路",
    "香港中路",
    "湖滨路",
    "五四路",
    "友谊路",
    "黄河路",
    "花园街",
    "幸福巷",
    "丰和中大道",
    "金水东路",
]
_BUILDINGS = ["华星时代广场", "国贸大厦", "阳光花园", "金融中心", "创业大厦", "世纪城"]


class EvalSet:
    """Seeded generator of (sentence, [(kind, value, is_pii)])."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def digits(self, n: int) -> str:
        return "".join(self.r.choice("0123456789") for _ in range(n))

    # --- values with checksums, computed here independently of bessemer ---

    @staticmethod
    def id_check(first17: str) -> str:
        return "10X98765432"[sum(int(c) * w for c, w in zip(first17, _W)) % 11]

    @staticmethod
    def luhn_digit(body: str) -> str:
        total = 0
        for i, c in enumerate(reversed(body)):
            d = int(c) * (2 if i % 2 == 0 else 1)
            total += d - 9 if d > 9 else d
        return str((10 - total % 10) % 10)

    def id_parts(self) -> tuple[str, datetime.date]:
        born = datetime.date(1940, 1, 1) + datetime.timedelta(days=self.r.randrange(365 * 70))
        region = f"{self.r.choice(_PROVINCE_CODES)}{self.r.randint(1, 99):02d}{self.r.randint(1, 99):02d}"
        return region, born

    def resident_id(self) -> str:
        region, born = self.id_parts()
        first17 = region + born.strftime("%Y%m%d") + self.digits(3)
        return first17 + self.id_check(first17)

    def legacy_id(self) -> str:
        region, born = self.id_parts()
        return region + born.strftime("%y%m%d")[-6:] + self.digits(3) if born.year < 2000 else self.legacy_id()

    def card_digits(self) -> str:
        prefix, n = self.r.choice(
            [
                ("62", 16),
                ("62", 19),
                ("4", 16),
                ("53", 16),
                ("2300", 16),
                ("37", 15),
                ("3530", 16),
                ("6011", 16),
                ("65", 16),
            ]
        )
        body = prefix + self.digits(n - 1 - len(prefix))
        return body + self.luhn_digit(body)

    def format_card(self, d: str) -> str:
        sep = self.r.choice(["", " ", "-"])
        if not sep:
            return d
        if len(d) == 15:
            return sep.join([d[:4], d[4:10], d[10:]])
        return sep.join(d[i : i + 4] for i in range(0, len(d), 4))

    def phone(self) -> str:
        r = self.r
        mobile = "1" + r.choice("3456789") + self.digits(9)
        a, b, c = mobile[:3], mobile[3:7], mobile[7:]
        local8 = r.choice("2345678") + self.digits(7)
        return r.choice(
            [
                mobile,
                f"{a}-{b}-{c}",
                f"{a} {b} {c}",
                f"{a}.{b}.{c}",
                f"+86 {a} {b} {c}",
                f"+86{mobile}",
                f"0086-{mobile}",
                f"(+86){mobile}",
                f"010-{local8}",
                f"(021){local8}",
                f"0755-{local8[:4]} {local8[4:]}",
                f"（0571）{local8}",
                f"028-{local8[:7]}",
                f"+1 (415) 555-{self.digits(4)}",
                f"+44 20 7946 {self.digits(4)}",
                f"+81 3-{self.digits(4)}-{self.digits(4)}",
                f"+49 30 {self.digits(8)}",
                f"({r.randint(201, 989)}) 555-{self.digits(4)}",
            ]
        )

    def email(self) -> str:
        local = self.r.choice(["zhang.wei", "li_na", "wang", "john.smith", "ops+alerts", "m.garcia", "chen-yu"])
        domain = self.r.choice(["example.com", "163.com", "qq.com", "corp-mail.io", "mail.example.com.cn", "gmail.com"])
        return f"{local}{self.r.randint(1, 999)}@{domain}"

    def ip(self) -> str:
        if self.r.random() < 0.7:
            first = self.r.choice([n for n in range(1, 255) if n != 127])  # loopback is not PII
            return ".".join([str(first)] + [str(self.r.randint(0, 255)) for _ in range(3)])
        return str(ipaddress.IPv6Address(self.r.getrandbits(128) | (0x2001 << 112)))

    def zh_name(self) -> str:
        return self.r.choice(_SURNAMES) + "".join(self.r.choice(_GIVEN) for _ in range(self.r.choice([1, 2])))

    def address(self) -> tuple[str, list[str]]:
        """(address, the parts that must not survive: street and house number/building)."""
        prov, city, district = self.r.choice(_ADDR)
        street, number = self.r.choice(_STREETS), f"{self.r.randint(1, 2999)}号"
        tail = self.r.choice(
            [
                "",
                "",
                f"{self.r.choice(_BUILDINGS)}{self.r.choice('ABCD')}座{self.r.randint(101, 2808)}室",
                f"{self.r.randint(1, 30)}栋{self.r.randint(1, 6)}单元{self.r.randint(101, 2808)}室",
                f"{self.r.randint(1, 20)}号楼",
            ]
        )
        head = self.r.choice([prov + city + district, city + district, prov + city + district])
        return head + street + number + tail, [street, number + tail]

    # --- planted PII as (clause, values) per language ---

    def planted(self, zh: bool) -> tuple[str, str, list[str]]:
        r = self.r
        kind = r.choice(
            ["ID_NUMBER", "ID_NUMBER15", "BANK_CARD", "PHONE", "EMAIL", "IP", "PASSPORT", "PERSON", "ADDRESS"]
        )
        if kind == "ID_NUMBER":
            v = self.resident_id()
            return (
                kind,
                r.choice(
                    [f"身份证号{v}", f"证件号码：{v}", f"身份证 {v}"] if zh else [f"ID number {v}", f"national ID: {v}"]
                ),
                [v],
            )
        if kind == "ID_NUMBER15":
            v = self.legacy_id()
            return kind, (f"旧身份证号{v}" if zh else f"old ID card {v}"), [v]
        if kind == "BANK_CARD":
            v = self.format_card(self.card_digits())
            return (
                kind,
                r.choice([f"银行卡号{v}", f"卡号：{v}", f"请转账到{v}"] if zh else [f"card {v}", f"card number: {v}"]),
                [v],
            )
        if kind == "PHONE":
            v = self.phone()
            return (
                kind,
                r.choice(
                    [f"电话{v}", f"手机号是{v}", f"请拨打 {v}"] if zh else [f"call {v}", f"phone: {v}", f"tel. {v}"]
                ),
                [v],
            )
        if kind == "EMAIL":
            v = self.email()
            return kind, (f"邮箱{v}" if zh else f"email {v}"), [v]
        if kind == "IP":
            v = self.ip()
            return kind, (f"服务器地址 {v} 已封禁" if zh else f"login from {v}"), [v]
        if kind == "PASSPORT":
            if r.random() < 0.5:
                v = r.choice("EG") + self.digits(8)
                return kind, (f"护照{v}" if zh else f"passport {v}"), [v]
            if zh:
                v = "E" + r.choice("ABCDEFGH") + self.digits(7)
                return kind, f"护照号码：{v}", [v]
            v = self.digits(9)
            return kind, f"passport no. {v}", [v]
        if kind == "PERSON":
            if zh:
                v = self.zh_name()
                return (
                    kind,
                    r.choice(
                        [
                            f"联系人：{v}",
                            f"收件人：{v}",
                            f"{v}先生",
                            f"{v}女士",
                            f"姓名：{v}",
                            f"负责人：{v}",
                            f"请联系{v}老师",
                        ]
                    ),
                    [v],
                )
            first, last = r.choice(_FIRST), r.choice(_LAST)
            return (
                kind,
                r.choice(
                    [
                        f"Mr. {first} {last}",
                        f"Ms. {first} {last}",
                        f"Name: {first} {last}",
                        f"signed by {first} {last}",
                        f"Contact: {first} {last}",
                    ]
                ),
                [f"{first} {last}"],
            )
        v, parts = self.address()
        return kind, r.choice([f"地址：{v}", f"寄到{v}", f"公司位于{v}", v]), parts

    # --- decoys ---

    def decoy(self, zh: bool) -> tuple[str, str, list[str]]:
        r = self.r
        kind = r.choice(
            [
                "bad_id",
                "bad_card",
                "date",
                "isbn",
                "version",
                "price",
                "order",
                "article",
                "timestamp",
                "year",
                "number",
                "hash",
                "word",
            ]
        )
        if kind == "bad_id":
            v = self.resident_id()
            if r.random() < 0.5:
                v = v[:17] + r.choice([c for c in "0123456789X" if c != v[17]])
            else:  # month 13, correct check char
                first17 = v[:10] + "13" + v[12:17]
                v = first17 + self.id_check(first17)
            return kind, (f"身份证号{v}" if zh else f"ID {v}"), [v]
        if kind == "bad_card":
            d = self.card_digits()
            v = d[:-1] + str((int(d[-1]) + r.randint(1, 9)) % 10)
            return kind, (f"卡号{v}" if zh else f"card {v}"), [v]
        if kind == "date":
            d = datetime.date(2000, 1, 1) + datetime.timedelta(days=r.randrange(9000))
            v = r.choice(
                [
                    d.isoformat(),
                    d.strftime("%Y%m%d"),
                    d.strftime("%Y/%m/%d"),
                    f"{d.year}年{d.month}月{d.day}日",
                    d.strftime("%m/%d/%Y"),
                ]
            )
            return kind, (f"日期 {v}" if zh else f"on {v}"), [v]
        if kind == "isbn":
            v = r.choice([f"978-7-{self.digits(3)}-{self.digits(5)}-{self.digits(1)}", "978" + self.digits(10)])
            return kind, f"ISBN {v}", [v]
        if kind == "version":
            a, b, c, d = (r.randint(0, 20) for _ in range(4))
            v = r.choice([f"v{a}.{b}.{c}.{d}", f"{a}.{b}.{c}", f"版本 {a}.{b}.{c}.{d}", f"version {a}.{b}.{c}.{d}"])
            return kind, (f"升级{v}" if zh else f"upgrade to {v}"), [v]
        if kind == "price":
            n = r.randint(1, 99999)
            v = r.choice(
                [f"¥{n:,}.00", f"${n:,}", f"￥{n}", f"€{n:,}.50", f"{n:,}元", f"+{n}{self.digits(4)}.{self.digits(2)}"]
            )
            return kind, (f"价格{v}" if zh else f"price {v}"), [v]
        if kind == "order":
            d = self.card_digits() if r.random() < 0.5 else self.digits(r.randint(12, 20))
            cue = r.choice(
                ["订单号：", "订单号", "运单号 ", "快递单号："] if zh else ["order no. ", "Order #", "tracking number "]
            )
            return kind, cue + d, [d]
        if kind == "article":
            n = r.randint(1, 1260)
            v = r.choice([f"第{n}条", "第一千一百七十九条", f"Article {n}", f"§ {n}"])
            return kind, (f"依据民法典{v}" if zh else f"under {v}"), [v]
        if kind == "timestamp":
            v = r.choice(
                [
                    "2024-05-01 12:30:45",
                    "2023-11-30T08:15:00Z",
                    str(r.randint(1_000_000_000, 1_800_000_000)),
                    str(r.randint(1_000_000_000_000, 1_800_000_000_000)),
                    f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
                ]
            )
            return kind, (f"时间戳 {v}" if zh else f"at {v}"), [v]
        if kind == "year":
            v = str(r.randint(1900, 2030))
            return kind, (f"{v}年" if zh else f"in {v}"), [v]
        if kind == "number":
            return kind, (f"编号 {(v := self.long_number())}" if zh else f"record {(v := self.long_number())}"), [v]
        if kind == "hash":
            v = "".join(r.choice("0123456789abcdef") for _ in range(40))
            return kind, f"commit {v}", [v]
        v = r.choice(
            [
                "高峰时期",
                "明长城",
                "向老师请教",
                "各位女士",
                "阿里巴巴集团",
                "朝阳区的天气",
                "北京市",
                "上海3号线",
                "文明城市",
                "田野金黄",
            ]
            if zh
            else ["Sales Department", "Acme Corp", "President", "The Name of the Rose", "New York", "Monday"]
        )
        clause = (
            v
            if zh
            else {
                "Sales Department": "Contact: Sales Department",
                "Acme Corp": "Company Name: Acme Corp",
                "President": "Mr. President",
            }.get(v, v)
        )
        return kind, clause, [v]

    def long_number(self) -> str:
        """A random number with no checksum: Luhn-invalid and, at 18 digits, not a valid resident ID."""
        n = self.r.choice([10, 12, 13, 14, 16, 17, 18, 19, 20, 22])
        body = self.r.choice("123456789") + self.digits(n - 2)
        last = str((int(self.luhn_digit(body)) + self.r.randint(1, 9)) % 10)  # break Luhn
        if n == 18 and last == self.id_check(body):
            last = (
                str((int(last) + 1) % 10)
                if self.luhn_digit(body) != str((int(last) + 1) % 10)
                else str((int(last) + 2) % 10)
            )
        return body + last

    def sentences(self, n: int):
        for _ in range(n):
            zh = self.r.random() < 0.5
            items = [self.planted(zh) if self.r.random() < 0.6 else self.decoy(zh) for _ in range(self.r.randint(1, 3))]
            lead = self.r.choice(["", "您好，", "备注：", "客服回复："] if zh else ["", "Hi, ", "Note: ", "Update: "])
            text = lead + ("，".join(c for _, c, _ in items) + "。" if zh else "; ".join(c for _, c, _ in items) + ".")
            yield text, items


def evaluate(seed: int = SEED, n: int = N_SENTENCES) -> dict:
    gen = EvalSet(seed)
    planted, leaked, decoys, damaged = Counter(), Counter(), Counter(), Counter()
    examples: dict[str, str] = {}
    chars, t0 = 0, time.perf_counter()
    for text, items in gen.sentences(n):
        out, _ = redact(text)
        chars += len(text)
        for kind, _, vals in items:
            is_pii = kind.isupper()
            (planted if is_pii else decoys)[kind] += 1
            if is_pii and any(v in out for v in vals):
                leaked[kind] += 1
                examples.setdefault("leak:" + kind, f"{text} -> {out}")
            if not is_pii and not all(v in out for v in vals):
                damaged[kind] += 1
                examples.setdefault("damage:" + kind, f"{text} -> {out}")
    return {
        "planted": planted,
        "leaked": leaked,
        "decoys": decoys,
        "damaged": damaged,
        "examples": examples,
        "chars_per_s": chars / (time.perf_counter() - t0),
    }


def test_leak_rate_and_decoy_damage():
    res = evaluate()
    planted, leaked, decoys, damaged = res["planted"], res["leaked"], res["decoys"], res["damaged"]
    leak = sum(leaked.values()) / sum(planted.values())
    damage = sum(damaged.values()) / sum(decoys.values())
    print(f"\nPII eval (seed {SEED}, {N_SENTENCES} sentences, {res['chars_per_s']:,.0f} chars/s)")
    print(f"leak rate    {sum(leaked.values())}/{sum(planted.values())} = {leak:.2%}")
    for k in sorted(planted):
        print(f"  {k:<12} {leaked[k]:>4}/{planted[k]}")
    print(f"decoy damage {sum(damaged.values())}/{sum(decoys.values())} = {damage:.2%}")
    for k in sorted(decoys):
        print(f"  {k:<12} {damaged[k]:>4}/{decoys[k]}")
    for k, v in sorted(res["examples"].items()):
        print(f"  e.g. {k}: {v}")
    assert leak <= MAX_LEAK, f"leak rate {leak:.2%} > {MAX_LEAK:.0%}: {leaked}"
    assert damage <= MAX_DAMAGE, f"decoy damage {damage:.2%} > {MAX_DAMAGE:.0%}: {damaged}"
