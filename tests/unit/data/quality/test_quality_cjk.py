"""Quality rules per script: statute articles and chapters kept in Chinese and English, CJK text measured in
characters, Japanese and Korean judged without a segmenter, one segmentation per Chinese document, and the
junk that still goes. Statute excerpts are public-domain law text (PRC Criminal Law, Civil Code; 54 U.S.C.)."""

import pytest

from bessemer.data.document import Document
from bessemer.data.quality.boilerplate import BoilerplateRemover
from bessemer.data.quality.c4 import C4Quality
from bessemer.data.quality.filter import QualityStep
from bessemer.data.quality.gopher import GopherQuality, GopherRepetition
from bessemer.data.text import segment
from bessemer.data.text.measure import TextView, is_list_item

ZH_ARTICLES = [
    "第四条 对任何人犯罪，在适用法律上一律平等。不允许任何人有超越法律的特权。",
    "第五条 刑罚的轻重，应当与犯罪分子所犯罪行和承担的刑事责任相适应。",
    "第四百四十八条 虐待俘虏，情节恶劣的，处三年以下有期徒刑。",
    "第六条 凡在中华人民共和国领域内犯罪的，除法律有特别规定的以外，都适用本法。\n\n凡在中华人民共和国船舶或者航空器内犯罪的，也适用本法。",
]
# Five articles of one section: each ends in the same sentencing formulas and the same clause on units.
ZH_CHAPTER = """#### 第四节 破坏金融管理秩序罪

第一百七十三条 变造货币，数额较大的，处三年以下有期徒刑或者拘役，并处或者单处一万元以上十万元以下罚金；数额巨大的，处三年以上十年以下有期徒刑，并处二万元以上二十万元以下罚金。

第一百七十五条 以转贷牟利为目的，套取金融机构信贷资金高利转贷他人，违法所得数额较大的，处三年以下有期徒刑或者拘役，并处违法所得一倍以上五倍以下罚金；数额巨大的，处三年以上七年以下有期徒刑，并处违法所得一倍以上五倍以下罚金。

单位犯前款罪的，对单位判处罚金，并对其直接负责的主管人员和其他直接责任人员，处三年以下有期徒刑或者拘役。

第一百七十五条之一 以欺骗手段取得银行或者其他金融机构贷款、票据承兑、信用证、保函等，给银行或者其他金融机构造成重大损失的，处三年以下有期徒刑或者拘役，并处或者单处罚金；给银行或者其他金融机构造成特别重大损失或者有其他特别严重情节的，处三年以上七年以下有期徒刑，并处罚金。

单位犯前款罪的，对单位判处罚金，并对其直接负责的主管人员和其他直接责任人员，依照前款的规定处罚。

第一百七十六条 非法吸收公众存款或者变相吸收公众存款，扰乱金融秩序的，处三年以下有期徒刑或者拘役，并处或者单处罚金；数额巨大或者有其他严重情节的，处三年以上十年以下有期徒刑，并处罚金；数额特别巨大或者有其他特别严重情节的，处十年以上有期徒刑，并处罚金。

单位犯前款罪的，对单位判处罚金，并对其直接负责的主管人员和其他直接责任人员，依照前款的规定处罚。"""
EN_SECTIONS = [
    "§ 100301. Establishment\n\nThere is in the Department of the Interior a service called the National Park Service.",
    "§ 100102. Definitions\n\nIn this title:\n(1) Director.—The term “Director” means the Director of the National "
    "Park Service.\n(2) Secretary.—The term “Secretary” means the Secretary of the Interior.\n(3) Service.—The term "
    "“Service” means the National Park Service.\n(4) System.—The term “System” means the National Park System.",
]
JA = ("このチュートリアルでは、Python の基本的な機能を順に紹介します。まずインタプリタの使い方を説明し、"
      "次に数値や文字列などの組み込み型を扱います。最後に、関数とモジュールを使って小さなプログラムを書いてみましょう。")
KO = ("이 자습서는 파이썬의 기본 기능을 차례로 소개합니다. 먼저 인터프리터를 사용하는 방법을 설명하고, "
      "다음으로 숫자와 문자열 같은 내장 형을 다룹니다. 마지막으로 함수와 모듈을 사용해서 작은 프로그램을 만들어 봅니다.")


def run(texts: dict[str, str], **options) -> tuple[dict[str, Document], dict[str, str]]:
    step = QualityStep(**options)
    kept = {d.id: d for d in step.run([Document(k, v) for k, v in texts.items()])}
    return kept, {d.id: d.metadata["reason"] for d in step.rejected}


def test_statute_articles_and_a_chapter_pass_the_defaults():
    texts = {f"zh{i}": t for i, t in enumerate(ZH_ARTICLES)} | {"zh_chapter": ZH_CHAPTER}
    texts |= {f"en{i}": t for i, t in enumerate(EN_SECTIONS)}
    kept, rejected = run(texts)
    assert rejected == {}
    assert all(kept[k].text == v for k, v in texts.items())  # no line removed either


def test_the_papers_repetition_thresholds_reject_the_chapter():
    # Gopher's 5..10-gram thresholds on characters converted to the CJK n-grams: the formulas repeat.
    paper = GopherRepetition(cjk_dup_n_grams=((8, 0.15), (9, 0.14), (11, 0.13), (12, 0.12), (14, 0.11), (16, 0.10)))
    assert paper.check(TextView(ZH_CHAPTER)) == "dup_8_char_gram"
    assert GopherRepetition().check(TextView(ZH_CHAPTER)) is None


@pytest.mark.parametrize(
    "text, reason",
    [
        ("第一百九十九条 （删去）", "quality.gopher.too_few_words"),
        ("免费下载破解版最新版高速下载" * 12, "quality.gopher_repetition.top_5_char_gram"),
        ("，".join(["北京租房信息北京租房价格北京租房合租北京个人租房"] * 6) + "。", "quality.gopher_repetition.top_3_char_gram"),
        ("苹果香蕉橘子葡萄西瓜草莓菠萝芒果樱桃柠檬", "quality.gopher.too_few_stop_words"),
        ("首页 | 关于我们 | 联系方式", "quality.gopher.too_few_words"),
    ],
)
def test_cjk_junk_goes(text, reason):
    assert run({"d": text})[1] == {"d": reason}


def test_chinese_mojibake_fails_on_word_length():
    # UTF-8 Chinese read as GBK: rare characters that jieba leaves one by one.
    text = "这是一段用来测试的中文文本，编码错误会让每一个字都变成乱码，读者就完全看不懂了。" * 2
    garbled = text.encode("utf-8").decode("gbk", errors="replace")
    assert GopherQuality().check(TextView(text)) is None
    assert GopherQuality().check(TextView(garbled)) == "mean_word_length_too_short"


def test_japanese_and_korean_prose_pass_without_a_segmenter(monkeypatch):
    def no_segmenter(text):
        raise AssertionError("only Chinese is segmented")

    monkeypatch.setattr(segment, "words", no_segmenter)
    views = [TextView(JA), TextView(KO)]
    assert all(v.cjk and not v.chinese for v in views)
    kept, rejected = run({"ja": JA, "ko": KO})
    assert rejected == {} and set(kept) == {"ja", "ko"}


def test_a_chinese_document_is_segmented_once(monkeypatch):
    calls = []
    words = segment.words
    monkeypatch.setattr(segment, "words", lambda text: calls.append(text) or words(text))
    kept, _ = run({"zh": ZH_CHAPTER, "en": EN_SECTIONS[1], "ja": JA})
    assert calls == [kept["zh"].text]  # the kept text, which the PII step segments next (cached)


def test_ngram_rules_judge_texts_of_fifty_words_or_75_cjk_characters():
    short = "全国人民代表大会会议每年举行一次，由全国人民代表大会常务委员会召集。"  # 全国人民代表大会 twice
    assert len(TextView(short).words) < 75
    assert GopherRepetition().check(TextView(short)) is None
    judged = GopherRepetition(cjk_min_ngram_chars=None, cjk_top_n_grams=((6, 0.2),))
    assert judged.check(TextView(short)) == "top_6_char_gram"


def test_length_floors_count_cjk_characters():
    assert GopherQuality().check(TextView("第三十二条 刑罚分为主刑和附加刑。")) == "too_few_words"  # 15 characters
    assert GopherQuality().check(TextView(ZH_ARTICLES[2])) is None  # 24
    assert GopherQuality(cjk_min_doc_chars=10).check(TextView("第三十二条 刑罚分为主刑和附加刑。")) is None
    assert GopherQuality().check(TextView("The Secretary may accept donations of land.")) == "too_few_words"


def test_stop_words_of_either_list_count_in_a_mixed_text():
    # Mostly Latin letters, no English stop word: its function words are the Chinese ones (并, 的).
    mixed = "运行 pip install fastcsv 安装 fastcsv，然后 import fastcsv 并调用 fastcsv.open 打开文件的内容。"
    assert not TextView(mixed).cjk
    assert GopherQuality(min_doc_words=5).check(TextView(mixed)) is None
    assert GopherQuality(min_doc_words=5, cjk_stop_chars="").check(TextView(mixed)) == "too_few_stop_words"


def test_c4_measures_each_line_in_its_own_script():
    page = EN_SECTIONS[1] + "\n请注意，第二个示例需要在本机上运行的邮件服务器。\n相关阅读"
    text, failed, removed = C4Quality().apply(TextView(page))
    assert failed is None and removed == {"too_few_words": 1}
    assert text == EN_SECTIONS[1] + "\n请注意，第二个示例需要在本机上运行的邮件服务器。"


@pytest.mark.parametrize(
    "line", ["(a) In General.—", "(iv) the Secretary;", "（一）管制；", "一、总则", "1、适用范围", "① 第一项"]
)
def test_legal_enumerators_are_list_items(line):
    assert is_list_item(line)


@pytest.mark.parametrize(
    "line",
    [
        "Sorry, the page you are looking for does not exist.",
        "You must sign in to view this content.",
        "This video is not available in your country.",
        "抱歉，您访问的页面不存在或已被删除。",
        "本文需要登录后才能查看全部内容，请先登录。",
    ],
)
def test_error_pages_and_login_walls_are_boilerplate(line):
    assert BoilerplateRemover().is_boilerplate(line)


def test_section_numbers_are_not_error_pages():
    assert not BoilerplateRemover().is_boilerplate("Section 404 of the Act applies to these permits.")
