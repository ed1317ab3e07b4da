"""The one settings resolver: levels, model defaults, size hints, overrides, the header record."""

from dataclasses import dataclass, field

import pytest

from dyncompress.config.levels import DEFAULT_LEVEL, LEVELS, frame_lanes, level_settings, make_settings
from dyncompress.config.settings import AdaptSettings, Settings, _from_dict, apply_overrides


def test_settings_validate_and_round_trip():
    s = Settings(hidden=32, lanes=8, adapt=AdaptSettings(rule="rms-decay", decay=0.01))
    assert Settings.from_dict(s.to_dict()) == s
    for bad in (dict(lanes=0), dict(device="tpu"), dict(block_size=(1 << 30) + 1), dict(threads=0)):
        with pytest.raises(ValueError):
            Settings(**bad)
    with pytest.raises(ValueError, match="unknown rule"):
        Settings(adapt=AdaptSettings(rule="adamw"))
    for broken in ({**s.to_dict(), "extra": 1}, {k: v for k, v in s.to_dict().items() if k != "seed"}):
        with pytest.raises(ValueError, match="do not match"):
            Settings.from_dict(broken)
    inner = s.to_dict()
    inner["adapt"] = {**inner["adapt"], "momentum": 0.9}
    with pytest.raises(ValueError, match="do not match"):
        Settings.from_dict(inner)


@dataclass(frozen=True)
class _Mixer:
    gates: int = 4


@dataclass(frozen=True)
class _Outer:
    lanes: int = 1
    adapt: AdaptSettings = field(default_factory=AdaptSettings)
    mixer: _Mixer = field(default_factory=_Mixer)


def test_nested_configs_need_no_special_case():
    """A new part with settings of its own is a field: parsed, and reached by flat overrides."""
    o = apply_overrides(_Outer(), {"lanes": 3, "gates": 9, "lr": 0.5})
    assert o == _Outer(lanes=3, adapt=AdaptSettings(lr=0.5), mixer=_Mixer(gates=9))
    assert _from_dict(_Outer, {"lanes": 3, "adapt": AdaptSettings().__dict__, "mixer": {"gates": 9}}).mixer.gates == 9
    with pytest.raises(TypeError, match="unknown setting"):
        apply_overrides(_Outer(), {"gatez": 1})


def test_an_input_cut_into_frames_codes_them_at_three_quarters_of_the_lanes():
    def lanes(size, frame_size, **kw):
        return make_settings(level=6, size_hint=size, frame_size=frame_size, device="cpu", **kw).lanes

    whole = level_settings(6, "cpu").lanes
    assert lanes(3_500_000, 0) == lanes(3_500_000, 4 << 20) == lanes(None, 4 << 20) == whole  # one frame, or unknown
    assert lanes(3_500_000, 1_750_000) == lanes(100_000_000, 4 << 20) == frame_lanes(whole) == whole * 3 // 4
    assert lanes(1_000_000, 200_000) == 4  # and 40 kB per lane at least, as any input
    assert lanes(3_500_000, 1_750_000, lanes=whole) == whole  # explicit wins
    fast = make_settings(size_hint=10**7, frame_size=1 << 22, device="cpu", hidden=0, engine="bytes")
    assert fast.lanes == 64  # the fast level keeps its lanes
    assert [frame_lanes(n) for n in (1, 2, 4, 8, 16)] == [1, 1, 3, 6, 12]


def test_levels_are_valid_and_the_default_is_level_6():
    assert level_settings(DEFAULT_LEVEL, "cpu") == Settings()
    sizes = [level_settings(level, "cpu").hidden for level in LEVELS]
    assert sorted(LEVELS) == list(range(1, 10)) and sizes == sorted(sizes)
    with pytest.raises(ValueError):
        level_settings(0, "cpu")


def test_overrides_size_hint_and_explicit_settings():
    s = make_settings(level=2, device="cpu", lr=0.25, segment_len=5)
    assert (s.hidden, s.segment_len, s.adapt.lr) == (LEVELS[2]["hidden"], 5, 0.25)
    assert make_settings(level=6, size_hint=90_000, device="cpu").lanes == 2  # 40 kB per lane at least
    assert make_settings(level=6, size_hint=90_000, lanes=9, device="cpu").lanes == 9  # explicit wins
    given = Settings(hidden=40, lanes=3)
    assert make_settings(given, size_hint=10, rule="sgd") == Settings(hidden=40, lanes=3, adapt=AdaptSettings("sgd"))
    with pytest.raises(TypeError):
        make_settings(given, level=3)
    with pytest.raises(TypeError, match="unknown setting"):
        make_settings(level=1, device="cpu", colour="blue")


def test_a_models_levels_step_in_16_bits_where_its_matrices_stay_as_trained():
    """step16 (the 16-bit step) is set for a pretrained model's levels, whose matrices stay as trained
    (static, or side weights adapting), and for no other coding; a setting that asks for it where the
    matrices change is refused."""
    from dyncompress.config.model import find

    model = find("enwiki-h256")
    for level in range(1, 10):
        assert make_settings(level=level, model=model, device="cpu").step16, level
    assert make_settings(model=model, device="cpu", sparse=32).step16
    assert not make_settings(model=model, device="cpu", rule="rms-decay").step16  # the whole network adapts
    assert not make_settings(level=6, device="cpu").step16  # online mode
    assert not make_settings(hidden=0, device="cpu").step16  # no network
    with pytest.raises(ValueError, match="16-bit step"):
        apply_overrides(Settings(hidden=64), {"rule": "rms", "step16": True})
    assert apply_overrides(Settings(hidden=64), {"rule": "static", "step16": True}).step16
