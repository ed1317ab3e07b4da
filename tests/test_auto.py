"""The default start: the shipped model, or online mode where the model does not fit the input."""

import pytest
import torch

from conftest import CORPORA, corpus, run_cli
from dyncompress.api import Compressor, compress, decompress
from dyncompress.auto import (
    AUTO_MIN,
    CJK_KNOWN,
    CJK_MODEL,
    CJK_PRIOR,
    CJK_START,
    ENGLISH_WORDS,
    FOREIGN_LARGE,
    FOREIGN_MODEL,
    FOREIGN_PRIOR,
    LARGE_MODEL,
    ONLINE,
    ONLINE_ABOVE,
    PROBE_BYTES,
    choose_start,
    cjk_share,
    english_words,
    foreign_share,
    language_model,
    probe_bits,
)
from dyncompress.cli.batch import encode_plan
from dyncompress.cli.peers import round_trip
from dyncompress.config.levels import DEFAULT_LEVEL, DEFAULT_MODEL, DEFAULT_PRIOR, LARGE_LEVELS, LARGE_MIN
from dyncompress.config.settings import Settings
from dyncompress.format.container import parse_header

OBJ1 = corpus("calgary_obj1")  # 21,504 bytes of object code: unlike anything the model learned
TEXT = corpus("alice29.txt")[:AUTO_MIN]


def header_of(packed: bytes) -> dict:
    return parse_header(packed)[0]


def test_the_probe_keeps_the_model_for_text_and_chooses_online_for_object_code(model):
    start, online, bits = choose_start(model, TEXT, len(TEXT), {"level": 5})
    assert start is model and online == {} and 1.5 < bits < 3.0  # English: what it learned
    start, online, bits = choose_start(model, OBJ1, len(OBJ1), {})
    assert start is None and online == ONLINE and bits > ONLINE_ABOVE
    # the probe reads the first PROBE_BYTES only, and a sample's bits are its own, not a constant
    assert probe_bits(model, TEXT) == probe_bits(model, TEXT[:PROBE_BYTES]) != probe_bits(model, TEXT[5000:])


def test_text_in_another_language_starts_from_the_foreign_model_and_prior(model):
    """Spanish: the foreign model of the level's size (FOREIGN_LARGE at the default level, FOREIGN_MODEL
    at -5) with its prior."""
    spanish = corpus("quijote_8k.txt")
    assert foreign_share(spanish) > 0.01  # (accented letters)
    start, chosen, bits = choose_start(model, spanish, 100_000, {})
    assert start.name == FOREIGN_LARGE and chosen == {"prior": FOREIGN_PRIOR} and bits < ONLINE_ABOVE
    start, chosen, bits = choose_start(model, spanish, 100_000, {"level": 5})
    assert start.name == FOREIGN_MODEL != model.name and chosen == {"prior": FOREIGN_PRIOR} and bits < ONLINE_ABOVE
    large = language_model(LARGE_MODEL)  # English (no byte >= 128): the default's
    assert choose_start(model, TEXT, len(TEXT), {})[:2] == (large, {})
    for knobs in ({"experts": "orders,match"}, {"kinds": 0}, {"prior": ""}):  # the knobs choose the prior
        assert choose_start(model, spanish, 100_000, knobs)[1] == {}
    data = (spanish * 3)[:AUTO_MIN]  # (AUTO_MIN or more: probed)
    foreign = language_model(FOREIGN_LARGE)
    theta = foreign.theta.clone()
    packed = compress(data, threads=1)  # (its decode: test_payload's "foreign", the same bytes)
    assert header_of(packed)["settings"]["mix"]["prior"] == FOREIGN_PRIOR != DEFAULT_PRIOR
    assert header_of(packed)["model"]["name"] == FOREIGN_LARGE
    # the foreign model is loaded once and a coding does not change it
    assert language_model(FOREIGN_LARGE) is foreign and torch.equal(foreign.theta, theta)
    # it codes this Spanish smaller than the English model of its size would, with the same prior
    assert len(packed) < len(compress(data, model=LARGE_MODEL, threads=1, prior=FOREIGN_PRIOR))


def test_without_the_foreign_model_installed_the_default_model_starts_every_text(model, monkeypatch):
    from dyncompress import auto

    spanish = corpus("quijote_8k.txt")
    monkeypatch.setattr(auto, "FOREIGN_LARGE", "no-such-model")  # the smaller one in its place
    assert choose_start(model, spanish, 100_000, {})[0].name == FOREIGN_MODEL
    monkeypatch.setattr(auto, "FOREIGN_MODEL", "no-such-model")
    monkeypatch.setattr(auto, "CJK_MODEL", "no-such-model-either")
    monkeypatch.setattr(auto, "LARGE_MODEL", "nor-this-one")
    assert choose_start(model, TEXT, len(TEXT), {"level": 9})[:2] == (model, {})
    assert choose_start(model, spanish, 100_000, {})[:2] == (model, {"prior": FOREIGN_PRIOR})
    # Chinese then goes to the default model's probe, which sends it online
    assert choose_start(model, corpus("hongloumeng_6k.txt"), 100_000, {})[:2] == (None, ONLINE)


def test_the_default_level_and_above_start_english_from_the_large_model_and_decode(model):
    """-6 (the default) ... -9 start what the default model would start from LARGE_MODEL, for inputs of
    LARGE_MIN bytes or more whatever the probe says (the level chose it), and other European languages
    from FOREIGN_LARGE; lower levels and smaller inputs start from the default model."""
    from dyncompress import auto

    large = language_model(LARGE_MODEL)
    assert large is not None and large.shape.hidden > model.shape.hidden
    assert LARGE_LEVELS == {6, 7, 8, 9} and DEFAULT_LEVEL in LARGE_LEVELS
    start, chosen, bits = choose_start(model, TEXT, len(TEXT), {})
    assert start is large and chosen == {} and bits < probe_bits(model, TEXT)  # it knows English better
    assert choose_start(model, TEXT, len(TEXT), {"level": 5})[0] is model
    assert choose_start(model, TEXT, len(TEXT), {"level": 9})[0] is large
    # below AUTO_MIN (no probe) from LARGE_MIN on, and where the size is not known yet
    assert choose_start(model, TEXT[:LARGE_MIN], LARGE_MIN, {"level": 9}) == (large, {}, None)
    assert choose_start(model, TEXT[:LARGE_MIN], None, {"rule": "rms"}) == (large, {}, None)
    assert choose_start(model, TEXT[:1000], LARGE_MIN - 1, {}) == (model, {}, None)
    # text with other languages' letters: the larger foreign model where its probe is clearly the lower,
    # else the large one (Wikipedia citing foreign names: the two probe it alike)
    spanish, wiki = corpus("quijote_8k.txt"), corpus("enwik8_3m_4k")
    assert foreign_share(spanish) > 0.01 and foreign_share(wiki) > 0.01
    ahead = auto.ENGLISH_AHEAD[LARGE_MODEL, FOREIGN_LARGE]
    start, chosen, bits = choose_start(model, spanish, 100_000, {"level": 9})
    assert start.name == FOREIGN_LARGE and chosen == {"prior": FOREIGN_PRIOR}
    assert bits < probe_bits(large, spanish) - ahead
    start, chosen, bits = choose_start(model, wiki, 100_000, {})
    assert start is large and chosen == {} and probe_bits(language_model(FOREIGN_LARGE), wiki) > bits + ahead
    assert choose_start(model, OBJ1, len(OBJ1), {"level": 9})[0] is None  # object code: online at -9 too
    data = TEXT[:LARGE_MIN]
    packed = compress(data, threads=1)
    assert header_of(packed)["model"]["name"] == LARGE_MODEL and decompress(packed) == data
    assert header_of(compress(data[:-1], threads=1))["model"]["name"] == DEFAULT_MODEL


def test_english_citing_foreign_names_starts_from_the_english_model_where_its_probe_is_clearly_lower(
    model, monkeypatch
):
    """Text with other languages' letters is probed with the foreign model and the English one; the
    English model starts it where its probe is lower by ENGLISH_AHEAD (at -5, the default model; the
    larger one at the default level: the test above)."""
    from dyncompress import auto

    wiki, spanish = corpus("enwik8_3m_4k"), corpus("quijote_8k.txt")
    foreign = language_model(FOREIGN_MODEL)
    assert foreign_share(wiki) > 0.01  # (Wikipedia citing Greek and Latin sources)
    english_bits, foreign_bits = probe_bits(model, wiki), probe_bits(foreign, wiki)
    assert english_bits < foreign_bits - auto.ENGLISH_AHEAD[DEFAULT_MODEL, FOREIGN_MODEL]
    five = {"level": 5}
    assert choose_start(model, wiki, 100_000, five) == (model, {}, english_bits)  # (the default's prior too)
    assert choose_start(model, spanish, 100_000, five)[0] is foreign  # (Spanish: the foreign model's probe is lower)
    # a lead smaller than the margin leaves the text to the foreign model
    monkeypatch.setitem(auto.ENGLISH_AHEAD, (DEFAULT_MODEL, FOREIGN_MODEL), foreign_bits - english_bits + 0.01)
    assert choose_start(model, wiki, 100_000, five) == (foreign, {"prior": FOREIGN_PRIOR}, foreign_bits)


def test_text_without_englishs_commonest_words_is_not_probed_with_the_english_model(model, monkeypatch):
    """Spanish prose starts from the foreign model even where the English model's probe would win by
    any margin; Wikipedia citing foreign names (its words English) is still probed."""
    from dyncompress import auto

    spanish, wiki = corpus("quijote_8k.txt"), corpus("enwik8_3m_4k")
    assert english_words(spanish) < ENGLISH_WORDS < english_words(wiki)
    assert english_words(b"the And OF to; that, with. " * 2) == 1.0 and english_words(b"") == 0.0
    for pair in auto.ENGLISH_AHEAD:
        monkeypatch.setitem(auto.ENGLISH_AHEAD, pair, -10.0)  # (the English probe always clearly ahead)
    assert choose_start(model, spanish, 100_000, {})[0].name == FOREIGN_LARGE
    assert choose_start(model, spanish, 100_000, {"level": 5})[0].name == FOREIGN_MODEL
    assert choose_start(model, wiki, 100_000, {})[0] is language_model(LARGE_MODEL)


@pytest.mark.parametrize("name", ["ja_manpages_6k.txt", "zh_manpages_6k.txt"])
def test_chinese_and_japanese_the_cjk_model_knows_start_from_it(model, name):
    """Manual pages (what the CJK model learned, not these pages): its start, adapted as online mode adapts."""
    text = corpus(name)
    assert cjk_share(text) > 0.5 and foreign_share(text) < 0.01
    start, chosen, bits = choose_start(model, text, 100_000, {})
    assert start.name == CJK_MODEL and chosen == {**CJK_START, "prior": CJK_PRIOR} and bits < CJK_KNOWN
    assert choose_start(model, text, 100_000, {"prior": "text5"})[1] == CJK_START  # the knobs choose the prior


def test_the_cjk_models_start_is_recorded_in_the_header_and_decodes():
    """The start above (Japanese: the header and the decoder do not depend on the language)."""
    data = (corpus("ja_manpages_6k.txt") * 3)[:AUTO_MIN]
    packed = compress(data, threads=1)
    header = header_of(packed)
    assert header["model"]["name"] == CJK_MODEL and header["settings"]["adapt"]["lr"] == CJK_START["lr"]
    assert decompress(packed) == data


@pytest.mark.parametrize("name", ["hongloumeng_6k.txt", "lowndes_6k.txt"])
def test_chinese_and_japanese_novels_the_cjk_model_knows_less_are_coded_online(model, name):
    text = corpus(name)
    assert cjk_share(text) > 0.7
    start, chosen, bits = choose_start(model, text, 100_000, {})
    assert start is None and chosen == ONLINE and CJK_KNOWN < bits < ONLINE_ABOVE


def test_the_cjk_share_counts_chinese_and_japanese_not_other_three_byte_characters():
    assert cjk_share(corpus("quijote_8k.txt")) == 0.0 and cjk_share(corpus("alice29.txt")) == 0.0
    assert cjk_share("\u201cquotes\u201d \u2014 dashes \u2026".encode() * 50) == 0.0  # English typography
    kana = "\u3072\u3089\u304c\u306a".encode()  # four hiragana, E3 lead bytes
    assert cjk_share(kana * 10) == 1.0 and cjk_share(b"ab" + kana) == 12 / 14
    assert cjk_share(kana[:2] * 10) == 0.0  # cut characters do not count


def test_the_foreign_share_counts_other_languages_letters_not_english_typography():
    english = "\u201cIt\u2019s a dash \u2014 and quotes,\u201d she said. ".encode() * 20
    assert sum(b >= 128 for b in english) > 0.1 * len(english) and foreign_share(english) == 0.0
    german = "Die Bl\u00fcten \u00fcber dem Flu\u00df. ".encode() * 20
    assert foreign_share(german) == 6 / 29 and foreign_share(german.decode().encode("latin-1")) == 3 / 26
    russian = "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440. ".encode()
    assert foreign_share(russian) == 2 * 9 / len(russian)  # every byte of its nine letters
    assert foreign_share(b"") == 0.0 and foreign_share(corpus("alice29.txt")) == 0.0
    assert foreign_share(bytes(PROBE_BYTES) + "\u00e9".encode() * 100) == 0.0  # its first PROBE_BYTES only


@pytest.mark.parametrize(
    "size, knobs, start",
    [
        (AUTO_MIN - 1, {}, LARGE_MODEL),  # too small to gain (the default level's model)
        (AUTO_MIN - 1, {"level": 5}, DEFAULT_MODEL),
        (None, {"level": 1}, DEFAULT_MODEL),  # -1 and -2 promise the model's speed
        (None, {"level": 2}, DEFAULT_MODEL),
        (None, {"rule": "rms", "level": 4}, DEFAULT_MODEL),  # a knob of the model's adaptation: the model was asked for
        (None, {"lr": 1e-4}, LARGE_MODEL),
        (None, {"sparse": 64}, LARGE_MODEL),
    ],
)
def test_no_probe_where_the_model_was_asked_for_or_nothing_would_gain(model, size, knobs, start):
    chosen, settings, bits = choose_start(model, OBJ1, size, knobs)
    assert chosen.name == start and settings == {} and bits is None


def test_object_code_is_coded_online_by_default_and_decodes_exactly(model):
    comp = Compressor(size_hint=len(OBJ1), lanes=16)
    packed = comp.compress(OBJ1) + comp.flush()
    header = header_of(packed)
    assert comp.model is None and comp.probe > ONLINE_ABOVE
    assert header["model"] is None and header["settings"]["hidden"] == ONLINE["hidden"]
    assert header["settings"]["adapt"]["lr"] == ONLINE["lr"]
    # its own segments (32), not online mode's -6 (64), which `--online` gets
    assert header["settings"]["segment_len"] == ONLINE["segment_len"] != Settings().segment_len
    assert decompress(packed) == OBJ1
    # smaller than the model's start (measured: about 3 % on this file)
    assert len(packed) < len(compress(OBJ1, model=DEFAULT_MODEL, lanes=16))
    # English text keeps the model and its prior, and naming the model or online mode decides it
    english = header_of(compress(TEXT, lanes=16))
    assert english["model"]["name"] == LARGE_MODEL and english["settings"]["mix"]["prior"] == DEFAULT_PRIOR
    assert header_of(compress(TEXT, model=None, lanes=16))["model"] is None


def test_a_stream_of_unknown_size_is_probed_on_its_first_block():
    comp = Compressor(lanes=16, block_size=AUTO_MIN)  # no size hint: chosen when the first block is full
    packed = b"".join(comp.compress(OBJ1[i : i + 1000]) for i in range(0, len(OBJ1), 1000)) + comp.flush()
    assert comp.model is None and header_of(packed)["settings"]["hidden"] == ONLINE["hidden"]
    assert decompress(packed) == OBJ1


def test_the_batch_plan_and_the_command_line_choose_as_the_api_does(tmp_path):
    obj = OBJ1[:AUTO_MIN]  # (the smallest input the probe is run for)
    path = tmp_path / "obj1"
    path.write_bytes(obj)
    expected = round_trip(obj, "auto", lanes=16, threads=1)[0]  # what `bench` codes, decoded and compared
    data, job, finish = encode_plan(None, "auto", {"lanes": 16, "threads": 1}, lambda p: False)(str(path))
    assert data == obj and finish(job[0](*job[1:])[0]) == expected  # (the result, seconds)
    out = run_cli("encode", "-v", "-c", "--lanes", "16", "-T", "1", path)
    assert out.returncode == 0 and out.stdout == expected
    assert "online mode: the model codes the first 4 kB at" in out.stderr.decode()
    assert (CORPORA / "calgary_obj1").read_bytes() == OBJ1


def test_the_probe_runs_where_the_coding_was_asked_to_run(model):
    import torch

    from dyncompress.errors import DyncompressError

    if torch.cuda.is_available():  # a GPU machine: the probe runs there and decides alike
        assert choose_start(model, OBJ1, len(OBJ1), {"device": "cuda"})[0] is None
    else:  # the same one-line error the coding would give, not a probe on another device
        with pytest.raises(DyncompressError, match="CUDA"):
            choose_start(model, OBJ1, len(OBJ1), {"device": "cuda"})
    assert choose_start(model, OBJ1, len(OBJ1), {"device": "cpu", "threads": 1})[0] is None
