import math
import re

import numpy as np
import pytest
import torch

from bessemer.config import DataConfig, JobConfig, describe, load_config, to_toml
from bessemer.tokens.composition import compose, reweight
from bessemer.tokens.mixture import DomainLosses, MixtureLoader, build_loader
from bessemer.tokens.shards import ShardWriter, TokenDataset
from bessemer.errors import BessemerError, ConfigError

EOS = 0
# Each domain's tokens come from its own id range, so a sample's tokens say which domain they came from.
RANGES = {"a": (10, 100), "b": (100, 200), "c": (200, 300), "d": (300, 400)}
SIZES = {"a": 300, "b": 60, "c": 4}  # documents: c is tiny and is read many times over (upsampled)


def make_docs(seed=0, sizes=SIZES):
    rng = np.random.default_rng(seed)
    docs = [(name, rng.integers(*RANGES[name], size=int(rng.integers(0, 40))).tolist())
            for name, n in sizes.items() for _ in range(n)]
    return [docs[i] for i in rng.permutation(len(docs))]  # domains interleaved in the shards


def write(path, docs, shard_tokens=500):
    w = ShardWriter(path, vocab_size=1000, eos_id=EOS, shard_tokens=shard_tokens)
    for name, tokens in docs:
        w.add(tokens, name)
    return TokenDataset(w.close())


@pytest.fixture(scope="module")
def docs():
    return make_docs()


@pytest.fixture(scope="module")
def dataset(docs, tmp_path_factory):
    return write(tmp_path_factory.mktemp("mix") / "ds", docs)


def data_cfg(**kw) -> DataConfig:
    cfg = DataConfig(**{"domains": {"a": 0.5, "b": 0.3, "c": 0.2}, **kw})
    cfg.validate()
    return cfg


def loader(dataset, cfg=None, global_batch=64, micro_batch=16, seq_len=15, **kw) -> MixtureLoader:
    return MixtureLoader([dataset], cfg or data_cfg(), seq_len, global_batch, micro_batch, seed=3, **kw)


def domain_of(sample: np.ndarray) -> str | None:
    """The one domain whose id range holds every non-EOS token of the sample (None for all-EOS)."""
    found = {name for t in sample[sample != EOS] for name, (lo, hi) in RANGES.items() if lo <= t < hi}
    assert len(found) <= 1, f"sample mixes domains {found}: {sample}"
    return found.pop() if found else None


def domain_stream(docs, name):
    return np.array([t for d, tokens in docs if d == name for t in [*tokens, EOS]])


def step_batches(ld: MixtureLoader, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per step: the samples (G, T+1) of this rank and their domain indices."""
    out = []
    for _ in range(steps):
        samples, domains = [], []
        for _ in range(ld.accum_steps):
            x, y = ld.next_batch()
            samples.append(torch.cat([x, y[:, -1:]], dim=1).numpy())
            domains.append(ld.last_domains.numpy())
        out.append((np.concatenate(samples), np.concatenate(domains)))
    return out


def test_every_batch_of_1000_holds_each_domain_within_2_points_and_upsamples_the_small_one(dataset, docs):
    weights = {"a": 0.5, "b": 0.3, "c": 0.2}
    ld = loader(dataset)
    names = ld.domains
    counts = np.zeros(3, dtype=np.int64)
    read = {n: [] for n in names}  # each domain's samples in stream order
    for step in range(1, 1001):
        [(samples, domains)] = step_batches(ld, 1)
        for sample, d in zip(samples, domains):
            assert domain_of(sample) in (names[d], None)
            read[names[d]].append(sample)
        batch_counts = np.bincount(domains, minlength=3)
        tokens = batch_counts * samples.shape[1]  # domain-pure samples: token share = sample share
        for d, name in enumerate(names):
            assert abs(tokens[d] / tokens.sum() - weights[name]) <= 0.02, (step, name, batch_counts)
            assert ld.step_metrics()["domain_tokens_share"][name] == round(batch_counts[d] / 64, 6)
        counts += batch_counts
        # The carried rounding error keeps the totals within one sequence of the ideal.
        assert np.all(np.abs(counts - step * 64 * np.array([0.5, 0.3, 0.2])) < 1), (step, counts)
    for d, name in enumerate(names):  # each epoch of a domain draws each of its sequences once, shuffled
        stream, n = domain_stream(docs, name), ld.num_sequences[d]
        sequences = {tuple(np.take(stream, np.arange(k * 16, k * 16 + 16), mode="wrap")): k for k in range(n)}
        got = [sequences[tuple(s)] for s in read[name]]
        for e in range(len(got) // n):
            assert sorted(got[e * n:(e + 1) * n]) == list(range(n)), (name, e)
        if n > 2:
            assert got[:n] != list(range(n)) and got[:n] != got[n:2 * n], name
    epochs = ld.domain_epochs()
    assert epochs["c"] > 10 * epochs["a"] > 10  # c, the smallest, started over far more often
    assert ld.step_metrics()["domain_epochs"] == epochs


def test_ranks_and_micro_batches_see_a_mix(dataset):
    ld = loader(dataset, global_batch=64, micro_batch=8)
    for samples, domains in step_batches(ld, 20):
        for mb in domains.reshape(-1, 8):  # every micro-batch of 8 holds each domain's share to ~1 sequence
            counts = np.bincount(mb, minlength=3)
            assert np.all(np.abs(counts - 8 * np.array([0.5, 0.3, 0.2])) <= 1.6 + 1e-9), mb


@pytest.mark.parametrize("steps, micro", [(7, 0), (7, 1), (0, 2)])
def test_resume_continues_the_exact_sequence_of_batches(dataset, tmp_path, steps, micro):
    cfg = data_cfg(weight_schedule=["9: a=0.2, b=0.2, c=0.6"], reweight="loss", reweight_eta=0.3, tolerance=1 / 32)
    kw = {"global_batch": 32, "micro_batch": 8}
    a = loader(dataset, cfg, **kw)
    for s in range(steps):
        step_batches(a, 1)
        a.update_losses({"a": 3.0 + s % 3, "b": 4.0, "c": 2.0})
    for _ in range(micro):
        a.next_batch()
    state = a.state_dict()
    if steps:  # the position is (epoch, position) per domain: mid-epoch, mid-permutation
        assert any(0 < p < n for p, n in zip(state["positions"].values(), a.num_sequences))
        assert state["epochs"]["c"] > 0  # the small domain is past its first epoch
    torch.save(state, tmp_path / "state.pt")  # as the checkpointer does
    b = loader(dataset, cfg, **kw)
    b.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    for s in range(12):
        for _ in range(a.accum_steps - (micro if s == 0 else 0)):
            xa, ya = a.next_batch()
            xb, yb = b.next_batch()
            assert torch.equal(xa, xb) and torch.equal(ya, yb) and torch.equal(a.last_domains, b.last_domains)
        assert a.step_metrics() == b.step_metrics()
        a.update_losses({"a": 1.0 + s, "b": 2.0, "c": 0.5})
        b.update_losses({"a": 1.0 + s, "b": 2.0, "c": 0.5})
    assert a.state_dict() == b.state_dict()


def test_union_of_data_parallel_ranks_is_the_single_rank_batch(dataset):
    single = step_batches(loader(dataset, global_batch=32, micro_batch=8), 5)
    ranks = [step_batches(loader(dataset, global_batch=32, micro_batch=2, dp_rank=r, dp_world=4), 5)
             for r in range(4)]
    for step, (samples, domains) in enumerate(single):
        assert np.array_equal(np.concatenate([r[step][0] for r in ranks]), samples)
        assert np.array_equal(np.concatenate([r[step][1] for r in ranks]), domains)


def test_weight_schedule_switches_at_the_step(dataset):
    ld = loader(dataset, data_cfg(weight_schedule=["5: a=1, b=1"]), global_batch=20, micro_batch=20)
    shares = []
    for _ in range(8):
        [(_, domains)] = step_batches(ld, 1)
        shares.append(np.bincount(domains, minlength=3) / 20)
        assert ld.step_metrics()["domain_weights"] == dict(zip("abc", [0.5, 0.5, 0.0] if len(shares) > 5
                                                                      else [0.5, 0.3, 0.2]))
    assert all(np.allclose(s, [0.5, 0.3, 0.2]) for s in shares[:5])
    assert all(np.allclose(s, [0.5, 0.5, 0.0]) for s in shares[5:])


def test_reweighting_moves_weight_toward_the_high_loss_domain_deterministically(dataset):
    cfg = data_cfg(reweight="loss", reweight_eta=0.5, reweight_min=0.05, tolerance=1 / 16)
    runs = []
    for _ in range(2):
        ld = loader(dataset, cfg, global_batch=16, micro_batch=16)
        history = []
        for _ in range(30):
            step_batches(ld, 1)
            ld.update_losses({"a": 2.0, "b": 5.0, "c": 2.0})  # b is the hardest domain
            history.append(list(ld.weights))
        runs.append(history)
    assert runs[0] == runs[1]
    first, last = runs[0][0], runs[0][-1]
    assert first[1] > 0.3 and last[1] > 0.85  # b gained weight...
    assert math.isclose(sum(last), 1) and min(last) == pytest.approx(0.05)  # ...the others kept the floor
    assert step_batches(ld, 1)[0][1].tolist().count(1) >= 13  # and the batches follow the weights


def test_reweight_and_compose_are_pure_functions():
    w = reweight([0.5, 0.3, 0.2], {0: 1.0, 1: 3.0}, eta=1.0, floor=0.0)  # c has no loss: counted as the mean
    assert w[1] > 0.3 and w[0] < 0.5 and math.isclose(sum(w), 1)
    assert reweight([0.7, 0.3, 0.0], {0: 1.0, 1: 2.0, 2: 9.0}, 1.0, 0.1)[2] == 0.0  # a zero weight stays 0
    counts, lag = compose([0.5, 0.3, 0.2], 64, [0.0, 0.0, 0.0])
    assert sum(counts) == 64 and math.isclose(sum(lag), 0, abs_tol=1e-12)


def test_data_paths_join_the_pools(dataset, docs, tmp_path):
    extra_docs = make_docs(seed=1, sizes={"c": 3, "d": 2})
    extra = write(tmp_path / "extra", extra_docs)
    cfg = data_cfg(domains={"c": 1.0, "d": 1.0}, paths=[str(extra.path)], tolerance=0.5)
    ld = build_loader(cfg, dataset, 15, 4, 4)
    assert isinstance(ld, MixtureLoader)
    assert [s.num_docs for s in ld.streams] == [4 + 3, 2]
    samples, domains = step_batches(ld, 1)[0]
    stream = np.concatenate([domain_stream(docs, "c"), domain_stream(extra_docs, "c")])
    first_c = samples[domains == 0][0]
    assert any(np.array_equal(first_c, np.take(stream, np.arange(k, k + 16), mode="wrap"))
               for k in range(0, stream.size, 16))


def test_no_domains_is_the_plain_token_loader(dataset):
    from bessemer.tokens.loader import TokenLoader

    assert type(build_loader(DataConfig(), dataset, 15, 4, 4)) is TokenLoader


def test_unknown_domain_names_the_valid_ones(dataset):
    with pytest.raises(BessemerError, match=r"unknown domain\(s\) 'web'; the data at .* has \w, \w, \w"):
        loader(dataset, data_cfg(domains={"a": 1.0, "web": 1.0}))


def test_checkpoint_of_another_mixture_or_data_is_refused(dataset):
    state = loader(dataset).state_dict()
    with pytest.raises(BessemerError, match="domains a, b, c"):
        loader(dataset, data_cfg(domains={"a": 1.0, "b": 1.0})).load_state_dict(state)
    with pytest.raises(BessemerError, match="no data.domains"):
        loader(dataset).load_state_dict({"tokens": 0, "micro": 0, "stream_len": 10})
    # Changed weights, same domains: the new weights take over from the saved position.
    other = loader(dataset, data_cfg(domains={"a": 0.25, "b": 0.5, "c": 0.25}))
    state["positions"]["a"] = 45
    other.load_state_dict(state)
    assert other.weights == [0.25, 0.5, 0.25] and other.drawn[0] == 45


def test_domain_losses_are_means_per_domain():
    acc = DomainLosses(["a", "b", "c"], torch.device("cpu"))
    acc.add(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0, 0, 2]))
    acc.add(torch.tensor([3.0]), torch.tensor([0]))
    assert acc.reduce(holds=True, distributed=False) == {"a": 2.0, "c": 4.0}


# ---------------------------------------------------------------------------------------------- config

def test_domains_from_toml_table_and_command_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[data]\npath = "x"\nweight_schedule = ["100: web=1, code=1"]\n\n'
                    '[data.domains]\nweb = 0.45\ncode = 0.30\n"prose-zh" = 0.25\n\n[train]\nglobal_batch = 100\n'
                    'micro_batch = 10\n')
    cfg = load_config(path)
    assert cfg.data.domains == {"web": 0.45, "code": 0.3, "prose-zh": 0.25}
    cfg = load_config(path, ["--data.domains=web:0.45,code:0.3", "--data.weight_schedule=[\"5: web=1\"]"])
    assert cfg.data.domains == {"web": 0.45, "code": 0.3} and cfg.data.weight_schedule == ["5: web=1"]
    assert load_config(path, ["--data.domains={web = 1, code = 3}"]).data.domains == {"web": 1.0, "code": 3.0}
    again = tmp_path / "again.toml"
    again.write_text(to_toml(cfg))
    assert load_config(again) == cfg
    assert "data.domains (table of str to float, default {})" in describe()


def test_resolved_toml_round_trips_an_empty_and_a_quoted_table(tmp_path):
    cfg = JobConfig()
    cfg.data.domains = {"a b": 1.0, 'q"x': 2}
    for c in (JobConfig(), cfg):
        (tmp_path / "c.toml").write_text(to_toml(c))
        assert load_config(tmp_path / "c.toml", ["--train.global_batch=100", "--train.micro_batch=10"]).data \
            == c.data


@pytest.mark.parametrize("overrides, message", [
    (["--data.domains=web:-1,code:1"], "data.domains.web: a weight must be a number >= 0"),
    (["--data.domains=web:0,code:0"], "the weights must not all be 0"),
    (["--data.domains=web"], "expected name:value items"),
    (["--data.domains=web:x"], "data.domains.web: expected a number"),
    (["--data.domains=web:1", "--data.weight_schedule=[\"5: code=1\"]"], "'code' is not a domain of data.domains"),
    (["--data.domains=web:1", "--data.weight_schedule=x"], "expected \"STEP: name=w, name=w\""),
    (["--data.reweight=loss"], "data.reweight changes a domain mixture: set data.domains too"),
    (["--data.domains=web:0.5,code:0.3,zh:0.2"], ("data.tolerance 0.02 cannot be met with train.global_batch 8: "
                                                  "a domain's share moves in steps of 1/8")),
    (["--data.domains=web:0.5,code:0.5", "--data.reweight=loss"], "needs train.global_batch >= 1 / tolerance = 50"),
])
def test_mixture_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, overrides)


def test_tolerance_check_is_exact_for_known_weights():
    load_config(None, ["--data.domains=web:0.5,code:0.25,zh:0.25"])  # 4, 2, 2 of 8: exact
    load_config(None, ["--data.domains=web:0.5,code:0.3,zh:0.2", "--data.tolerance=0.075"])  # 2.4 of 8: 0.075
    load_config(None, ["--data.domains=web:0.5,code:0.3,zh:0.2", "--train.global_batch=64",
                       "--train.micro_batch=8"])
