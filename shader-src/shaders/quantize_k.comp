//! variant q4_k Q4_K=1
//! variant q5_k Q5_K=1
//! variant q6_k Q6_K=1
//! variant q2_k Q2_K=1
//! variant q3_k Q3_K=1
//! variant q8_k Q8_K=1
//! variant iq4_nl IQ4_NL=1
//! variant iq4_xs IQ4_XS=1
// f32 values to GGML k-quant super-blocks of 256 and IQ4 blocks (ggml's quantize_row_*_ref
// without importance matrix, as vkml-quant's CPU quantizers compute them, vkml-quant
// src/quantize/kquants.rs): per sub-block a scale search (Q2_K, Q4_K, Q5_K: make_qkx2_quants, a
// weighted least-squares fit of scale and min over nstep trial scales; Q3_K:
// make_q3_quants, iterative per-value refinement; Q6_K: make_qx_quants, 18 trial scales
// around nmax / max; IQ4_NL, IQ4_XS: the nearest of the 16 non-linear levels per trial
// scale), the sub-block scales quantized against the super-block's largest (6, 4 or 8
// bits), then the values re-quantized with the scales as stored (f16-rounded d times the
// integer scale). Q8_K: x * (-127 / max) rounded, d = 1 / that (f32), bsums per 16.
// Every floating-point step is `precise` (no contraction) in the CPU's order, ties and
// comparisons as there, nearest_int the 1.5 * 2^23 trick, f16 rounded to nearest even, and
// division and square root rounded correctly in integer arithmetic (div_rn, sqrt_rn:
// Vulkan's own may be ulps off, which moves scale searches to other trial scales), so the
// bytes are the CPU's on any device. But where intermediates are subnormal (the fits
// compare products of sums of x^2 and x^3: for sub-blocks of values below about 1e-5 they
// go below 1.2e-38): there a device may flush them to zero, and div_rn and sqrt_rn take the
// device's operation.
// IQ4_NL: as the CPU (whose quantizer reuses one scratch buffer along the row), a block of
// largest magnitude below 1e-15 (scale 0) gets the quants of the nearest previous block that
// is not, looked for up to 16 blocks back in x (from element 0), else zeros: identical bytes
// but after longer runs of zero blocks (values decode to 0 either way).
// Work split: one invocation per sub-block (SUBS per block: 8 sub-blocks of 32 for Q4_K,
// Q5_K, IQ4_XS; 16 of 16 for Q2_K, Q3_K, Q6_K, Q8_K; IQ4_NL one invocation per block of
// 32), holding its values in registers. Each runs its sub-block's search (Q8_K: its largest
// magnitude) and leaves the result (scale, min) in shared memory; after a barrier it
// assembles its part of the block: the super-block's scales from all of them (each
// invocation computes them, in the CPU's order), its own scale bits, the header (the first
// invocation), its values re-quantized and packed. The parts are ORed (atomicOr) into the
// workgroup's blocks staged in shared memory from zeros; after a second barrier the
// workgroup writes them out as whole words. A workgroup of 64 handles 64 / SUBS blocks
// (4, 8 or 64: an even count, whole 32-bit words however many bytes a block has), blocks
// packed from byte 0.
// Bindings: 0 = x (f32), 1 = y (the part's blocks, as words). Push constants: x_off (element
// of x where the part's first block starts), n_blocks (blocks in the part), n_words (words
// of y). Workgroup size 64 (the staging is sized for it). Grid: x (then y) over workgroups
// of 64 / SUBS blocks.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "strided.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint x_off; uint n_blocks; uint n_words; } p;

// The workgroup size (the host's; the staging below is sized for it).
#define WG 64u

// BLOCK_BYTES, BLOCK_ELEMS; SUBS: invocations per block (one per sub-block of SUB_N values).
#if defined(Q4_K)
#define BLOCK_BYTES 144u
#define SUBS 8u
#elif defined(Q5_K)
#define BLOCK_BYTES 176u
#define SUBS 8u
#elif defined(Q6_K)
#define BLOCK_BYTES 210u
#define SUBS 16u
#elif defined(Q2_K)
#define BLOCK_BYTES 84u
#define SUBS 16u
#elif defined(Q3_K)
#define BLOCK_BYTES 110u
#define SUBS 16u
#elif defined(Q8_K)
#define BLOCK_BYTES 292u
#define SUBS 16u
#elif defined(IQ4_NL)
#define BLOCK_BYTES 18u
#define SUBS 1u
#else
#define BLOCK_BYTES 136u
#define SUBS 8u
#endif
#if defined(IQ4_NL)
#define BLOCK_ELEMS 32u
#else
#define BLOCK_ELEMS 256u
#endif
#define SUB_N (BLOCK_ELEMS / SUBS)
// Blocks per workgroup (4, 8 or 64: an even count, so its bytes are whole words) and the
// words they take.
#define WG_BLOCKS (WG / SUBS)
#define WG_WORDS (WG_BLOCKS * BLOCK_BYTES / 4u)

// ggml's GROUP_MAX_EPS.
const float EPS = 1e-15;

// The workgroup's blocks, assembled with atomicOr from zeros (bits of one word come from
// several invocations), then copied out whole.
shared uint stage[WG_WORDS];
// Each sub-block's search result, for its block's assembly.
shared float sh_a[WG];
shared float sh_b[WG];

// The invocation's sub-block: its values, and its quants (one per value, as stored).
float xv[SUB_N];
uint lq[SUB_N];

// ORs the 4 bytes of v into the staged bytes at .. at + 3 (any alignment; bytes of v past
// the workgroup's blocks must be zero).
void or_bytes(uint at, uint v) {
    uint s = (at & 3u) * 8u;
    atomicOr(stage[at >> 2], v << s);
    if (s != 0u && (v >> (32u - s)) != 0u) atomicOr(stage[(at >> 2) + 1u], v >> (32u - s));
}

// The quants lq[i0 .. i0 + 4] (4 bits each, shifted by `shift`) as the 4 bytes of a word.
uint pack4(uint i0, uint bits, uint shift) {
    uint v = 0u;
    [[unroll]] for (uint b = 0u; b < 4u; b++) v |= ((lq[i0 + b] & ((1u << bits) - 1u)) << shift) << (8u * b);
    return v;
}

uint f16_of(float v) {
    return vkml_f32_bits_to_f16_bits(floatBitsToUint(v));
}

// ggml's nearest_int: round to nearest even through 1.5 * 2^23 (fval must be a rounded
// value: callers pass a precise variable, so no product is fused into the add).
int nearest_int(float fval) {
    precise float val = fval + 12582912.0;
    return (floatBitsToInt(val) & 0x7fffff) - 0x400000;
}

// a / b rounded to nearest even as IEEE 754 (Vulkan lets division be 2.5 ulp off): the
// quotient of the significands in integers. Zeros, infinities, NaN, subnormal operands and
// subnormal or overflowing quotients take the device's division.
float div_rn(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint ea = (ua >> 23) & 0xFFu, eb = (ub >> 23) & 0xFFu;
    precise float dev = a / b;
    if (ea == 0u || ea == 255u || eb == 0u || eb == 255u) return dev;
    uint ma = (ua & 0x7FFFFFu) | 0x800000u, mb = (ub & 0x7FFFFFu) | 0x800000u;
    int e = int(ea) - int(eb);
    if (ma < mb) {
        ma <<= 1;
        e -= 1;
    }
    // q = floor(ma 2^24 / mb) in [2^24, 2^25) (24 quotient bits and a guard bit), r != 0
    // the sticky bit. From the device's quotient of the significands (exact floats; within
    // 2.5 ulp, so q lands 2 to 13 below floor(ma 2^24 / mb)), the remainder of q in exact
    // integer arithmetic, then q raised by up to 15; a remainder out of that range (a device
    // further off) takes the long division, bit by bit (a loop of no iteration otherwise:
    // CPU drivers run both sides of a branch).
    precise float qf = float(ma) / float(mb);
    precise float qs = qf * 16777216.0;
    uint q = uint(qs) - 8u;
    uint phi, plo;
    umulExtended(q, mb, phi, plo);
    uint nlo = ma << 24;
    uint r = nlo - plo;
    bool near = (ma >> 8) - phi - (nlo < plo ? 1u : 0u) == 0u && r < (mb << 4);
    [[unroll]] for (int k = 3; k >= 0; k--) {
        bool up = r >= (mb << k);
        r = up ? r - (mb << k) : r;
        q = up ? q + (1u << k) : q;
    }
    q = near ? q : 0u;
    r = near ? r : ma;
    for (int i = near ? 0 : 25; i > 0; i--) {
        uint bit = r >= mb ? 1u : 0u;
        q = (q << 1) | bit;
        r = (r - bit * mb) << 1;
    }
    uint m = q >> 1;
    if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u)) m++;
    if (m == 0x1000000u) {
        m = 0x800000u;
        e++;
    }
    int be = e + 127;
    if (be <= 0 || be >= 255) return dev;
    return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(be) << 23) | (m & 0x7FFFFFu));
}

// sqrt(v) rounded to nearest even (Vulkan's is an approximation): the integer square root
// of the significand, digit by digit. Zero, negative, subnormal, infinite or NaN v take
// the device's sqrt.
float sqrt_rn(float v) {
    uint u = floatBitsToUint(v);
    uint e = (u >> 23) & 0xFFu;
    if (e == 0u || e == 255u || (u >> 31) != 0u) return sqrt(v);
    uint m = (u & 0x7FFFFFu) | 0x800000u;
    int ex = int(e) - 150; // v = m 2^ex
    if ((ex & 1) != 0) {
        m <<= 1;
        ex -= 1;
    }
    // root = isqrt(m 2^26): m as 13 pairs of bits, then 13 pairs of zeros; 25 or 26 bits.
    uint root = 0u, r = 0u;
    for (int i = 25; i >= 0; i--) {
        uint pair = i >= 13 ? (m >> (2 * (i - 13))) & 3u : 0u;
        r = (r << 2) | pair;
        uint t = (root << 2) | 1u;
        if (r >= t) {
            r -= t;
            root = (root << 1) | 1u;
        } else {
            root <<= 1;
        }
    }
    // sqrt(v) = (root + rest) 2^(ex / 2 - 13): keep 24 bits, round on the guard and the rest.
    int sh = root >= 0x2000000u ? 2 : 1;
    uint mm = root >> sh;
    bool guard = ((root >> (sh - 1)) & 1u) != 0u;
    bool sticky = r != 0u || (sh == 2 && (root & 1u) != 0u);
    if (guard && (sticky || (mm & 1u) != 0u)) mm++;
    int me = ex / 2 - 13 + sh;
    if (mm == 0x1000000u) {
        mm = 0x800000u;
        me++;
    }
    return uintBitsToFloat((uint(me + 150) << 23) | (mm & 0x7FFFFFu));
}

// Rust's `v as i8` of an i32: the low byte, sign-extended.
int low_i8(int v) {
    return (v << 24) >> 24;
}

// The first value of largest magnitude in xv[0 .. n], with its sign, and the magnitude.
void absmax_signed(uint n, out float amax, out float vmax) {
    amax = 0.0;
    vmax = 0.0;
    [[unroll]] for (uint i = 0u; i < n; i++) {
        float v = xv[i];
        if (amax < abs(v)) {
            amax = abs(v);
            vmax = v;
        }
    }
}

#if defined(Q2_K) || defined(Q4_K) || defined(Q5_K)
#if defined(Q2_K)
// Q2_K weighs each value by |x| and fits the absolute error (use_mad).
#define WEIGHT(v, av) abs(v)
#define ERR(d) abs(d)
#else
#define WEIGHT(v, av) ((av) + abs(v))
#define ERR(d) ((d) * (d))
#endif

// make_qkx2_quants over the sub-block xv: x ~ scale * L - min_out with L in 0..nmax. `av`
// enters the weights (Q4_K, Q5_K). The quants (lq) are those of the best trial.
void make_qkx2(int nmax, float rmin, float rdelta, int nstep, float av, out float scale_out, out float min_out) {
    precise float mn = xv[0];
    precise float mx = xv[0];
    precise float sum_w = WEIGHT(xv[0], av);
    precise float sum_x = sum_w * xv[0];
    [[unroll]] for (uint i = 1u; i < SUB_N; i++) {
        float v = xv[i];
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        precise float wi = WEIGHT(v, av);
        sum_w += wi;
        sum_x += wi * v;
    }
    if (mn > 0.0) mn = 0.0;
    if (mx == mn) {
        [[unroll]] for (uint i = 0u; i < SUB_N; i++) lq[i] = 0u;
        scale_out = 0.0;
        min_out = -mn;
        return;
    }
    precise float range = mx - mn;
    precise float iscale = div_rn(float(nmax), range);
    precise float scale = div_rn(1.0, iscale);
    precise float best_error = 0.0;
    [[unroll]] for (uint i = 0u; i < SUB_N; i++) {
        float v = xv[i];
        precise float t = iscale * (v - mn);
        int l = clamp(nearest_int(t), 0, nmax);
        precise float diff = scale * float(l) + mn - v;
        precise float e = ERR(diff);
        precise float wi = WEIGHT(v, av);
        best_error += wi * e;
    }
    // The quants are recomputed from the best trial's scale and min at the end.
    float best_isc = iscale, best_m0 = mn;
    [[dont_unroll]] for (int is = 0; is <= nstep; is++) {
        // The trial scale and the quants use the min as it stands (a better fit moves it).
        precise float m0 = mn;
        precise float num = rmin + rdelta * float(is) + float(nmax);
        precise float den = mx - m0;
        precise float isc = div_rn(num, den);
        precise float sum_l = 0.0;
        precise float sum_l2 = 0.0;
        precise float sum_xl = 0.0;
        [[unroll]] for (uint i = 0u; i < SUB_N; i++) {
            float v = xv[i];
            precise float t = isc * (v - m0);
            float lf = float(clamp(nearest_int(t), 0, nmax));
            precise float wi = WEIGHT(v, av);
            sum_l += wi * lf;
            sum_l2 += wi * lf * lf;
            sum_xl += wi * lf * v;
        }
        precise float dd = sum_w * sum_l2 - sum_l * sum_l;
        if (dd > 0.0) {
            precise float ns = sum_w * sum_xl - sum_x * sum_l;
            precise float nm = sum_l2 * sum_x - sum_l * sum_xl;
            precise float this_scale = div_rn(ns, dd);
            precise float this_min = div_rn(nm, dd);
            if (this_min > 0.0) {
                this_min = 0.0;
                this_scale = div_rn(sum_xl, sum_l2);
            }
            precise float cur_error = 0.0;
            [[unroll]] for (uint i = 0u; i < SUB_N; i++) {
                float v = xv[i];
                precise float t = isc * (v - m0);
                float lf = float(clamp(nearest_int(t), 0, nmax));
                precise float diff = this_scale * lf + this_min - v;
                precise float e = ERR(diff);
                precise float wi = WEIGHT(v, av);
                cur_error += wi * e;
            }
            if (cur_error < best_error) {
                best_isc = isc;
                best_m0 = m0;
                best_error = cur_error;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    [[unroll]] for (uint i = 0u; i < SUB_N; i++) {
        precise float t = best_isc * (xv[i] - best_m0);
        lq[i] = uint(clamp(nearest_int(t), 0, nmax));
    }
    scale_out = scale;
    min_out = -mn;
}
#endif

#if defined(Q4_K) || defined(Q5_K)
#if defined(Q4_K)
#define NMAX 15
#define RMIN -1.0
#define NSTEP 20
#else
#define NMAX 31
#define RMIN -0.5
#define NSTEP 15
#endif
// q45k_common: 8 sub-blocks of 32, weights av_x + |x| (av_x = rms of the sub-block),
// 6-bit scales and mins against the largest (d = max_scale / 63, dmin = max_min / 63).
// Sub-block j of the block at byte `at` (s: its first sub-block's index in the workgroup).
void search(uint j) {
    precise float sum_x2 = 0.0;
    [[unroll]] for (uint i = 0u; i < 32u; i++) {
        float v = xv[i];
        sum_x2 += v * v;
    }
    precise float ms = sum_x2 * 0.03125; // = sum_x2 / 32, exactly
    precise float av = sqrt_rn(ms);
    float s, m;
    make_qkx2(NMAX, RMIN, 0.1, NSTEP, av, s, m);
    sh_a[gl_LocalInvocationID.x] = s;
    sh_b[gl_LocalInvocationID.x] = m;
}

void assemble(uint j, uint s, uint at) {
    precise float max_scale = 0.0;
    precise float max_min = 0.0;
    for (uint k = 0u; k < 8u; k++) {
        float sk = sh_a[s + k], mk = sh_b[s + k];
        if (sk > max_scale) max_scale = sk;
        if (mk > max_min) max_min = mk;
    }
    precise float inv_scale = max_scale > 0.0 ? div_rn(63.0, max_scale) : 0.0;
    precise float inv_min = max_min > 0.0 ? div_rn(63.0, max_min) : 0.0;
    precise float ts = inv_scale * sh_a[s + j];
    precise float tm = inv_min * sh_b[s + j];
    // `as u8` then min(63)
    uint ls = min(uint(nearest_int(ts)) & 0xFFu, 63u);
    uint lm = min(uint(nearest_int(tm)) & 0xFFu, 63u);
    if (j < 4u) {
        or_bytes(at + 4u + j, ls);
        or_bytes(at + 8u + j, lm);
    } else {
        or_bytes(at + 8u + j, (ls & 15u) | ((lm & 15u) << 4));
        or_bytes(at + j, (ls >> 4) << 6);
        or_bytes(at + 4u + j, (lm >> 4) << 6);
    }
    precise float dq = div_rn(max_scale, 63.0);
    precise float mq = div_rn(max_min, 63.0);
    uint dh = f16_of(dq), mh = f16_of(mq);
    if (j == 0u) or_bytes(at, dh | (mh << 16));
    float df = vkml_f16_bits_to_f32(dh), mf = vkml_f16_bits_to_f32(mh);
    precise float dd = df * float(ls);
    if (dd != 0.0) {
        precise float dm = mf * float(lm);
        [[unroll]] for (uint i = 0u; i < 32u; i++) {
            precise float xm = xv[i] + dm;
            precise float t = div_rn(xm, dd);
            lq[i] = uint(clamp(nearest_int(t), 0, NMAX));
        }
    }
    // Quant i of sub-block j: 4 bits of byte 16 (Q4_K; Q5_K 48) + 32 (j / 2) + i, the high
    // nibble for odd j; Q5_K's fifth bit is bit j of byte 16 + i.
#if defined(Q4_K)
    [[unroll]] for (uint k = 0u; k < 8u; k++) or_bytes(at + 16u + 32u * (j >> 1) + 4u * k, pack4(4u * k, 4u, 4u * (j & 1u)));
#else
    [[unroll]] for (uint k = 0u; k < 8u; k++) {
        or_bytes(at + 48u + 32u * (j >> 1) + 4u * k, pack4(4u * k, 4u, 4u * (j & 1u)));
        uint h = 0u;
        [[unroll]] for (uint b = 0u; b < 4u; b++) h |= ((lq[4u * k + b] >> 4) << j) << (8u * b);
        or_bytes(at + 16u + 4u * k, h);
    }
#endif
}
#endif

#if defined(Q2_K)
// 16 sub-blocks of 16, weights |x|, absolute error; 4-bit scales and mins against the
// largest (d = max_scale / 15, dmin = max_min / 15).
void search(uint j) {
    float s, m;
    make_qkx2(3, -0.5, 0.1, 15, 0.0, s, m);
    sh_a[gl_LocalInvocationID.x] = s;
    sh_b[gl_LocalInvocationID.x] = m;
}

void assemble(uint j, uint s, uint at) {
    precise float max_scale = 0.0;
    precise float max_min = 0.0;
    for (uint k = 0u; k < 16u; k++) {
        float sk = sh_a[s + k], mk = sh_b[s + k];
        if (sk > max_scale) max_scale = sk;
        if (mk > max_min) max_min = mk;
    }
    uint sc = 0u;
    uint dh = 0u, mh = 0u;
    if (max_scale > 0.0) {
        precise float iscale = div_rn(15.0, max_scale);
        precise float t = iscale * sh_a[s + j];
        sc = uint(nearest_int(t)) & 0xFFu;
        precise float dq = div_rn(max_scale, 15.0);
        dh = f16_of(dq);
    }
    if (max_min > 0.0) {
        precise float iscale = div_rn(15.0, max_min);
        precise float t = iscale * sh_b[s + j];
        sc = (sc | (uint(nearest_int(t)) << 4)) & 0xFFu;
        precise float mq = div_rn(max_min, 15.0);
        mh = f16_of(mq);
    }
    or_bytes(at + j, sc);
    if (j == 0u) or_bytes(at + 80u, dh | (mh << 16));
    float df = vkml_f16_bits_to_f32(dh), mf = vkml_f16_bits_to_f32(mh);
    precise float d = df * float(sc & 15u);
    if (d != 0.0) {
        precise float dm = mf * float(sc >> 4);
        [[unroll]] for (uint i = 0u; i < 16u; i++) {
            precise float xm = xv[i] + dm;
            precise float t = div_rn(xm, d);
            lq[i] = uint(clamp(nearest_int(t), 0, 3));
        }
    }
    // Value i of the super-block (16 j + ..): 2 bits (at 2 ((i % 128) / 32)) of byte
    // 16 + 32 (i / 128) + i % 32.
    uint q = (j & 7u) >> 1;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        or_bytes(at + 16u + 32u * (j >> 3) + 16u * (j & 1u) + 4u * k, pack4(4u * k, 2u, 2u * q));
    }
}
#endif

#if defined(Q3_K)
// make_q3_quants(n = 16, nmax = 4, do_rmse): quants in -4..3 (stored + 4), weights x^2,
// refined value by value (5 rounds at most) while the fit improves.
float make_q3() {
    float amax, vmax;
    absmax_signed(16u, amax, vmax);
    if (amax < EPS) {
        [[unroll]] for (uint i = 0u; i < 16u; i++) lq[i] = 0u;
        return 0.0;
    }
    precise float iscale = div_rn(-4.0, vmax);
    int lc[16];
    precise float sumlx = 0.0;
    precise float suml2 = 0.0;
    [[unroll]] for (uint i = 0u; i < 16u; i++) {
        float v = xv[i];
        precise float t = iscale * v;
        int l = clamp(nearest_int(t), -4, 3);
        lc[i] = l;
        precise float wt = v * v;
        sumlx += wt * v * float(l);
        suml2 += wt * float(l) * float(l);
    }
    [[dont_unroll]] for (int itr = 0; itr < 5; itr++) {
        int n_changed = 0;
        [[unroll]] for (uint i = 0u; i < 16u; i++) {
            float v = xv[i];
            precise float wt = v * v;
            precise float slx = sumlx - wt * v * float(lc[i]);
            if (slx > 0.0) {
                precise float sl2 = suml2 - wt * float(lc[i]) * float(lc[i]);
                precise float vs = v * sl2;
                precise float t = div_rn(vs, slx);
                int nl = clamp(nearest_int(t), -4, 3);
                if (nl != lc[i]) {
                    slx += wt * v * float(nl);
                    sl2 += wt * float(nl) * float(nl);
                    precise float lhs = slx * slx * suml2;
                    precise float rhs = sumlx * sumlx * sl2;
                    if (sl2 > 0.0 && lhs > rhs) {
                        lc[i] = nl;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    [[unroll]] for (uint i = 0u; i < 16u; i++) lq[i] = uint(lc[i] + 4);
    precise float r = suml2 > 0.0 ? div_rn(sumlx, suml2) : 0.0;
    return r;
}

// 16 sub-blocks of 16; 6-bit signed scales against the one of largest magnitude
// (d = 1 / (-32 / max_scale)), packed 4 + 4 low bits and 2 high bits per scale.
void search(uint j) {
    sh_a[gl_LocalInvocationID.x] = make_q3();
}

void assemble(uint j, uint s, uint at) {
    float max_scale = 0.0, amax = 0.0;
    for (uint k = 0u; k < 16u; k++) {
        float sk = sh_a[s + k];
        if (abs(sk) > amax) {
            amax = abs(sk);
            max_scale = sk;
        }
    }
    // lv: the scale as stored (0..63, 32 the zero).
    uint lv = 0u;
    uint dh = 0u;
    if (max_scale != 0.0) {
        precise float iscale = div_rn(-32.0, max_scale);
        precise float t = iscale * sh_a[s + j];
        lv = uint(clamp(low_i8(nearest_int(t)), -32, 31) + 32);
        // Low 4 bits in byte 96 + j % 8 (the high nibble from j = 8), the top 2 in byte
        // 104 + j % 4 at bit 2 (j / 4).
        or_bytes(at + 96u + (j & 7u), (lv & 15u) << (4u * (j >> 3)));
        or_bytes(at + 104u + (j & 3u), (lv >> 4) << (2u * (j >> 2)));
        precise float dq = div_rn(1.0, iscale);
        dh = f16_of(dq);
    }
    if (j == 0u) or_bytes(at + 108u, dh);
    float df = vkml_f16_bits_to_f32(dh);
    precise float d = df * float(int(lv) - 32);
    if (d != 0.0) {
        [[unroll]] for (uint i = 0u; i < 16u; i++) {
            precise float t = div_rn(xv[i], d);
            lq[i] = uint(clamp(nearest_int(t), -4, 3) + 4);
        }
    }
    // Value i of the super-block (16 j + ..): its low 2 bits (at 2 ((i % 128) / 32)) in byte
    // 32 + 32 (i / 128) + i % 32, the third bit at bit i / 32 of byte i % 32 (hmask).
    uint q = (j & 7u) >> 1;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint ii = 16u * (j & 1u) + 4u * k;
        or_bytes(at + 32u + 32u * (j >> 3) + ii, pack4(4u * k, 2u, 2u * q));
        uint h = 0u;
        [[unroll]] for (uint b = 0u; b < 4u; b++) h |= ((lq[4u * k + b] >> 2) << (j >> 1)) << (8u * b);
        or_bytes(at + ii, h);
    }
}
#endif

#if defined(Q6_K)
// make_qx_quants(n = 16, nmax = 32, rmse_type 1): quants in -32..31 (stored + 32), weights
// x^2, the best of nmax / max and 18 trial scales -(32 + 0.1 is) / max.
float make_qx() {
    float amax, vmax;
    absmax_signed(16u, amax, vmax);
    if (amax < EPS) {
        [[unroll]] for (uint i = 0u; i < 16u; i++) lq[i] = 0u;
        return 0.0;
    }
    precise float iscale = div_rn(-32.0, vmax);
    precise float sumlx = 0.0;
    precise float suml2 = 0.0;
    [[unroll]] for (uint i = 0u; i < 16u; i++) {
        float v = xv[i];
        precise float t = iscale * v;
        int l = clamp(nearest_int(t), -32, 31);
        precise float wt = v * v;
        sumlx += wt * v * float(l);
        suml2 += wt * float(l) * float(l);
    }
    precise float scale = suml2 != 0.0 ? div_rn(sumlx, suml2) : 0.0;
    precise float best = scale * sumlx;
    // The quants are recomputed from the best trial's scale at the end.
    float best_isc = iscale;
    [[dont_unroll]] for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        precise float num = -(32.0 + 0.1 * float(is));
        precise float isc = div_rn(num, vmax);
        precise float slx = 0.0;
        precise float sl2 = 0.0;
        [[unroll]] for (uint i = 0u; i < 16u; i++) {
            float v = xv[i];
            precise float t = isc * v;
            float lf = float(clamp(nearest_int(t), -32, 31));
            precise float wt = v * v;
            slx += wt * v * lf;
            sl2 += wt * lf * lf;
        }
        precise float lhs = slx * slx;
        precise float rhs = best * sl2;
        if (sl2 > 0.0 && lhs > rhs) {
            best_isc = isc;
            scale = div_rn(slx, sl2);
            best = scale * slx;
        }
    }
    [[unroll]] for (uint i = 0u; i < 16u; i++) {
        precise float t = best_isc * xv[i];
        lq[i] = uint(clamp(nearest_int(t), -32, 31) + 32);
    }
    return scale;
}

// 16 sub-blocks of 16; 8-bit signed scales against the one of largest magnitude
// (d = 1 / (-128 / max_scale)); a super-block whose scales are all below 1e-15 is all zeros.
void search(uint j) {
    sh_a[gl_LocalInvocationID.x] = make_qx();
}

void assemble(uint j, uint s, uint at) {
    float max_scale = 0.0, max_abs = 0.0;
    for (uint k = 0u; k < 16u; k++) {
        float sk = sh_a[s + k];
        if (abs(sk) > max_abs) {
            max_abs = abs(sk);
            max_scale = sk;
        }
    }
    if (max_abs < EPS) return; // all zeros
    precise float iscale = div_rn(-128.0, max_scale);
    precise float dq = div_rn(1.0, iscale);
    uint dh = f16_of(dq);
    if (j == 0u) or_bytes(at + 208u, dh);
    precise float t0 = iscale * sh_a[s + j];
    int sc = low_i8(min(nearest_int(t0), 127));
    or_bytes(at + 192u + j, uint(sc) & 0xFFu);
    float df = vkml_f16_bits_to_f32(dh);
    precise float d = df * float(sc);
    if (d != 0.0) {
        [[unroll]] for (uint i = 0u; i < 16u; i++) {
            precise float t = div_rn(xv[i], d);
            lq[i] = uint(clamp(nearest_int(t), -32, 31) + 32);
        }
    }
    // Value i of the super-block (16 j + ..), h = i / 128, q = (i % 128) / 32: its low 4 bits
    // in byte 64 h + 32 (q % 2) + i % 32 (high nibble for q >= 2), the high 2 at bit 2 q of
    // byte 128 + 32 h + i % 32.
    uint q = (j & 7u) >> 1, h = j >> 3;
    [[unroll]] for (uint k = 0u; k < 4u; k++) {
        uint ii = 16u * (j & 1u) + 4u * k;
        or_bytes(at + 64u * h + 32u * (q & 1u) + ii, pack4(4u * k, 4u, 4u * (q >> 1)));
        uint hb = 0u;
        [[unroll]] for (uint b = 0u; b < 4u; b++) hb |= ((lq[4u * k + b] >> 4) << (2u * q)) << (8u * b);
        or_bytes(at + 128u + 32u * h + ii, hb);
    }
}
#endif

#if defined(Q8_K)
// quantize_row_q8_K_ref: iscale = -127 / (the signed value of largest magnitude), quants
// nearest_int(iscale x) (at most 127), d = 1 / iscale as f32, bsums per 16; zeros stay zeros.
// Per sub-block of 16: its first value of largest magnitude (the block's is the first of
// those of largest magnitude).
void search(uint j) {
    float amax, vmax;
    absmax_signed(16u, amax, vmax);
    sh_a[gl_LocalInvocationID.x] = amax;
    sh_b[gl_LocalInvocationID.x] = vmax;
}

void assemble(uint j, uint s, uint at) {
    float amax = 0.0, vmax = 0.0;
    for (uint k = 0u; k < 16u; k++) {
        if (amax < sh_a[s + k]) {
            amax = sh_a[s + k];
            vmax = sh_b[s + k];
        }
    }
    if (amax == 0.0) return;
    precise float iscale = div_rn(-127.0, vmax);
    int sum = 0;
    [[unroll]] for (uint i = 0u; i < 16u; i++) {
        precise float t = iscale * xv[i];
        int q = low_i8(min(nearest_int(t), 127));
        lq[i] = uint(q) & 0xFFu;
        sum += q;
    }
    [[unroll]] for (uint k = 0u; k < 4u; k++) or_bytes(at + 4u + 16u * j + 4u * k, pack4(4u * k, 8u, 0u));
    or_bytes(at + 260u + 2u * j, uint(sum) & 0xFFFFu);
    precise float d = div_rn(1.0, iscale);
    if (j == 0u) or_bytes(at, floatBitsToUint(d));
}
#endif

#if defined(IQ4_NL) || defined(IQ4_XS)
// The 16 levels (kvalues_iq4nl): -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69,
// 89, 113.

// best_index_int8: the index of the level nearest v (a tie to the upper one), and the level.
// The level above v is the first of levels 1 .. 15 above it, else level 15, compared
// branch-free (ggml bisects, after taking v <= -127 to 0 and v >= 113 to 15, which this
// gives too; a NaN gets 15).
uint best_index(float v, out float level) {
    uint mu = 15u;
    float lo_l = 89.0, hi_l = 113.0;
    bool below;
#define BELOW(k, lo, hi)                     \
    below = v < hi;                          \
    mu = below ? uint(k) : mu;               \
    lo_l = below ? lo : lo_l;                \
    hi_l = below ? hi : hi_l
    BELOW(14, 69.0, 89.0);
    BELOW(13, 53.0, 69.0);
    BELOW(12, 38.0, 53.0);
    BELOW(11, 25.0, 38.0);
    BELOW(10, 13.0, 25.0);
    BELOW(9, 1.0, 13.0);
    BELOW(8, -10.0, 1.0);
    BELOW(7, -22.0, -10.0);
    BELOW(6, -35.0, -22.0);
    BELOW(5, -49.0, -35.0);
    BELOW(4, -65.0, -49.0);
    BELOW(3, -83.0, -65.0);
    BELOW(2, -104.0, -83.0);
    BELOW(1, -127.0, -104.0);
#undef BELOW
    precise float lo = v - lo_l;
    precise float hi = hi_l - v;
    bool down = lo < hi;
    level = down ? lo_l : hi_l;
    return down ? mu - 1u : mu;
}

// quantize_row_iq4_nl_impl's scale of the 32 values xv (weights x^2): the fit at
// d = max / -127 (or -max / -127 with trials), then trial scales (itry - 127) / max for
// itry in -ntry..ntry. 0 where the largest magnitude is below 1e-15 (then `zero`). lq: the
// quants of the first fit.
float iq4_scale(int ntry, out bool zero) {
    float amax, vmax;
    absmax_signed(32u, amax, vmax);
    zero = amax < EPS;
    if (zero) return 0.0;
    precise float d = ntry > 0 ? div_rn(-vmax, -127.0) : div_rn(vmax, -127.0);
    precise float id = div_rn(1.0, d);
    precise float sumqx = 0.0;
    precise float sumq2 = 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        float v = xv[j];
        precise float al = id * v;
        float q;
        lq[j] = best_index(al, q);
        precise float wt = v * v;
        sumqx += wt * q * v;
        sumq2 += wt * q * q;
    }
    d = sumq2 > 0.0 ? div_rn(sumqx, sumq2) : 0.0;
    precise float best = d * sumqx;
    [[dont_unroll]] for (int itry = -ntry; itry <= ntry; itry++) {
        precise float tid = div_rn(float(itry - 127), vmax);
        precise float sqx = 0.0;
        precise float sq2 = 0.0;
        [[unroll]] for (uint j = 0u; j < 32u; j++) {
            float v = xv[j];
            precise float al = tid * v;
            float q;
            best_index(al, q);
            precise float wt = v * v;
            sqx += wt * q * v;
            sq2 += wt * q * q;
        }
        precise float lhs = sqx * sqx;
        precise float rhs = best * sq2;
        if (sq2 > 0.0 && lhs > rhs) {
            d = div_rn(sqx, sq2);
            best = d * sqx;
        }
    }
    return d;
}

// The quants lq[0 .. 32] (byte at + i % 16, the high nibble from i = 16) ORed in.
void put_iq4_quants(uint at) {
    [[unroll]] for (uint k = 0u; k < 4u; k++) or_bytes(at + 4u * k, pack4(4u * k, 4u, 0u) | pack4(16u + 4u * k, 4u, 4u));
}
#endif

#if defined(IQ4_NL)
// One invocation per block of 32. A zero block (scale 0) takes the quants of the first fit
// (d = max / -127) of the nearest previous block that is not, read from x.
void search(uint j) {}

void assemble(uint j, uint s, uint at) {
    bool zero;
    float d = iq4_scale(-1, zero);
    or_bytes(at, f16_of(d));
    if (!zero) {
        put_iq4_quants(at + 2u);
        return;
    }
    // The CPU's stale scratch quants: those of the previous block that is not zero.
    uint g = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * WG_BLOCKS + s + p.x_off / 32u;
    for (uint k = 1u; k <= 16u && k <= g; k++) {
        [[unroll]] for (uint i = 0u; i < 32u; i++) xv[i] = x[32u * (g - k) + i];
        float amax, vmax;
        absmax_signed(32u, amax, vmax);
        if (amax >= EPS) {
            precise float d0 = div_rn(vmax, -127.0);
            precise float id = div_rn(1.0, d0);
            [[unroll]] for (uint i = 0u; i < 32u; i++) {
                precise float al = id * xv[i];
                float q;
                lq[i] = best_index(al, q);
            }
            put_iq4_quants(at + 2u);
            return;
        }
    }
}
#endif

#if defined(IQ4_XS)
// 8 sub-blocks of 32 (ntry 7); 6-bit signed scales against the largest magnitude
// (d = -max_scale / 32), the quants re-chosen with the scales as quantized.
void search(uint j) {
    bool zero;
    sh_a[gl_LocalInvocationID.x] = iq4_scale(7, zero);
}

void assemble(uint ib, uint s, uint at) {
    float max_scale = 0.0, amax_scale = 0.0;
    for (uint k = 0u; k < 8u; k++) {
        float sk = sh_a[s + k];
        if (abs(sk) > amax_scale) {
            amax_scale = abs(sk);
            max_scale = sk;
        }
    }
    precise float d = -max_scale * 0.03125; // = -max_scale / 32, exactly
    precise float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    precise float t = id * sh_a[s + ib];
    int li = clamp(nearest_int(t), -32, 31);
    precise float dl = d * float(li);
    precise float idl = dl != 0.0 ? div_rn(1.0, dl) : 0.0;
    [[unroll]] for (uint j = 0u; j < 32u; j++) {
        precise float al = idl * xv[j];
        float q;
        lq[j] = best_index(al, q);
    }
    put_iq4_quants(at + 8u + 16u * ib);
    // d (f16) in bytes 0 and 1, the scales' top 2 bits in bytes 2 and 3 (2 ib), the low 4 in
    // byte 4 + ib / 2 (the high nibble for odd ib).
    uint lu = uint(li + 32);
    or_bytes(at + 4u + ib / 2u, (lu & 15u) << (4u * (ib & 1u)));
    or_bytes(at, ((lu >> 4) << (16u + 2u * ib)) | (ib == 0u ? f16_of(d) : 0u));
}
#endif

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint j = lid % SUBS, s = lid - j; // the sub-block, and its block's first invocation
    uint b = wg * WG_BLOCKS + lid / SUBS;
    bool valid = b < p.n_blocks;
    for (uint i = lid; i < WG_WORDS; i += WG) stage[i] = 0u;
    if (valid) {
        uint e0 = p.x_off + b * BLOCK_ELEMS + j * SUB_N;
        [[unroll]] for (uint i = 0u; i < SUB_N; i++) xv[i] = x[e0 + i];
        search(j);
    }
    barrier();
    if (valid) assemble(j, s, (lid / SUBS) * BLOCK_BYTES);
    barrier();
    uint base = wg * WG_WORDS;
    for (uint i = lid; i < WG_WORDS; i += WG) {
        if (base + i < p.n_words) y[base + i] = stage[i];
    }
}
