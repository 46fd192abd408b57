"""Person names: cues, names without cues, and document-level propagation (once a full name is found, its
other mentions go too)."""

import pytest

from bessemer.data.pii.redact import redact


@pytest.mark.parametrize(
    "text, masked",
    [
        ("原告张伟诉被告刘洋", "原告[PERSON]诉被告[PERSON]"),
        ("审判长　王建国", "审判长　[PERSON]"),
        ("书记员陈静，委托诉讼代理人：赵丽，辩护人黄晓峰", "书记员[PERSON]，委托诉讼代理人：[PERSON]，辩护人[PERSON]"),
        ("被告人刘洋、孙浩和周敏", "被告人[PERSON]、[PERSON]和[PERSON]"),
        ("患者董娜今日复诊", "患者[PERSON]今日复诊"),
        ("联系人郭秀梅表示同意", "联系人[PERSON]表示同意"),
        ("项目经理王伟说", "项目经理[PERSON]说"),
        ("联系人：上官军。", "联系人：[PERSON]。"),
        ("我和王秀英是同学", "我和[PERSON]是同学"),
        ("Plaintiff Chad Burns filed a motion.", "Plaintiff [PERSON] filed a motion."),
        ("Stephanie Perkins said the deal was off.", "[PERSON] said the deal was off."),
        ("I met Stephanie Perkins yesterday.", "I met [PERSON] yesterday."),
        ("Judge Maria Lopez ordered a recess.", "Judge [PERSON] ordered a recess."),
        ("Stephanie Perkins said no. Perkins left.", "[PERSON] said no. [PERSON] left."),
        ("Mr. John Smith Jr. called; Mary Jones, PhD, wrote.", "Mr. [PERSON] called; [PERSON], wrote."),
        # a surname and a given name on their own, after the full name with a cue
        ("Defendant Rowan Ashcombe pleaded guilty. The judge told Ashcombe to stand.",
         "Defendant [PERSON] pleaded guilty. The judge told [PERSON] to stand."),
        ("Attorney Beatrice Okonkwo-Hale argued first. Afterwards, Okonkwo-Hale asked for a recess, and Beatrice agreed.",
         "Attorney [PERSON] argued first. Afterwards, [PERSON] asked for a recess, and [PERSON] agreed."),
        # after a full name found without a cue
        ("Margaret Thornbury joined the firm in 1990. In 1995 Thornbury became a partner.",
         "[PERSON] joined the firm in 1990. In 1995 [PERSON] became a partner."),
        # a role and a title stacked before the name; the title stays
        ("Plaintiff Mrs. Okafor filed suit.", "Plaintiff Mrs. [PERSON] filed suit."),
        # a Chinese given name on its own, and the full name again without a cue
        ("收件人：褚梦瑶\n三天后褚梦瑶签收了包裹，梦瑶表示满意。", "收件人：[PERSON]\n三天后[PERSON]签收了包裹，[PERSON]表示满意。"),
        ("书记员甘子墨记录。庭审结束后，甘子墨整理了笔录。", "书记员[PERSON]记录。庭审结束后，[PERSON]整理了笔录。"),
        # case as written, whole words only: the surname as an ordinary word, or inside a longer word, stays
        ("Lena Marwick said the bridge was safe. Marwickshire is far; Marwick agreed.",
         "[PERSON] said the bridge was safe. Marwickshire is far; [PERSON] agreed."),
        # a word the document also writes in lower case is an ordinary word there
        ("Grace Young said so. The young trees grew.", "[PERSON] said so. The young trees grew."),
        ("Patient Holly Grant was seen. A grant was approved; Grant went home.",
         "Patient [PERSON] was seen. A grant was approved; Grant went home."),
        # a common word as a Chinese given name, and a full name inside a longer word, stay
        ("联系人：韩建国。建国以来变化很大。", "联系人：[PERSON]。建国以来变化很大。"),
        # nothing found, nothing spread
        ("The Thornbury Trust met. Thornbury lies north.", "The Thornbury Trust met. Thornbury lies north."),
    ],
)
def test_names(text, masked):
    assert redact(text, types=["PERSON"])[0] == masked

