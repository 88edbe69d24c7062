"""Build the small bundled M3-style tokenizer: `python -m m3agent.engine.m3.build_tokenizer`.

A byte-level BPE (vocab <= 8192) trained on a corpus generated here from fixed word lists with
a seeded RNG, so every run writes the same `engine/m3/data/tokenizer.json`. Newlines are
pre-tokenised on their own, so a prompt that ends in `\\n` (the adaptive generation prefix)
tokenises as a prefix of any continuation. M3's added tokens follow the learned vocabulary:
special ones (dropped by skip_special_tokens) and the non-special NS / think markers.
It exists for tests, demos and `model init-tiny`; real checkpoints bring their own tokenizer.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from .tokens import BOS, EOS, NON_SPECIAL_ADDED_TOKENS, SPECIAL_TOKENS

VOCAB_SIZE = 8192
SEED = 20260601

_WORDS = """the of and to a in is it you that he was for on are with as I his they be at one
have this from or had by hot word but what some we can out other were all there when up use
your how said an each she which do their time if will way about many then them write would
like so these her long make thing see him two has look more day could go come did number sound
no most people my over know water than call first who may down side been now find any new work
part take get place made live where after back little only round man year came show every good
me give our under name very through just form sentence great think say help low line differ
turn cause much mean before move right boy old too same tell does set three want air well also
play small end put home read hand port large spell add even land here must big high such follow
act why ask men change went light kind off need house picture try us again animal point mother
world near build self earth father file files code function class method test tests error value
values list string number integer boolean object array path directory repository command shell
output input return result results change changes commit branch merge diff patch line lines
fix bug issue run runs running build install package module import export config settings
user assistant tool tools call calls request response model prompt token tokens cache context
server client engine agent session turn message messages stream delta reasoning content answer
plan step steps check let need should will might first next then finally because however""".split()

_CODE = """def class return import from as if elif else for while try except finally with yield
lambda None True False and or not in is pass break continue raise assert async await self cls
print len range str int float dict list tuple set bool open path json os sys re time typing
Any Optional Sequence Iterator dataclass field property staticmethod classmethod super init
__init__ __name__ __main__ main args kwargs name value key keys items result text data config
logger error message path file line lines count index start end size offset buffer state mode
torch tensor shape device dtype float32 bfloat16 cuda numpy np x y z i j k n m ok err fn cb
const let var function async export default interface type string number boolean null undefined
git status diff log add commit push pull checkout grep sed awk cat ls cd mkdir rm cp mv echo
pytest pip python npm cargo make cmake docker curl""".split()

_PUNCT = "( ) [ ] { } : ; , . = == != -> += - + * / % < > <= >= ' \" # @ _ & | ` ...".split()

_MARKUP = """<tool_call> </tool_call> <invoke name=" </invoke> <item> </item> <response> </response>
<tool> </tool> <tools> </tools> <command> </command> <path> </path> <content> </content>
<div> </div> <span> </span> <p> </p> <!-- --> ``` ```python ```bash""".split()

_SYLLABLES = """ab ac ad al am an ap ar as at be bi bo ca ce ch co con cu da de di do du el em en
er es ex fa fe fi fo ga ge gi go ha he hi ho id il im in io ir is it ka la le li lo lu ma me mi
mo mu na ne ni no nu ob on op or ot pa pe pi po pre pro qu ra re ri ro ru sa se sh si so st su
ta te th ti to tr tu ul um un ur us va ve vi vo wa we wi wo ya yo za""".split()
_SUFFIXES = ["", "", "s", "ed", "ing", "er", "ion", "ly", "able", "ment", "ness", "ize"]


def _identifier(rng: random.Random) -> str:
    """A made-up name in one of the casings code uses (so BPE learns sub-word pieces)."""
    words = [
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) + rng.choice(_SUFFIXES)
        for _ in range(rng.randint(1, 3))
    ]
    style = rng.randrange(4)
    if style == 0:
        return "_".join(words)
    if style == 1:
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == 2:
        return "".join(w.capitalize() for w in words)
    return "-".join(words)


def corpus(lines: int = 40000, seed: int = SEED) -> Iterator[str]:
    """Deterministic pseudo-text: English-like sentences, code lines, JSON, markup, numbers."""
    rng = random.Random(seed)
    vocab = _WORDS + [w + sfx for w in _WORDS[:200] for sfx in ("s", "ed", "ing")]
    for n in range(lines):
        kind = n % 6
        if kind == 0:
            words = [rng.choice(vocab) for _ in range(rng.randint(4, 14))]
            yield " ".join(words).capitalize() + rng.choice([".", ".", "?", "!", ":"]) + "\n"
        elif kind == 1:
            indent = " " * (4 * rng.randint(0, 3))
            parts = [
                rng.choice(_CODE) if rng.random() < 0.6 else _identifier(rng)
                for _ in range(rng.randint(2, 7))
            ]
            glue = [
                rng.choice([" ", "(", ".", ", ", " = ", ")", ": ", "[", "]", " + "]) for _ in parts
            ]
            yield indent + "".join(p + g for p, g in zip(parts, glue, strict=True)) + "\n"
        elif kind == 2:
            obj = {
                rng.choice(_CODE) if rng.random() < 0.5 else _identifier(rng): rng.choice(
                    [rng.randint(0, 9999), rng.choice(vocab), True, None, [rng.randint(0, 99)]]
                )
                for _ in range(rng.randint(1, 4))
            }
            yield json.dumps(obj) + "\n"
        elif kind == 3:
            tag = rng.choice(_MARKUP)
            yield f"{tag}{rng.choice(vocab)} {_identifier(rng)}{rng.choice(_PUNCT)}\n"
        elif kind == 4:
            path = "/".join(_identifier(rng) for _ in range(rng.randint(1, 3)))
            ext = rng.choice([".py", ".md", ".json", ".ts", ".rs", ".txt", ".toml", ".sh"])
            yield f"{rng.choice(_CODE)} {path}{ext}:{rng.randint(1, 999)}: {rng.choice(vocab)}\n"
        else:
            nums = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(4))
            yield f"{nums} {rng.choice(_PUNCT)}{rng.choice(_PUNCT)} {rng.choice(vocab)}\n"


def train_tokenizer(vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    if not 256 + len(SPECIAL_TOKENS) < vocab_size <= 65536:
        raise ValueError(f"vocab_size must be in 266..65536, not {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS) - len(NON_SPECIAL_ADDED_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED_TOKENS]
    )
    return tok


def tokenizer_config(tok: Tokenizer) -> dict[str, object]:
    """An HF tokenizer_config.json for `tok` (flags which added tokens are special)."""
    decoder = tok.get_added_tokens_decoder()
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 20,
        "added_tokens_decoder": {
            str(i): {
                "content": t.content,
                "special": t.special,
                "normalized": False,
                "lstrip": False,
                "rstrip": False,
                "single_word": False,
            }
            for i, t in sorted(decoder.items())
        },
    }


def build_tokenizer_json(path: str | Path, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train the tokenizer and write it. `path` a directory: tokenizer.json and
    tokenizer_config.json go inside it (a checkpoint directory); otherwise `path` is the file.
    Returns the tokenizer.json path. Same inputs, same bytes."""
    p = Path(path)
    tok = train_tokenizer(vocab_size)
    target = p / "tokenizer.json" if p.is_dir() else p
    target.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(target), pretty=False)
    if p.is_dir():
        cfg = json.dumps(tokenizer_config(tok), indent=2, ensure_ascii=False) + "\n"
        (p / "tokenizer_config.json").write_text(cfg, encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else Path(__file__).parent / "data" / "tokenizer.json"
    out = build_tokenizer_json(target)
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
