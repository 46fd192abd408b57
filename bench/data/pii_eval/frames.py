"""Sentence frames for the planted values of pii.jsonl: (frame, cue). `{V}` is the value; `{N2}` another
person's name, `{DATE}` a date, `{CITY}` a city, `{ORG}` a company, `{BANK}` a bank, each from the same Faker locale
(Chinese cities from divisions.csv). Only `{V}` and `{N2}` are planted values. `cue`
says what in the frame tells a reader the value is personal: `label` (Phone:, 身份证号：), `title`
(Mr., 先生), `role` (Plaintiff, 原告, 审判长), `context` (a verb or phrase around it) or `none`.

These frames are written for this set (the role words are those of Chinese procedural law and the layout of a
judgment's header and signature block follows the published judgment format); frames taken from real text
are built in build.py from bench/data/real_text/.
"""

EN = {
    "PHONE": [
        ("Call {V} for reservations.", "context"), ("Phone: {V}", "label"), ("You can reach me at {V} after 5pm.", "context"),
        ("Tel. {V}", "label"), ("For questions about your order, contact our office at {V} or write to us.", "context"),
        ("Mobile {V} (text only)", "label"), ("{V} is the number on the form.", "none"), ("{CITY} office: {V}", "label"),
        ("If you have any questions, please give me a call at {V}.", "context"), ("{V}", "none"),
        ("Her cell number, {V}, was listed in the report.", "context"), ("Fax: {V}", "label"),
    ],
    "BANK_CARD": [
        ("Card number: {V}", "label"), ("The charge was made to card {V} on {DATE}.", "context"),
        ("Pay with {V}, expiry 04/29.", "context"), ("{V}", "none"), ("credit card {V} was declined", "label"),
        ("Please update the card on file ({V}) before the next billing cycle.", "context"),
        ("Account: {V}", "label"), ("The transaction on {V} has been reversed.", "context"),
    ],
    "EMAIL": [
        ("Email me at {V}.", "context"), ("Contact: {V}", "label"), ("Send your resume to {V} by {DATE}.", "context"),
        ("{V} wrote:", "none"), ("Questions? Write to {V}", "context"), ("cc: {V}", "label"),
    ],
    "IP": [
        ("Login from {V} was blocked.", "context"), ("The request came from {V} at 03:14 UTC.", "context"),
        ("client_ip={V}", "label"), ("Your IP address is {V}.", "label"), ("{V} - - [10/Oct/2023:13:55:36 -0700] \"GET / HTTP/1.1\" 200", "none"),
        ("ssh into {V} and restart the service", "context"),
    ],
    "PASSPORT": [
        ("Passport No. {V}", "label"), ("She travelled on passport number {V}.", "label"),
        ("passport: {V}, expires {DATE}", "label"), ("Document number {V} was issued in {CITY}.", "context"),
    ],
    "SSN": [
        ("SSN: {V}", "label"), ("His social security number is {V}.", "label"), ("{V}", "none"),
        ("Taxpayer ID {V} was entered on line 3.", "label"), ("The form lists {V} as the applicant's number.", "context"),
    ],
    "PERSON": [
        ("{V} said the company would appeal the ruling.", "context"), ("Plaintiff {V} filed a complaint on {DATE}.", "role"),
        ("Defendant {V} was represented by counsel.", "role"), ("The motion was heard before Judge {V}.", "role"),
        ("Attorney {V} argued for the appellant.", "role"), ("According to {V}, the shipment arrived late.", "context"),
        ("{V}, of {CITY}, was taken to hospital.", "none"), ("Please contact {V} for details.", "context"),
        ("Dear {V},", "context"), ("Name: {V}", "label"), ("Signed by {V}", "label"), ("{V} and {N2} met in {CITY}.", "none"),
        ("Witness {V} testified that she saw the car.", "role"), ("Patient {V} was admitted on {DATE}.", "role"),
        ("Thanks to {V} for reviewing the draft.", "context"), ("{V}", "none"),
    ],
    "ADDRESS": [
        ("She lives at {V}.", "context"), ("Ship to: {V}", "label"), ("Address: {V}", "label"),
        ("The office moved to {V} last year.", "context"), ("{V}", "none"),
    ],
}

ZH = {
    "PHONE": [
        ("联系电话：{V}", "label"), ("请拨打{V}咨询。", "context"), ("手机号{V}", "label"), ("我的手机是{V}，有事打我电话。", "context"),
        ("如有疑问请致电{V}。", "context"), ("报名电话{V}（工作日9:00-17:00）", "label"), ("{V}", "none"),
        ("他留下的号码是{V}，一直无人接听。", "context"), ("电话{V}", "label"), ("客户的手机{V}已停机。", "label"),
    ],
    "ID_NUMBER": [
        ("身份证号码：{V}", "label"), ("公民身份号码{V}", "label"), ("该被告人身份证号{V}，户籍地{CITY}。", "label"),
        ("证件号{V}", "label"), ("{V}", "none"), ("持身份证{V}办理了入住手续。", "label"), ("请核对{V}是否正确。", "context"),
    ],
    "BANK_CARD": [
        ("银行卡号：{V}", "label"), ("请将款项转入{V}。", "context"), ("卡号{V}", "label"), ("{V}", "none"),
        ("两张卡中，{V}是工资卡。", "context"), ("收款账号：{V}，开户行：{BANK}", "label"),
    ],
    "EMAIL": [
        ("邮箱：{V}", "label"), ("简历请发送至{V}。", "context"), ("联系邮箱{V}", "label"), ("{V}", "none"),
        ("有问题可以发邮件到{V}，我们会尽快回复。", "context"),
    ],
    "IP": [
        ("登录IP：{V}", "label"), ("服务器地址为{V}。", "context"), ("来自{V}的请求被拦截。", "context"), ("{V}", "none"),
        ("该账号于{DATE}在{V}登录。", "context"),
    ],
    "PASSPORT": [
        ("护照号码：{V}", "label"), ("持护照{V}入境。", "label"), ("{V}", "none"), ("旅客证件号{V}，有效期至{DATE}。", "label"),
    ],
    "PERSON": [
        ("{V}今日复诊，病情稳定。", "none"), ("患者{V}，因胸痛入院。", "label"), ("联系人{V}表示，货物已经发出。", "label"),
        ("{V}说，明天再来。", "context"), ("据{V}介绍，该项目已完成八成。", "context"), ("{V}和{N2}是大学同学。", "none"),
        ("我叫{V}，来自{CITY}。", "context"), ("{V}老师讲得很好。", "title"), ("感谢{V}先生的支持。", "title"),
        ("{V}女士于{DATE}办理了手续。", "title"), ("收件人：{V}", "label"), ("负责人{V}", "label"), ("{V}", "none"),
        ("原告：{V}，男，{DATE}出生，汉族，住{CITY}。", "role"), ("被告：{V}，女，{DATE}出生，住{CITY}。", "role"),
        ("被告人{V}犯盗窃罪，判处有期徒刑一年。", "role"), ("上诉人（原审被告）：{V}。", "role"),
        ("委托诉讼代理人：{V}，{ORG}律师。", "role"), ("辩护人{V}提出的辩护意见，本院予以采纳。", "role"),
        ("审判长　{V}", "role"), ("审判员　{V}", "role"), ("人民陪审员　{V}", "role"), ("书记员　{V}", "role"),
        ("法官助理　{V}", "role"), ("证人{V}出庭作证。", "role"), ("第三人{V}未到庭参加诉讼。", "role"),
        ("申请人{V}与被申请人{N2}民间借贷纠纷一案，本院于{DATE}立案。", "role"),
    ],
    "ADDRESS": [
        ("住{V}。", "context"), ("地址：{V}", "label"), ("我家住在{V}，欢迎来玩。", "context"), ("收货地址：{V}", "label"),
        ("公司位于{V}。", "context"), ("{V}发生一起交通事故。", "none"), ("请将材料寄到{V}。", "context"), ("{V}", "none"),
    ],
}
