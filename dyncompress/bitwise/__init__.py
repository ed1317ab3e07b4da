"""The bitwise engine: context mixing one bit at a time, the way lpaq, paq8px and cmix code.

A byte is coded as eight binary decisions, most significant bit first. Before each, every model
offers a probability that the bit is 1 given its context and the bits of the byte so far; a
mixer adds the models' stretched probabilities with weights chosen by a small context and learns
from every bit; adaptive probability maps (APMs) refine the result; a binary arithmetic coder
spends -log2 p bits on what came. Every value is an integer, so every machine computes the same.

    tables   squash / stretch between probabilities and the logistic domain; the bit-history
             state machine (what a context has seen, in one byte)
    coder    the binary arithmetic coder (one code path for encoding and decoding)
    tree     a byte distribution (the network's integer frequencies) as the eight bit
             probabilities of its binary tree, exactly
    engine   the models, the mixer and the APMs, and the loop that codes a buffer

The engine codes a block whole (`engine.BlockCoder`): the container's engine "bits" (format 6),
which `--fast` codes with; `bench/bitwise.py` measures it alone. With a predictor's byte tables
mixed in last (`engine.LaneEncoder`, through `tree`) it codes the codec's lanes: no level does yet,
`bench/engine_mix.py` measures it beside the range coder (docs/METHOD.md section 3c).
"""
