#!/usr/bin/env bash
# The paper's protocol in miniature on the first 3.5 MB of enwik8 (the default model never saw enwik8):
# tune each rule on bytes [2.5M, 3.0M), then report every rule on [3.0M, 3.5M), with a real encode of
# rms-decay to confirm the estimate, and the plot. Tuned settings go into a copy of the model, never
# into the shipped one; then the peers on the test slice. Run alone: about 25 minutes on a 2-core machine.
#   bash bench/enwik8_protocol.sh ENWIK8 [OUTDIR]   (enwik8, or a file of its first 3.5 MB: `dyncompress corpus path enwik8`)
set -euo pipefail
HEAD=${1:?usage: bash bench/enwik8_protocol.sh ENWIK8 [OUTDIR]}
OUT=${2:-bench/out}
mkdir -p "$OUT"
MODEL="$OUT/enwiki-h256-tuned.dcm"
cp "$(python -c 'from dyncompress.config.model import find; print(find("enwiki-h256").path)')" "$MODEL"
VALID="$HEAD:2.5M:3M"
TEST="$HEAD:3M:3.5M"
T="-T 2 --device cpu -q"
set -x
dyncompress tune "$VALID" -m "$MODEL" -o "$MODEL" --rule sgd --lr 0.03,0.1,0.3 --segment-len 16 $T
dyncompress tune "$VALID" -m "$MODEL" -o "$MODEL" --rule rms --lr 1e-4,2e-4,3e-4,5e-4 --segment-len 16 $T
dyncompress tune "$VALID" -m "$MODEL" -o "$MODEL" --rule rms-decay --lr 1e-4,2e-4,3e-4,5e-4 \
    --decay 0,1e-5,1e-4,1e-3 --segment-len 8,16,32 $T
dyncompress eval "$TEST" -m "$MODEL" --confirm rms-decay --plot "${PLOT:-$OUT/enwik8_3M-3.5M.png}" $T
dyncompress bench "$TEST" -m "$MODEL" $T
