"""Models: training, calibration, the .dcm file, coding with a model, and finding the installed one."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CORPORA, INTERRUPTED, TINY, cached_kernels, corpus, interruptible, run_cli
from dyncompress import DyncompressError, compress, decompress
from dyncompress.config.levels import DEFAULT_MODEL
from dyncompress.config.model import Model, ModelError, from_bytes, load, save
from dyncompress.format.container import parse_header
from dyncompress.training.train import Trainer, read_state

ROOT = Path(__file__).resolve().parent.parent


def share_kernel_cache(target: Path) -> None:
    """Copy numba's cache of this tree's kernels into the installed copy's `__pycache__` folders
    (`conftest.cached_kernels`): a kernel not compiled here yet, the copy compiles itself."""
    import shutil

    for source, cached in cached_kernels():
        folder = target / source.relative_to(ROOT).parent / "__pycache__"
        folder.mkdir(exist_ok=True)
        shutil.copyfile(cached, folder / cached.name)


def test_training_lowers_validation_bpb():
    trainer = Trainer(TINY, [str(CORPORA / "alice29.txt")])
    before = trainer.validate()
    for _ in range(TINY.steps):
        trainer.train_step()
    after = trainer.validate()
    assert before > 7.5  # a random start: about 8 bits per byte
    assert after < before - 2.0, (before, after)


# a training long enough to stop in the middle: 300 steps of a 16-unit network, about a second
PIECES = ["--hidden", "16", "--batch", "4", "--bptt", "16", "--steps", "300", "--eval-every", "60"]
PIECES += ["--valid-bytes", "4000", "--lr", "3e-3", "-T", "1"]


@pytest.fixture(scope="module")
def straight_training(tmp_path_factory):
    """The final training state of the run never stopped."""
    out = tmp_path_factory.mktemp("straight") / "s.dcm"
    r = run_cli("train", f"{CORPORA / 'alice29.txt'}:0:60k", "-o", out, *PIECES)
    assert r.returncode == 0, r.stderr
    return read_state(str(out))


def _stop(tmp_path, when: bytes, sig, **kw) -> Path:
    """Start the training in a child, send `sig` when its stderr shows `when`; the model's path."""
    out = tmp_path / "p.dcm"
    source = f"{CORPORA / 'alice29.txt'}:0:60k"
    proc = interruptible(["-m", "dyncompress", "train", source, "-o", str(out), *PIECES], **kw)
    seen = b""
    while when not in seen:
        line = proc.stderr.readline()
        assert line, f"the training ended first: {seen.decode()}"
        seen += line
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return out, proc.returncode, (seen + err).decode()


def test_training_killed_resumes_to_the_weights_of_a_run_never_stopped(tmp_path, straight_training):
    """Killed (no chance to save) after the checkpoint of step 120; `--resume` with nothing else
    given takes the sources and settings from the checkpoint and ends where the straight run did."""
    out, code, _ = _stop(tmp_path, b"step 120/", signal.SIGKILL)
    assert code == -signal.SIGKILL and 120 <= read_state(str(out))["step"] < 300
    r = run_cli("train", "-o", out, "--resume")
    assert r.returncode == 0, r.stderr
    state = read_state(str(out))
    assert state["step"] == 300 and torch.equal(state["theta"], straight_training["theta"])
    assert torch.equal(state["h"], straight_training["h"])  # the streams' state and place, too
    assert state["pos"] == straight_training["pos"]


def test_training_interrupted_saves_its_step_and_resumes_in_pieces(tmp_path, straight_training):
    """Ctrl-C: one line, exit 130, the state of the last whole step written (between checkpoints);
    then two pieces of --stop-after and a last --resume reach the straight run's weights."""
    out, code, err = _stop(tmp_path, b"step 60/", signal.SIGINT)
    assert code in INTERRUPTED and "Traceback" not in err, err
    assert "interrupted at step" in err.strip().splitlines()[-1] and "--resume" in err
    assert 60 <= read_state(str(out))["step"] < 300
    r = run_cli("train", "-o", out, "--resume", "--stop-after", "0.001")  # 0.06 s: a few steps
    assert r.returncode == 0 and b"--resume continues" in r.stderr, r.stderr
    assert read_state(str(out))["step"] < 300
    r = run_cli("train", f"{CORPORA / 'alice29.txt'}:0:60k", "-o", out, "--resume")
    assert r.returncode == 0, r.stderr
    assert torch.equal(read_state(str(out))["theta"], straight_training["theta"])


def test_training_terminated_saves_its_step_even_where_ctrl_c_is_ignored(tmp_path, straight_training):
    """SIGTERM (a job scheduler's stop) to a training started as a background job (SIGINT ignored):
    one line, exit 143, the state of the last whole step written; --resume ends as the straight run."""
    out, code, err = _stop(tmp_path, b"step 60/", signal.SIGTERM, sigint=signal.SIG_IGN)
    assert code == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert "terminated at step" in err.strip().splitlines()[-1] and "--resume" in err
    assert 60 <= read_state(str(out))["step"] < 300
    r = run_cli("train", "-o", out, "--resume")
    assert r.returncode == 0, r.stderr
    assert torch.equal(read_state(str(out))["theta"], straight_training["theta"])


def test_resume_refuses_other_data_or_layout(tmp_path, straight_training):
    out = tmp_path / "p.dcm"  # (a source named relative to where the training started)
    r = run_cli("train", "alice29.txt:0:60k", "-o", out, *PIECES, "--stop-after", "0.001", cwd=CORPORA)
    assert r.returncode == 0, r.stderr
    assert read_state(str(out))["sources"] == [f"{CORPORA / 'alice29.txt'}:0:60k"]  # resolves from anywhere
    r = run_cli("train", f"{CORPORA / 'alice29.txt'}:0:50k", "-o", out, "--resume")
    assert r.returncode == 1 and b"trained on other data: alice29.txt:0:60k (60,000 bytes)" in r.stderr, r.stderr
    r = run_cli("train", "-o", out, "--resume", "--bptt", "8")
    assert r.returncode == 1 and b"bptt 16, not 8" in r.stderr, r.stderr
    copy = tmp_path / "copy.txt"  # the same bytes under another name (as on a GPU machine): accepted
    copy.write_bytes(corpus("alice29.txt")[:60_000])
    r = run_cli("train", copy, "-o", out, "--resume", "--stop-after", "0.001")
    assert r.returncode == 0, r.stderr


def test_a_turn_on_another_machine_takes_the_checkpoint_there_and_back(tmp_path):
    """tools/train_turn.sh rehearsed on this CPU (DEVICE=cpu): `prepare` copies the checkpoint and the
    bytes of its source, `run` trains on from the copy, `collect` puts the state back beside the
    model with the original source in it, and a plain --resume then runs the schedule out."""
    out, source = tmp_path / "m.dcm", f"{CORPORA / 'alice29.txt'}:0:60k"
    assert run_cli("train", source, "-o", out, *PIECES, "--stop-after", "0.001").returncode == 0
    before = read_state(str(out))["step"]
    env = dict(os.environ, TURN=str(tmp_path / "turn"), DEVICE="cpu")

    def turn(*args):
        r = subprocess.run(["bash", ROOT / "tools/train_turn.sh", *map(str, args)], env=env, capture_output=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout.decode()

    turn("prepare", out)
    assert (tmp_path / "turn/data/00_alice29.txt_0_60k").read_bytes() == corpus("alice29.txt")[:60_000]
    assert "train exited 0" in turn("run", "0.001")
    turn("collect", tmp_path / "turn/out")
    state = read_state(str(out))
    assert state["step"] > before and state["sources"] == [source]
    r = run_cli("train", "-o", out, "--resume")
    assert r.returncode == 0 and read_state(str(out))["step"] == 300, r.stderr


def test_calibration_gives_finite_positive_ms_of_the_right_shape(tiny):
    _, model = tiny
    assert model.ms is not None and model.ms.shape == model.theta.shape
    assert torch.isfinite(model.ms).all() and (model.ms > 0).all()


def test_save_load_round_trip_is_exact(tiny, tmp_path):
    path, model = tiny
    again = tmp_path / "again.dcm"
    save(model, str(again))
    loaded = load(str(again))
    assert torch.equal(loaded.theta, model.theta) and torch.equal(loaded.ms, model.ms)
    assert loaded.info == model.info and loaded.name == "tiny" and loaded.shape == model.shape
    assert again.read_bytes() == path.read_bytes() and loaded.sha256 == model.sha256


SHIPPED = sorted((ROOT / "models").glob("*.dcm"))  # (installed as dyncompress.models)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_model_has_a_card_that_matches_its_file(path):
    """The card beside each shipped file names its SHA-256, its parameters and its hidden size, and
    the folder's README lists it with a link to the card."""
    model = load(str(path))
    card = path.with_suffix(".md").read_text(encoding="utf-8")
    assert model.name == path.stem
    assert model.sha256 in card
    assert f"{model.shape.num_params:,} parameters" in card
    assert f"{model.shape.hidden} hidden units" in card
    readme = (path.parent / "README.md").read_text(encoding="utf-8")
    assert f"| `{model.name}` " in readme and f"[{path.stem}.md]({path.stem}.md)" in readme


def test_the_shipped_models_fit_the_wheel_budget():
    """What a `pip install` brings of models: 40 MB together at most (and at least one model)."""
    assert SHIPPED and sum(path.stat().st_size for path in SHIPPED) <= 40_000_000


def test_damaged_model_files_are_refused(tiny):
    data = tiny[0].read_bytes()
    for bad in (data[:-1], data[: len(data) // 2], data[:5] + b"X" + data[6:], b"", b"not a model"):
        with pytest.raises(ModelError):
            from_bytes(bad, "bad.dcm")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    with pytest.raises(ModelError, match="checksum"):
        from_bytes(bytes(flipped), "bad.dcm")


@pytest.mark.parametrize("rule", ["static", "sgd", "rms", "rms-decay"])
def test_round_trip_with_a_pretrained_model(tiny, rule):
    _, model = tiny
    data = corpus("alice29.txt")[30000:34000] + "¿Qué tal? 你好".encode()
    packed = compress(data, model=model, rule=rule, device="cpu")
    meta = parse_header(packed)[0]
    assert meta["model"] == {"name": "tiny", "sha256": model.sha256}
    assert meta["settings"]["hidden"] == 24 and meta["settings"]["adapt"]["rule"] == rule
    assert decompress(packed, model=model) == data


@pytest.mark.parametrize("level", range(1, 10))
def test_every_level_with_a_model_round_trips(tiny, level):
    from dyncompress import Compressor
    from dyncompress.config.levels import MODEL_LEVELS

    _, model = tiny
    data = corpus("alice29.txt")[9000:10500]
    comp = Compressor(level=level, model=model, device="cpu", block_size=1000)  # full block: no size rule
    packed = comp.compress(data) + comp.flush()
    settings = parse_header(packed)[0]["settings"]
    assert settings["hidden"] == 24  # the model's, at every level
    assert settings["lanes"] == MODEL_LEVELS[level].get("lanes", 4)  # else the model's default
    assert settings["adapt"]["rule"] == MODEL_LEVELS[level].get("rule", "rms-decay")
    assert decompress(packed, model=model) == data


def test_the_pretrained_start_beats_a_random_one(tiny):
    _, model = tiny
    data = corpus("alice29.txt")[40000:44000]
    alone = dict(rule="static", experts="", device="cpu")  # the networks alone
    pre = compress(data, model=model, **alone)
    online = compress(data, model=None, hidden=24, lanes=4, segment_len=8, **alone)
    assert len(pre) < 0.8 * len(online)


def test_decode_with_the_wrong_model_is_refused_naming_both_hashes(tiny, tmp_path):
    _, model = tiny
    other = Model("tiny", model.shape, model.theta + 1e-3, model.ms, model.info)
    save(other, str(tmp_path / "other.dcm"))
    packed = compress(b"which model?", model=model, device="cpu")
    with pytest.raises(ModelError) as e:
        decompress(packed, model=str(tmp_path / "other.dcm"))
    assert model.sha256[:16] in str(e.value) and other.sha256[:16] in str(e.value)
    with pytest.raises(DyncompressError, match="not installed"):  # by name: no such model installed
        decompress(packed)


def test_cli_model_by_path_and_by_name(tiny, tmp_path):
    path, model = tiny
    text = tmp_path / "t.txt"
    text.write_bytes(corpus("alice29.txt")[:3000])
    r = run_cli("encode", "--model", path, "--device", "cpu", text)
    assert r.returncode == 0, r.stderr
    r = run_cli("info", str(text) + ".dc")
    assert b"tiny (sha256 " + model.sha256[:16].encode() in r.stdout
    r = run_cli("decode", "-c", str(text) + ".dc")  # not installed under its name
    assert r.returncode == 1 and b"--model" in r.stderr and b"Traceback" not in r.stderr
    r = run_cli("decode", "-c", str(text) + ".dc", env={"DYNCOMPRESS_MODELS": str(path.parent)})
    assert r.returncode == 0 and r.stdout == text.read_bytes()
    r = run_cli("decode", "-c", "--model", path, str(text) + ".dc")
    assert r.returncode == 0 and r.stdout == text.read_bytes()
    r = run_cli("models", env={"DYNCOMPRESS_MODELS": str(path.parent)})
    assert r.returncode == 0 and b"tiny: mLSTM hidden 24" in r.stdout and b"calibrated" in r.stdout
    # the shipped models beside it, each with its role
    assert b"enwiki-h256 (default at -1 ... -5 and for inputs under 8 kB): " in r.stdout
    assert b"multi-h256 (the default for other European languages at -3 ... -5): " in r.stdout
    assert b"multi-h512 (the default for other European languages from -6 on): " in r.stdout
    assert b"cjk-h128 (the default for the Chinese and Japanese it knows): " in r.stdout
    assert b"enwiki-h512 (the default for English from -6 on): " in r.stdout


def test_cli_train_and_calibrate(tmp_path):
    out = tmp_path / "cli.dcm"
    args = ["--hidden", "16", "--batch", "4", "--bptt", "16", "--steps", "12", "--eval-every", "6"]
    r = run_cli("train", f"{CORPORA / 'alice29.txt'}:0:100k", "-o", out, *args, "--valid-bytes", "4000")
    assert r.returncode == 0, r.stderr
    training = load(str(out)).info["training"]
    assert b"valid" in r.stderr and training["steps"] == 12
    assert [(f["file"], f["bytes"]) for f in training["corpus"]] == [("alice29.txt:0:100k", 100_000)]
    r = run_cli("train", CORPORA / "alice29.txt", "-o", out, *args)
    assert r.returncode == 1 and b"--resume" in r.stderr  # never overwrites a model silently
    r = run_cli(
        "calibrate", out, f"{CORPORA / 'alice29.txt'}:100k:", "--bytes", "5000", "--lanes", "2", "--segment-len", "8"
    )
    assert r.returncode == 0, r.stderr
    m = load(str(out))
    assert m.ms is not None and m.info["defaults"]["lanes"] == 2 and m.info["calibration"]["bytes"] == 5000
    # fine-tuning: --init starts from the model's weights, not the seed's (so a model that learned
    # alice29 starts far below a random start's 8 bits per byte), and records where it started
    tuned = tmp_path / "tuned.dcm"
    r = run_cli(
        "train", f"{CORPORA / 'alice29.txt'}:0:100k", "-o", tuned, *args, "--init", out, "--valid-bytes", "4000"
    )
    assert r.returncode == 0, r.stderr
    first, then = load(str(out)).info["training"], load(str(tuned)).info["training"]
    assert then["init"] == f"cli ({m.sha256[:16]})" and first["init"] is None
    assert then["history"][0]["valid_bpb"] < first["history"][0]["valid_bpb"]
    r = run_cli("train", CORPORA / "alice29.txt", "-o", tmp_path / "t2.dcm", "--hidden", "8", "--init", out)
    assert r.returncode == 1 and b"hidden 16, more than 8" in r.stderr and b"Traceback" not in r.stderr
    # a larger network from the model (widened): it starts where the model was, far below a random start
    wide = tmp_path / "wide.dcm"
    r = run_cli(
        "train", f"{CORPORA / 'alice29.txt'}:0:100k", "-o", wide, *args, "--init", out, "--hidden", "24",
        "--valid-bytes", "4000", "--steps", "1", "--lr", "1e-9",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    widened = load(str(wide))
    assert widened.shape.hidden == 24 and widened.info["training"]["init"] == f"cli ({m.sha256[:16]})"
    best = min(h["valid_bpb"] for h in first["history"])  # the model's held-out bits, the same tail
    assert abs(widened.info["training"]["history"][0]["valid_bpb"] - best) < 1e-3
    r = run_cli("train", "-o", wide, "--resume", "--steps", "2")  # a second piece: where it started is kept
    assert r.returncode == 0, r.stderr
    state = read_state(str(wide))
    assert state["step"] == 2 and state["init"] == f"cli ({m.sha256[:16]})"
    assert [p["step"] for p in state["pieces"]] == [0, 1] and "--resume" in state["pieces"][1]["command"]
    r = run_cli("train", CORPORA / "alice29.txt", "-o", tmp_path / "t3.dcm", "--init", tmp_path / "none.dcm")
    assert r.returncode == 1 and b"Traceback" not in r.stderr and not (tmp_path / "t3.dcm").exists()
    r = run_cli("calibrate", tmp_path / "missing.dcm", CORPORA / "alice29.txt")
    assert r.returncode == 2 and b"Traceback" not in r.stderr
    r = run_cli("calibrate", out, f"{CORPORA / 'alice29.txt'}:0:999999999")
    assert r.returncode == 1 and b"is not within the file" in r.stderr and b"Traceback" not in r.stderr


def test_online_and_model_contradict(tmp_path):
    r = run_cli("encode", "--online", "--model", "x", "-c", CORPORA / "grammar.lsp")
    assert r.returncode == 2 and b"contradict" in r.stderr
    r = run_cli("encode", "--model", tmp_path / "nope.dcm", "-c", CORPORA / "grammar.lsp")
    assert r.returncode == 1 and b"not found" in r.stderr and b"Traceback" not in r.stderr


def test_default_model_is_found_by_a_non_editable_install(tmp_path):
    """`pip install .` (a copy, not the source tree) must carry the default model, every module and
    every data file with it, and code from where it is."""
    target = tmp_path / "site"
    r = subprocess.run(
        # no build isolation, no index: the build uses this environment's setuptools (a test extra)
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--target", str(target), str(ROOT)],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    # every module and data file of the source tree, where the package finds it
    wanted = {p.relative_to(ROOT) for p in (ROOT / "dyncompress").rglob("*") if p.suffix in (".py", ".npz")}
    wanted |= {Path("dyncompress/models") / p.name for p in (ROOT / "models").glob("*") if p.suffix in (".dcm", ".md")}
    wanted |= {Path("dyncompress/corpora") / p.name for p in (ROOT / "corpora" / "manifests").glob("*.json")}
    missing = sorted(str(p) for p in wanted if not (target / p).is_file())
    assert not missing and any(p.suffix == ".dcm" for p in wanted), missing
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    text = elsewhere / "grammar.lsp"
    text.write_bytes(corpus("grammar.lsp"))
    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("DYNCOMPRESS_MODELS", None)
    env.pop("NUMBA_CACHE_DIR", None)  # (the copy's own __pycache__, where `share_kernel_cache` put the kernels)
    share_kernel_cache(target)

    def run(*args):
        return subprocess.run([sys.executable, *args], capture_output=True, cwd=elsewhere, env=env)

    where = run("-c", "import dyncompress; print(dyncompress.__file__)")
    assert where.stdout.decode().startswith(str(target))  # the installed copy, not the source tree
    r = run("-m", "dyncompress", "models")
    assert r.returncode == 0 and f"{DEFAULT_MODEL} (default at ".encode() in r.stdout
    # what a coding with the default model loads: the model, the mixer priors, the network's tables
    loads = """if True:
        import numpy as np
        from importlib import resources
        from dyncompress.api import resolve_model
        from dyncompress.config.levels import DEFAULT_MODEL
        from dyncompress.experts.mix import PRIOR_SHA256, prior_sha256
        from dyncompress.network.fixed import checked_tables
        checked_tables()
        for name, sha in PRIOR_SHA256.items():
            with np.load(str(resources.files("dyncompress.experts") / f"prior_{name}.npz")) as npz:
                assert prior_sha256(npz["W"], npz["W_slow"], npz["updates"]) == sha, name
        print(resolve_model(DEFAULT_MODEL).name, len(PRIOR_SHA256))
    """
    r = run("-c", loads)
    assert r.returncode == 0 and r.stdout.split() == [DEFAULT_MODEL.encode(), b"4"], r.stderr
    # a round trip with the default model from the installed copy (one thread: the kernels this
    # tree's tests have compiled by now)
    r = run("-m", "dyncompress", "encode", "--device", "cpu", "-T", "1", "grammar.lsp")
    assert r.returncode == 0, r.stderr
    meta = parse_header((elsewhere / "grammar.lsp.dc").read_bytes())[0]
    assert meta["model"]["name"] == DEFAULT_MODEL
    (elsewhere / "grammar.lsp").unlink()
    r = run("-m", "dyncompress", "decode", "-T", "1", "grammar.lsp.dc")
    assert r.returncode == 0 and (elsewhere / "grammar.lsp").read_bytes() == corpus("grammar.lsp")
