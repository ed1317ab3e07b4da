#!/usr/bin/env bash
# A turn of training on a lent GPU machine: the checkpoint and a copy of its data travel there, the
# training runs on for MINUTES, the checkpoint comes back. Short turns (a quarter of an hour, the
# machine's start included) add up, between pieces on the CPU (`dyncompress train --resume`).
#
#   bash tools/train_turn.sh prepare MODEL.dcm   here: MODEL.dcm's checkpoint (start one with
#                                                `train ... --stop-after 1`) and the bytes of its
#                                                sources, in .turn/ (under 64 MiB in all)
#   bash tools/train_turn.sh run MINUTES         there (device `run`, carry [".turn"]): trains on
#                                                for MINUTES on cuda; the checkpoint, in parts of
#                                                at most 15 MiB, and the log land in $OUT
#   bash tools/train_turn.sh collect DIR         here: the turn's files from DIR (the run's
#                                                files_at) put back in place of MODEL.dcm's
#
# The checkpoint's sources are copied as they are read (FILE:START:END slices made files), so the
# machine needs nothing beside the checkout; `--resume` accepts the copies because it checks bytes,
# not names, and `collect` puts the original sources back into the checkpoint. Give the schedule by
# steps (`--steps N`, `--minutes 0`): a schedule by minutes would count a GPU's minutes as a CPU's.
# DEVICE=cpu runs the `run` half on this machine's CPU (a rehearsal); TURN=DIR puts .turn elsewhere.
set -u
R=$(cd "$(dirname "$0")/.." && pwd)  # the checkout, whose dyncompress/ runs
T=${TURN:-$R/.turn}
export PYTHONPATH=$R${PYTHONPATH:+:$PYTHONPATH}
case "${1:-}" in
prepare)
  [ -f "${2:-}.state" ] || { echo "usage: bash tools/train_turn.sh prepare MODEL.dcm (MODEL.dcm.state must exist)"; exit 2; }
  rm -rf "$T" && mkdir -p "$T/data" || exit 1
  if [ "$T" = "$R/.turn" ] && [ -d "$R/.git/info" ]; then
    grep -qx '/.turn/' "$R/.git/info/exclude" 2>/dev/null || echo /.turn/ >> "$R/.git/info/exclude"
  fi
  python3 - "$2" "$T" <<'EOF' || exit 1
import json, os, shutil, sys
from dyncompress.training.corpus import read_source
from dyncompress.training.train import read_state

model, turn = sys.argv[1], sys.argv[2]
state = read_state(model)
copies = []
for i, source in enumerate(state["sources"]):
    name = f"{i:02d}_" + "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(source))
    with open(os.path.join(turn, "data", name), "wb") as f:
        f.write(read_source(source)[1])
    copies.append("data/" + name)
shutil.copyfile(model + ".state", os.path.join(turn, "model.dcm.state"))
if os.path.exists(model):
    shutil.copyfile(model, os.path.join(turn, "model.dcm"))
json.dump({"model": os.path.abspath(model), "sources": state["sources"], "copies": copies}, open(os.path.join(turn, "turn.json"), "w"))
print(f"{model}: step {state['step']:,} of {state['config']['steps']:,}; {len(copies)} sources copied")
EOF
  du -sh "$T"
  ;;
run)
  [ -f "$T/turn.json" ] && [ -n "${2:-}" ] || { echo "usage: bash tools/train_turn.sh run MINUTES (after prepare)"; exit 2; }
  export PYTHONUNBUFFERED=1
  DEVICE=${DEVICE:-cuda}
  [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  cd "$T" || exit 1
  mapfile -t COPIES < <(python3 -c 'import json; print("\n".join(json.load(open("turn.json"))["copies"]))')
  python3 -m dyncompress train "${COPIES[@]}" -o model.dcm --resume --stop-after "$2" --device "$DEVICE" -q 2>&1 | tee train.log
  rc=${PIPESTATUS[0]}
  OUT=${OUT:-$T/out}
  mkdir -p "$OUT" && split -b 15m -d model.dcm.state "$OUT/model.dcm.state.part" || exit 1
  cp model.dcm train.log turn.json "$OUT"/ 2>/dev/null
  echo "train exited $rc; in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  exit "$rc"
  ;;
collect)
  D=${2:-}
  [ -f "$D/turn.json" ] && [ -f "$D/model.dcm.state.part00" ] || { echo "usage: bash tools/train_turn.sh collect DIR (the run's files)"; exit 2; }
  python3 - "$D" <<'EOF' || exit 1
import glob, json, os, shutil, sys
import torch
from dyncompress.config.model import load, save

d = sys.argv[1]
turn = json.load(open(os.path.join(d, "turn.json")))
model = turn["model"]
parts = sorted(glob.glob(os.path.join(d, "model.dcm.state.part*")))
with open(model + ".state.tmp", "wb") as f:
    for part in parts:
        f.write(open(part, "rb").read())
state = torch.load(model + ".state.tmp", weights_only=True)
state["sources"] = turn["sources"]  # the originals, not the machine's copies
torch.save(state, model + ".state.tmp")
os.replace(model + ".state.tmp", model + ".state")
if os.path.exists(os.path.join(d, "model.dcm")):
    save(load(os.path.join(d, "model.dcm")), model)
last = state["history"][-1] if state["history"] else {}
print(f"{model}: step {state['step']:,}, held-out {last.get('valid_bpb', float('nan'))} bits/byte")
EOF
  ;;
*)
  sed -n 2,20p "$0"; exit 2
  ;;
esac
