"""`bessemer tokenizer train|encode|stats`. No torch; tokenizers and jieba load only when a command runs."""

import argparse
import json
import os
import sys

from bessemer.errors import BessemerError

KINDS = ("bpe", "sentencepiece")  # common.KINDS; repeated so that building the parser imports nothing
FORMATS = ("auto", "jsonl", "parquet", "text")  # inputs.FORMATS


def _count(text: str) -> int:
    """1024, 32k, 64M."""
    t = text.strip().lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit() or int(digits) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 such as 32000 or 64M, got {text!r}")
    return int(digits) * scale


def _fraction(text: str) -> float:
    """0.01, 0 (the share of documents held out)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1) such as 0.01, got {text!r}")
    return value


def _fields(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="how to read the inputs (default auto: .parquet, .txt, else JSONL by suffix)")
    p.add_argument("--text-field", default="text", help="JSON field with the text (dotted path; default text)")
    p.add_argument("--domain-field", default="metadata.domain",
                   help="JSON field with the document's domain (dotted path; default metadata.domain)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tokenizer", help="train a domain-aware tokenizer, encode documents to token shards, "
                                         "measure compression per domain",
                       description="Inputs (CLEAN) are what `bessemer data` reads and writes: JSONL (.jsonl, .gz, "
                                   ".zst), Parquet or .txt files, directories or globs of them, local or fsspec URLs. "
                                   "See docs/tokenizer.md.")
    actions = p.add_subparsers(dest="tokenizer_command", required=True, metavar="ACTION")

    t = actions.add_parser("train", help="learn a byte-level BPE (or Unigram) vocabulary; writes DIR/tokenizer.json",
                           description="Stream the documents once and learn the vocabulary. Pre-tokenization keeps "
                                       "code whitespace, symbols, numerals and 第/条-style ordinals apart "
                                       "(docs/tokenizer.md).")
    t.add_argument("--input", required=True, action="append", metavar="CLEAN", help="repeatable")
    t.add_argument("--vocab-size", required=True, type=_count, metavar="N", help="entries, special tokens included")
    t.add_argument("--output", required=True, metavar="DIR")
    t.add_argument("--kind", choices=KINDS, default="bpe",
                   help="bpe: byte-level BPE (default); sentencepiece: Unigram + Metaspace with byte fallback")
    t.add_argument("--jieba", action="store_true",
                   help="learn merges only inside jieba words of Chinese text (training only; see docs)")
    t.add_argument("--domains", default="", metavar="A,B,C",
                   help="domain tags to reserve (<|domain:A|>); domains found in the input are added too")
    _fields(t)

    e = actions.add_parser("encode", help="documents -> token shards (parallel, shuffled, resumable, appendable)",
                           description="Encode documents into token shards (tokens/shards.py). Each worker reads, "
                                       "tokenizes and writes whole input files; documents are shuffled by --seed "
                                       "across --buckets shards and within each shard. Rerunning after an "
                                       "interruption continues; new inputs into an existing directory are appended.")
    e.add_argument("--tokenizer", required=True, metavar="DIR")
    e.add_argument("--input", required=True, action="append", metavar="CLEAN", help="repeatable")
    e.add_argument("--output", required=True, metavar="SHARDS")
    e.add_argument("--domain", default=None, metavar="NAME",
                   help="label every document with NAME (default: each document's --domain-field, else 'default')")
    e.add_argument("--workers", type=_count, default=os.cpu_count() or 1, metavar="N",
                   help="encoding processes, each taking whole input files (default: one per CPU)")
    e.add_argument("--shard-tokens", type=_count, default=1 << 24, metavar="N",
                   help="tokens per shard before it is written (default 16M); a worker holds at most "
                        "buckets x N tokens")
    e.add_argument("--buckets", type=_count, default=4, metavar="B",
                   help="shards each input file's documents are spread over by a seeded hash (default 4)")
    e.add_argument("--seed", type=int, default=0, help="seed of the document order (default 0)")
    e.add_argument("--tag-domain", action="store_true", help="put <|domain:NAME|> before each document")
    e.add_argument("--heldout", type=_fraction, default=0.0, metavar="FRACTION",
                   help="write this share of the documents (chosen by a keyed hash of their text) to "
                        "SHARDS/heldout/ instead of the training shards (default 0: none)")
    e.add_argument("--heldout-seed", type=int, default=None, metavar="N",
                   help="key of the held-out hash (default: --seed); every run into SHARDS must use the same")
    e.add_argument("--no-progress", action="store_true", help="no progress bar (there is none off a terminal)")
    _fields(e)

    s = actions.add_parser("stats", help="bytes/token, tokens/word, byte-fallback rate per domain; longest tokens")
    s.add_argument("--tokenizer", required=True, metavar="DIR")
    s.add_argument("--input", required=True, metavar="CLEAN")
    s.add_argument("--domain", default=None, metavar="NAME", help="count every document as NAME")
    s.add_argument("--max-docs", type=int, default=0, metavar="N", help="at most N documents per domain (0: all)")
    s.add_argument("--json", action="store_true")
    _fields(s)


def _report_bad(summary: str) -> None:
    if summary:
        print(f"bessemer tokenizer: {summary}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.tokenizer_command == "train":
        from bessemer.tokenizer.common import META_FILE
        from bessemer.tokenizer.inputs import BadRecords, list_sources, read_documents
        from bessemer.tokenizer.train import NoDocuments, train_tokenizer

        bad = BadRecords()
        list_sources(args.input, args.format)  # a missing input fails now, not once training has started

        def docs():
            yield from read_documents(args.input, bad, args.text_field, args.domain_field, args.format)

        domains = [d.strip() for d in args.domains.split(",") if d.strip()]
        try:
            path = train_tokenizer(docs(), args.vocab_size, args.output, args.kind, args.jieba, domains,
                                   extra_meta={"inputs": args.input})
        except NoDocuments as e:
            raise BessemerError(f"{e} in {', '.join(args.input)}" + (f"; {bad.summary()}" if bad.total else "")) \
                from None
        _report_bad(bad.summary())
        meta_path = path.with_name(META_FILE)
        meta = json.loads(meta_path.read_text())
        meta["corpus"]["bad_lines"] = bad.total  # known only once the stream is exhausted
        meta_path.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        print(f"{path}: {meta['kind']}, vocab {meta['vocab_size']:,}, domains {', '.join(meta['domains']) or '-'}; "
              f"trained on {meta['corpus']['docs']:,} documents ({meta['corpus']['bytes'] / 1e6:.1f} MB)")
        return 0
    if args.tokenizer_command == "encode":
        from bessemer.tokenizer.encode import EncodeSettings, encode_inputs

        settings = EncodeSettings(domain=args.domain, shard_tokens=args.shard_tokens, buckets=args.buckets,
                                  seed=args.seed, text_field=args.text_field, domain_field=args.domain_field,
                                  tag_domain=args.tag_domain, input_format=args.format, heldout=args.heldout,
                                  heldout_seed=args.heldout_seed)
        try:
            result = encode_inputs(args.tokenizer, args.input, args.output, settings, args.workers,
                                   progress=not args.no_progress)
        except KeyboardInterrupt:
            print("bessemer tokenizer: interrupted; the shards written so far are kept, rerun the same command "
                  "to continue", file=sys.stderr)
            return 130
        _report_bad(result.bad.summary())
        for warning in result.warnings:
            print(f"bessemer tokenizer: warning: {warning}", file=sys.stderr)
        print(result.summary())
        return 0
    if args.tokenizer_command == "stats":
        from bessemer.tokenizer.stats import format_stats, tokenizer_stats

        stats = tokenizer_stats(args.tokenizer, args.input, args.text_field, args.domain_field, args.domain,
                                args.max_docs, input_format=args.format)
        _report_bad(stats["bad_lines_summary"])
        print(json.dumps(stats, indent=1, ensure_ascii=False) if args.json else format_stats(stats))
        return 0
    raise AssertionError(args.tokenizer_command)
