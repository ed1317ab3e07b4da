#!/usr/bin/env bash
# The GPU device check, in two halves (BENCHMARKS.md, "The first CUDA check").
#   bash bench/gpu_device.sh prepare ENWIK8_HEAD   here: the constriction wheel and files made here, in .whl/
#   bash bench/gpu_device.sh run                    there (device `run`, carry [".whl"]): decode them on cuda
#                                                   and cpu, then bench/gpu_check.py; its files land in $OUT
set -u
D=$PWD/.whl/d
if [ "${1:-}" = prepare ]; then
  [ -f "${2:-}" ] || { echo "usage: bash bench/gpu_device.sh prepare ENWIK8_HEAD (from the checkout)"; exit 2; }
  mkdir -p "$D" || exit 1
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl constriction==0.5.0 || exit 1
  cp corpora/alice29.txt "$D/alice29.txt" || exit 1
  head -c 800000 "$2" > "$D/e800"; head -c 60000 "$D/e800" > "$D/e60"; head -c 500000 "$D/e800" > "$D/e500"
  dyncompress encode --lanes 16 -c "$D/alice29.txt" > "$D/alice.dc"
  dyncompress encode -9 --lanes 8 -c "$D/e60" > "$D/e60_l9.dc"
  dyncompress encode -2 --lanes 8 -c "$D/e60" > "$D/e60_l2.dc"
  dyncompress encode -7 --rule rms-decay --lanes 8 -c "$D/e60" > "$D/e60_rd.dc"
  dyncompress encode --online --lanes 16 -c "$D/e60" > "$D/e60_on.dc"
  dyncompress encode --frame-size 30000 --lanes 8 -c "$D/e60" > "$D/e60_fr.dc"
  dyncompress encode --fast -c "$D/e500" > "$D/e500_fast.dc"
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; lscpu | grep -m1 "Model name"
python3 -c "import torch,numba,numpy;print('torch',torch.__version__,'numba',numba.__version__,'numpy',numpy.__version__)"
cd /tmp || exit 1  # not the checkout: its dyncompress/ lacks the installed models
t0=$(date +%s)
for dev in cuda cpu; do
  for f in alice:alice29.txt e60_l9:e60 e60_l2:e60 e60_rd:e60 e60_on:e60 e60_fr:e60 e500_fast:e500; do
    s=$(date +%s)
    timeout 120 python3 -m dyncompress decode -c --device $dev "$D/${f%%:*}.dc" > /tmp/out.bin; rc=$?
    cmp -s /tmp/out.bin "$D/${f##*:}" && r=exact || r=DIFFERENT
    echo "decode ${f%%:*} on $dev: rc=$rc $r $(( $(date +%s) - s )) s"
  done
done
cd "$R" || exit 1
timeout 360 python3 bench/gpu_check.py --file "$D/e800" --models enwiki-h256 enwiki-h512 --lanes 8 64 256 1024 \
  --steps 1500 --cpu-baseline 400000 --save "$OUT"
timeout 100 python3 bench/gpu_check.py --online --hidden 256 --file "$D/e800" --lanes 16 128 --steps 1000 --save "$OUT"
echo "all took $(( $(date +%s) - t0 )) s"
