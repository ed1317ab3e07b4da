"""The exact byte statistics beside the network, and the mixer that weighs them.

Imports `network`, `config` and the base. `mix.Experts` is the Python side: it holds every table
and record and calls the compiled step (`step`) once per coding step for all lanes. Everything else
here is compiled by numba, one module per expert, each with one small state record:

    history   what every lane has seen (its ring, position, last bytes, line starts): shared
    counts    the count tables the context experts key, read as evidence and counted
    orders, words, gap, record, column, wrap    context experts: each keys count tables
    ppm       the order tables read as PPM reads them
    match     the longest recent repeat
    mixer     the weight sets, the mixed logits, the mixers' steps
    apm       the last stage, corrections by the byte's cost
    step      the composition: contexts, mix_step, learn (and their splits over threads)
    common    integer helpers (the hash, byte kinds, exact division)

Every expert module exposes the same interface (`tests/test_experts.py` checks it):

    NAME      its name in `config.settings.EXPERTS` (what `--experts` takes)
    TABLES    the count tables it keys, in order (() for none)
    SEEN      whether its tables choose the highest context seen (else they are small: `mix.table_sizes`)
    READS     what of the history it reads beyond the position and the last bytes: "ring", "lines"
    State     a NamedTuple of arrays and numbers (`tuple` where it keeps none)
    make(settings, lanes, hb, used) -> State    fresh state (tiny arrays where not `used`)
    predict   what it offers a step: a context expert's predict(b, h, st, tab, ctx, t) writes
              lane b's rows and tags from table t on and returns the next table; the others
              write their evidence (`mixer` keeps it sparse) and return the next free entry
    update    its state after the byte; a context expert's update(b, y, h, st), for lane b's
              byte y before the history moves on

No kernel takes more than about a dozen arguments: the state travels in the records.

Adding an expert (the steps `wrap`, the last one moved over, follows; docs/lab/code-notes.md
records the replay that checks them):
  1. A module `experts/NAME.py` with the interface above (`wrap.py` is a context expert's
     smallest form); numba's cache covers it by itself (`kernel_cache.EXPERT_KERNELS`).
  2. Its name last in `config.settings.EXPERTS` (and a line of `--experts`' help in `cli/base.py`,
     its name among docs/FORMAT.md's `experts`). The levels run `settings.DEFAULT_EXPERTS`, spelled
     out, and the mixer priors name the experts they were made for: no level's bits change, and
     `--experts` turns the new one on.
  3. The registry: the module in `mix.MODULES`, and a context expert in `mix.CONTEXTS` at its
     tables' place (those that choose the highest context seen, `SEEN`, first).
  4. In `step`: a field of `Use` under its name, its `predict` in `contexts` (a context expert) or
     `mix_lanes`, its `update` in `advance` where it keeps state, and its record in `EXPERT_STATES`
     where it has one. Those kernels allocate nothing (`common`: compiled without reference
     counts); scratch it needs comes from the kernel that calls them (`mix_step`'s).
  5. Its tests: its contexts or evidence on real text against what the docstring says, a round
     trip with it on, and bits saved with it against without (`tests/test_mix.py`); its name in
     `tests/test_experts.py`'s order of the count tables.
Turning it on in a level is a change of its own: `DEFAULT_EXPERTS` (or the level's experts), a
mixer prior made for the new set (`tools/mixer_prior.py`), a new format, and the payload records
(`tests/golden/payloads.json`) made anew.
"""
