"""The step's matrix products in 16-bit integers (`matmul16`), where the settings ask for them
(`Settings.step16`: weights at multiples of 2^-10, inputs at most 2^12 in their units).

out = alpha x W^T (+ out) for int16 x (B, K) and W (N, K), K a multiple of 16, N of 4: every dot
product is summed in int32 and widened to int64 at the end. On x86 with AVX2 each pair of products
is one `vpmaddwd` (sixteen 16-bit products summed in pairs into eight 32-bit lanes, where the float64
kernel, `step_kernels.matmul_nt`, does four multiply-adds an instruction and reads twice the bytes of
weights); numba's loop vectorizer does not emit that instruction, so the loop is written in LLVM's
IR here (`_make_dot`). Elsewhere (no AVX2, `NUMBA_CPU_NAME=generic`) `matmul16` is a
plain loop with the same results (the step then keeps the float kernel: `HAVE_PMADDWD`).

Exact: the products and every partial sum are integers, and int32 cannot overflow where every row of
W has sum |w| * max |x| < 2^31 (`fits`; the step checks it of the weights before it uses them).
The result is the float kernel's to the bit: alpha is a power of two and the sum below 2^53.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import config
from numba.extending import intrinsic

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)

SUM_LIMIT = 1 << 31  # an int32 partial sum stays below this (`fits`)
WIDTH = 16  # 16-bit products per instruction (256-bit vectors: AVX2)


def _target_has_avx2() -> bool:
    """Whether numba compiles for a CPU with AVX2: the features it targets (`NUMBA_CPU_FEATURES`,
    none for `NUMBA_CPU_NAME=generic`, else the host's) on x86-64."""
    import llvmlite.binding as ll

    if not ll.get_process_triple().startswith("x86_64"):
        return False
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else ll.get_host_cpu_features().flatten()
    return "+avx2" in features.split(",")


HAVE_PMADDWD = _target_has_avx2()


def fits(W: np.ndarray, x_max: int) -> bool:
    """Whether `matmul16` sums W's rows exactly for any input with |x| <= x_max: every partial sum
    of a row's products is at most sum |w| * x_max."""
    return W.size == 0 or int(np.abs(W.astype(np.int64)).sum(axis=1).max()) * x_max < SUM_LIMIT


def _make_dot(lanes: int, rows: int):
    """An intrinsic dot(xa, ldx, wa, ldw, K) -> (lanes * rows) int64s: the dot products of `lanes`
    rows of int16 at address xa (stride ldx bytes) with `rows` rows at wa (stride ldw), K int16s each
    (a multiple of WIDTH), lane-major. Its loop keeps lanes x rows vectors of eight int32 sums in
    registers; each step loads WIDTH values of every row once and `vpmaddwd`s them into them."""
    i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
    v16, v8 = ir.VectorType(i16, WIDTH), ir.VectorType(i32, WIDTH // 2)
    result = types.UniTuple(types.int64, lanes * rows)

    @intrinsic
    def dot(typingctx, xa, ldx, wa, ldw, K):
        sig = result(types.int64, types.int64, types.int64, types.int64, types.int64)

        def codegen(context, builder, sig, args):
            xa, ldx, wa, ldw, K = args
            module = builder.module
            name = "llvm.x86.avx2.pmadd.wd"
            pmadd = module.globals.get(name) or ir.Function(module, ir.FunctionType(v8, [v16, v16]), name)
            entry = builder.block
            loop, done = builder.append_basic_block("dot16.loop"), builder.append_basic_block("dot16.done")
            builder.branch(loop)
            builder.position_at_end(loop)
            j = builder.phi(i64)  # bytes into every row
            sums = [builder.phi(v8) for _ in range(lanes * rows)]

            def load(base, stride, k):
                at = builder.add(builder.add(base, builder.mul(stride, ir.Constant(i64, k))), j)
                return builder.load(builder.inttoptr(at, v16.as_pointer()), align=2)

            xs = [load(xa, ldx, k) for k in range(lanes)]
            after = [None] * (lanes * rows)
            for r in range(rows):
                w = load(wa, ldw, r)
                for k in range(lanes):
                    after[k * rows + r] = builder.add(sums[k * rows + r], builder.call(pmadd, [xs[k], w]))
            j_next = builder.add(j, ir.Constant(i64, 2 * WIDTH))
            builder.cbranch(builder.icmp_signed("<", j_next, builder.mul(K, ir.Constant(i64, 2))), loop, done)
            j.add_incoming(ir.Constant(i64, 0), entry)
            j.add_incoming(j_next, loop)
            for s, a in zip(sums, after, strict=True):
                s.add_incoming(ir.Constant(v8, None), entry)
                s.add_incoming(a, loop)
            builder.position_at_end(done)
            out = ir.Constant(context.get_value_type(sig.return_type), ir.Undefined)
            for k, v in enumerate(after):
                total = ir.Constant(i64, 0)
                for e in range(WIDTH // 2):
                    total = builder.add(total, builder.sext(builder.extract_element(v, ir.Constant(i32, e)), i64))
                out = builder.insert_value(out, total, k)
            return out

        return sig, codegen

    return dot


_dot4, _dot3, _dot2, _dot1 = (_make_dot(lanes, 4) for lanes in (4, 3, 2, 1))


@njit(cache=True, inline="always")
def _put(out, b, i, alpha, add, s, at, rows):
    """out[b, i ... i + rows - 1] = alpha s[at ...] (+ out if `add`)."""
    for r in range(rows):
        out[b, i + r] = alpha * np.float64(s[at + r]) + (out[b, i + r] if add else 0.0)


@njit(cache=True)
def _matmul16_pmaddwd(x, W, out, alpha, add):
    """`matmul16` with `vpmaddwd`: blocks of four lanes (then three, two, one) by four rows. One branch
    per block height: each calls its own intrinsic, whose tuple of sums has its own length."""
    B, K = x.shape
    N = W.shape[0]
    xa, wa, ldx, ldw = x.ctypes.data, W.ctypes.data, x.strides[0], W.strides[0]  # (bytes)
    b = 0
    while b < B:
        n = min(4, B - b)
        at = xa + ldx * b
        for i in range(0, N, 4):
            w = wa + ldw * i
            if n == 4:
                s4 = _dot4(at, ldx, w, ldw, K)
                for k in range(4):
                    _put(out, b + k, i, alpha, add, s4, 4 * k, 4)
            elif n == 3:
                s3 = _dot3(at, ldx, w, ldw, K)
                for k in range(3):
                    _put(out, b + k, i, alpha, add, s3, 4 * k, 4)
            elif n == 2:
                s2 = _dot2(at, ldx, w, ldw, K)
                for k in range(2):
                    _put(out, b + k, i, alpha, add, s2, 4 * k, 4)
            else:
                s1 = _dot1(at, ldx, w, ldw, K)
                _put(out, b, i, alpha, add, s1, 0, 4)
        b += n


@njit(cache=True)
def _matmul16_plain(x, W, out, alpha, add):
    """`matmul16` as a plain loop (int64 sums): the same numbers on any CPU."""
    B, K = x.shape
    for b in range(B):
        for i in range(W.shape[0]):
            s = np.int64(0)
            for j in range(K):
                s += np.int64(x[b, j]) * np.int64(W[i, j])
            out[b, i] = alpha * np.float64(s) + (out[b, i] if add else 0.0)


# out = alpha x W^T (+ out if `add`): x (B, K) and W (N, K) C-contiguous int16, K % 16 == 0, N % 4 == 0,
# out (B, N) float64, alpha a power of two, W `fits` for x's bound
matmul16 = _matmul16_pmaddwd if HAVE_PMADDWD else _matmul16_plain
