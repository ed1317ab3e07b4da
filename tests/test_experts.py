"""The experts package's shape: every expert module has the same small interface, and no kernel of
the package takes more than about a dozen arguments (the state travels in records)."""

import inspect
import typing

import pytest

from dyncompress.config.settings import EXPERTS, MixSettings
from dyncompress.experts import apm, common, counts, history, match, mix, mixer, ppm, step
from dyncompress.experts.mix import CONTEXTS, MODULES
from dyncompress.network import int_kernels, step_kernels, update_kernels

MAX_ARGS = 13  # "about a dozen"


def test_every_expert_is_registered_under_its_settings_name():
    assert set(MODULES) == set(EXPERTS) and all(MODULES[name].NAME == name for name in EXPERTS)
    assert [m.NAME for m in CONTEXTS] == ["orders", "word", "gap", "record", "column", "wrap"]
    # the count tables are the context experts' own, in registry order
    names = mix.table_names(*[True] * len(CONTEXTS))
    assert names == [t for m in CONTEXTS for t in m.TABLES] and len(set(names)) == len(names)
    assert all(not MODULES[name].TABLES for name in EXPERTS if MODULES[name] not in CONTEXTS)
    # the tables that choose the highest context seen come first
    seen = [m.SEEN for m in CONTEXTS]
    assert seen == sorted(seen, reverse=True)


def test_a_registered_expert_is_all_an_expert_needs():
    """The Python side derives everything from the registry: which experts run, the tables, the
    tables that count as seen, what the history keeps."""
    for name in EXPERTS:
        experts = mix.Experts(MixSettings(experts=name if name != "ppm" else "orders,ppm", table_bits=12), 1)
        on = {n for n, used in experts.used.items() if used}
        assert on == set(MixSettings(experts=name if name != "ppm" else "orders,ppm").expert_names)
        tables = [t for m in CONTEXTS if m.NAME in on for t in m.TABLES]
        assert experts.K == len(tables) == len(mix.table_sizes(12, *[m.NAME in on for m in CONTEXTS]))
        assert experts.n_seen == sum(len(m.TABLES) for m in CONTEXTS if m.NAME in on and m.SEEN)
        assert experts.use_hist == any("ring" in MODULES[n].READS for n in on)
        assert experts.use_lines == any("lines" in MODULES[n].READS for n in on)


@pytest.mark.parametrize("name", EXPERTS)
def test_every_expert_module_has_the_same_small_interface(name):
    module = MODULES[name]
    assert isinstance(module.NAME, str) and isinstance(module.TABLES, tuple)
    assert isinstance(module.SEEN, bool) and set(module.READS) <= {"ring", "lines"}
    assert name in step.Use._fields  # (which experts run, by name)
    assert module.State is tuple or (issubclass(module.State, tuple) and hasattr(module.State, "_fields"))
    assert list(inspect.signature(module.make).parameters)[:4] == ["settings", "lanes", "hb", "used"]
    for fn in (module.predict, module.update):
        assert hasattr(fn, "py_func"), f"{name}.{fn.__name__} is not compiled"
        assert len(inspect.signature(fn.py_func).parameters) <= MAX_ARGS
    if module in CONTEXTS:  # a context expert's predict and update take the same arguments
        assert list(inspect.signature(module.predict.py_func).parameters) == ["b", "h", "st", "tab", "ctx", "t"]
        assert list(inspect.signature(module.update.py_func).parameters) == ["b", "y", "h", "st"]
    # its state, fresh, is its record (every field typed), used or not
    extra = (1 << 20,) if module is apm else ()
    for used in (True, False):
        state = module.make(MixSettings(), 2, 12, used, *extra)
        assert isinstance(state, module.State)
        if module.State is not tuple:
            assert set(typing.get_type_hints(module.State)) == set(module.State._fields)


def test_no_kernel_takes_more_than_about_a_dozen_arguments():
    kernels = [
        fn
        for module in (common, history, counts, match, ppm, apm, mixer, step, *CONTEXTS)
        + (int_kernels, step_kernels, update_kernels)
        for fn in vars(module).values()
        if hasattr(fn, "py_func") and fn.__module__ == module.__name__
    ]
    assert len(kernels) > 40
    wide = {fn.__name__: n for fn in kernels if (n := len(inspect.signature(fn.py_func).parameters)) > MAX_ARGS}
    assert not wide, wide


def test_the_kernels_that_loop_over_lanes_keep_no_reference_counts():
    """(`experts.common`): with reference counts, every record an inlined helper takes costs an
    atomic pair per array per lane, and the split's threads contend for them (`tools/refcounts.py`
    finds those left in loops, building every kernel afresh, too slow for the suite: the suite checks
    the option, and the payload tests that the bits are the same)."""
    if not common.NO_REFCOUNTS:
        pytest.skip("this numba has no option to build a kernel without reference counts")
    loops = (step.mix_lanes, step.advance, counts.choose_rows, counts.count_rows, match.find_lanes)
    assert all(kernel.targetoptions.get("_nrt") is False for kernel in loops)
    # the kernels that allocate their scratch keep them (numba refuses an allocation without)
    assert all("_nrt" not in kernel.targetoptions for kernel in (step.mix_step, counts.update, match.find))
