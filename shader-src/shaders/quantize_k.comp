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
// src/quantize.rs): per sub-block a scale search (Q2_K, Q4_K, Q5_K: make_qkx2_quants, a
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
// Each invocation writes whole 32-bit words: one block, or two consecutive blocks for the
// types whose block is not a multiple of 4 bytes (Q6_K 210, Q3_K 110, IQ4_NL 18), blocks
// packed from byte 0.
// Bindings: 0 = x (f32), 1 = y (the part's blocks, as words). Push constants: x_off (element
// of x where the part's first block starts), n_blocks (blocks in the part), n_words (words
// of y). Grid: x (then y) over blocks (pairs of blocks for Q6_K, Q3_K, IQ4_NL).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "strided.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint x_off; uint n_blocks; uint n_words; } p;

#if defined(Q4_K)
#define BLOCK_BYTES 144u
#define BLOCK_ELEMS 256u
#elif defined(Q5_K)
#define BLOCK_BYTES 176u
#define BLOCK_ELEMS 256u
#elif defined(Q6_K)
#define BLOCK_BYTES 210u
#define BLOCK_ELEMS 256u
#define PAIRED 1
#elif defined(Q2_K)
#define BLOCK_BYTES 84u
#define BLOCK_ELEMS 256u
#elif defined(Q3_K)
#define BLOCK_BYTES 110u
#define BLOCK_ELEMS 256u
#define PAIRED 1
#elif defined(Q8_K)
#define BLOCK_BYTES 292u
#define BLOCK_ELEMS 256u
#elif defined(IQ4_NL)
#define BLOCK_BYTES 18u
#define BLOCK_ELEMS 32u
#define PAIRED 1
#else
#define BLOCK_BYTES 136u
#define BLOCK_ELEMS 256u
#endif
#if defined(PAIRED)
#define INV_BLOCKS 2u
#else
#define INV_BLOCKS 1u
#endif
#define INV_WORDS (INV_BLOCKS * BLOCK_BYTES / 4u)

// ggml's GROUP_MAX_EPS.
const float EPS = 1e-15;

uint w[INV_WORDS];

void put8(uint at, uint v) {
    w[at >> 2] |= (v & 0xFFu) << ((at & 3u) * 8u);
}

void put16(uint at, uint v) {
    put8(at, v);
    put8(at + 1u, v >> 8);
}

// Bits [shift, shift + bits) of byte `at` set to v, the others kept.
void set_bits(uint at, uint shift, uint bits, uint v) {
    uint s = (at & 3u) * 8u + shift;
    uint mask = ((1u << bits) - 1u) << s;
    w[at >> 2] = (w[at >> 2] & ~mask) | ((v << s) & mask);
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

// a / b rounded to nearest even as IEEE 754 (Vulkan lets division be 2.5 ulp off): long
// division of the significands in integers. Zeros, infinities, NaN, subnormal operands and
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
    // ma / mb in [1, 2): 24 quotient bits and a guard bit; the remainder is the sticky bit.
    uint q = 0u, r = ma;
    for (int i = 0; i < 25; i++) {
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

// Quant i (0..BLOCK_ELEMS) of the block at byte `at` set to v, in the type's layout.
void set_l(uint at, uint i, uint v) {
#if defined(Q4_K)
    uint r = i & 63u;
    set_bits(at + 16u + 32u * (i >> 6) + (r & 31u), (r >> 5) * 4u, 4u, v);
#elif defined(Q5_K)
    uint c = i >> 6, r = i & 63u;
    set_bits(at + 48u + 32u * c + (r & 31u), (r >> 5) * 4u, 4u, v & 15u);
    set_bits(at + 16u + (r & 31u), 2u * c + (r >> 5), 1u, v >> 4);
#elif defined(Q6_K)
    uint h = i >> 7, q = (i & 127u) >> 5, ii = i & 31u;
    set_bits(at + 64u * h + 32u * (q & 1u) + ii, (q >> 1) * 4u, 4u, v & 15u);
    set_bits(at + 128u + 32u * h + ii, 2u * q, 2u, v >> 4);
#elif defined(Q2_K)
    uint h = i >> 7, q = (i & 127u) >> 5, ii = i & 31u;
    set_bits(at + 16u + 32u * h + ii, 2u * q, 2u, v);
#elif defined(Q3_K)
    // Low 2 bits in qs, the third in hmask (ggml: l > 3 sets the bit and subtracts 4).
    uint h = i >> 7, q = (i & 127u) >> 5, ii = i & 31u;
    set_bits(at + 32u + 32u * h + ii, 2u * q, 2u, v & 3u);
    set_bits(at + ii, i >> 5, 1u, v >> 2);
#elif defined(Q8_K)
    set_bits(at + 4u + i, 0u, 8u, v);
#elif defined(IQ4_NL)
    set_bits(at + 2u + (i & 15u), (i >> 4) * 4u, 4u, v);
#else
    uint ib = i >> 5, j = i & 31u;
    set_bits(at + 8u + 16u * ib + (j & 15u), (j >> 4) * 4u, 4u, v);
#endif
}

// The first value of largest magnitude in x[e0 .. e0 + n], with its sign, and the magnitude.
void absmax_signed(uint e0, uint n, out float amax, out float vmax) {
    amax = 0.0;
    vmax = 0.0;
    for (uint i = 0u; i < n; i++) {
        float v = x[e0 + i];
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

// make_qkx2_quants over x[e0 .. e0 + n] (quants l0 .. l0 + n of the block at `at`):
// x ~ scale * L - min_out with L in 0..nmax. `av` enters the weights (Q4_K, Q5_K).
void make_qkx2(uint at, uint e0, uint l0, uint n, int nmax, float rmin, float rdelta, int nstep, float av,
               out float scale_out, out float min_out) {
    precise float mn = x[e0];
    precise float mx = x[e0];
    precise float sum_w = WEIGHT(x[e0], av);
    precise float sum_x = sum_w * x[e0];
    for (uint i = 1u; i < n; i++) {
        float v = x[e0 + i];
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        precise float wi = WEIGHT(v, av);
        sum_w += wi;
        sum_x += wi * v;
    }
    if (mn > 0.0) mn = 0.0;
    if (mx == mn) {
        for (uint i = 0u; i < n; i++) set_l(at, l0 + i, 0u);
        scale_out = 0.0;
        min_out = -mn;
        return;
    }
    precise float range = mx - mn;
    precise float iscale = div_rn(float(nmax), range);
    precise float scale = div_rn(1.0, iscale);
    precise float best_error = 0.0;
    for (uint i = 0u; i < n; i++) {
        float v = x[e0 + i];
        precise float t = iscale * (v - mn);
        int l = clamp(nearest_int(t), 0, nmax);
        set_l(at, l0 + i, uint(l));
        precise float diff = scale * float(l) + mn - v;
        precise float e = ERR(diff);
        precise float wi = WEIGHT(v, av);
        best_error += wi * e;
    }
    for (int is = 0; is <= nstep; is++) {
        // The trial scale and the quants use the min as it stands (a better fit moves it).
        precise float m0 = mn;
        precise float num = rmin + rdelta * float(is) + float(nmax);
        precise float den = mx - m0;
        precise float isc = div_rn(num, den);
        precise float sum_l = 0.0;
        precise float sum_l2 = 0.0;
        precise float sum_xl = 0.0;
        for (uint i = 0u; i < n; i++) {
            float v = x[e0 + i];
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
            for (uint i = 0u; i < n; i++) {
                float v = x[e0 + i];
                precise float t = isc * (v - m0);
                float lf = float(clamp(nearest_int(t), 0, nmax));
                precise float diff = this_scale * lf + this_min - v;
                precise float e = ERR(diff);
                precise float wi = WEIGHT(v, av);
                cur_error += wi * e;
            }
            if (cur_error < best_error) {
                for (uint i = 0u; i < n; i++) {
                    precise float t = isc * (x[e0 + i] - m0);
                    set_l(at, l0 + i, uint(clamp(nearest_int(t), 0, nmax)));
                }
                best_error = cur_error;
                scale = this_scale;
                mn = this_min;
            }
        }
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
void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 256u;
    float scales[8], mins[8];
    precise float max_scale = 0.0;
    precise float max_min = 0.0;
    for (uint j = 0u; j < 8u; j++) {
        precise float sum_x2 = 0.0;
        for (uint i = 0u; i < 32u; i++) {
            float v = x[e0 + 32u * j + i];
            sum_x2 += v * v;
        }
        precise float ms = sum_x2 * 0.03125; // = sum_x2 / 32, exactly
        precise float av = sqrt_rn(ms);
        float s, m;
        make_qkx2(at, e0 + 32u * j, 32u * j, 32u, NMAX, RMIN, 0.1, NSTEP, av, s, m);
        scales[j] = s;
        mins[j] = m;
        if (s > max_scale) max_scale = s;
        if (m > max_min) max_min = m;
    }
    precise float inv_scale = max_scale > 0.0 ? div_rn(63.0, max_scale) : 0.0;
    precise float inv_min = max_min > 0.0 ? div_rn(63.0, max_min) : 0.0;
    uint ls[8], lm[8];
    for (uint j = 0u; j < 8u; j++) {
        precise float ts = inv_scale * scales[j];
        precise float tm = inv_min * mins[j];
        // `as u8` then min(63)
        ls[j] = min(uint(nearest_int(ts)) & 0xFFu, 63u);
        lm[j] = min(uint(nearest_int(tm)) & 0xFFu, 63u);
        if (j < 4u) {
            put8(at + 4u + j, ls[j]);
            put8(at + 8u + j, lm[j]);
        } else {
            put8(at + 8u + j, (ls[j] & 15u) | ((lm[j] & 15u) << 4));
            put8(at + j, (ls[j] >> 4) << 6);
            put8(at + 4u + j, (lm[j] >> 4) << 6);
        }
    }
    precise float dq = div_rn(max_scale, 63.0);
    precise float mq = div_rn(max_min, 63.0);
    uint dh = f16_of(dq), mh = f16_of(mq);
    put16(at, dh);
    put16(at + 2u, mh);
    float df = vkml_f16_bits_to_f32(dh), mf = vkml_f16_bits_to_f32(mh);
    for (uint j = 0u; j < 8u; j++) {
        precise float dd = df * float(ls[j]);
        if (dd == 0.0) continue;
        precise float dm = mf * float(lm[j]);
        for (uint i = 0u; i < 32u; i++) {
            precise float xm = x[e0 + 32u * j + i] + dm;
            precise float t = div_rn(xm, dd);
            set_l(at, 32u * j + i, uint(clamp(nearest_int(t), 0, NMAX)));
        }
    }
}
#endif

#if defined(Q2_K)
// 16 sub-blocks of 16, weights |x|, absolute error; 4-bit scales and mins against the
// largest (d = max_scale / 15, dmin = max_min / 15).
void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 256u;
    float scales[16], mins[16];
    precise float max_scale = 0.0;
    precise float max_min = 0.0;
    for (uint j = 0u; j < 16u; j++) {
        float s, m;
        make_qkx2(at, e0 + 16u * j, 16u * j, 16u, 3, -0.5, 0.1, 15, 0.0, s, m);
        scales[j] = s;
        mins[j] = m;
        if (s > max_scale) max_scale = s;
        if (m > max_min) max_min = m;
    }
    uint sc[16];
    for (uint j = 0u; j < 16u; j++) sc[j] = 0u;
    uint dh = 0u, mh = 0u;
    if (max_scale > 0.0) {
        precise float iscale = div_rn(15.0, max_scale);
        for (uint j = 0u; j < 16u; j++) {
            precise float t = iscale * scales[j];
            sc[j] = uint(nearest_int(t)) & 0xFFu;
        }
        precise float dq = div_rn(max_scale, 15.0);
        dh = f16_of(dq);
    }
    if (max_min > 0.0) {
        precise float iscale = div_rn(15.0, max_min);
        for (uint j = 0u; j < 16u; j++) {
            precise float t = iscale * mins[j];
            sc[j] = (sc[j] | (uint(nearest_int(t)) << 4)) & 0xFFu;
        }
        precise float mq = div_rn(max_min, 15.0);
        mh = f16_of(mq);
    }
    for (uint j = 0u; j < 16u; j++) put8(at + j, sc[j]);
    put16(at + 80u, dh);
    put16(at + 82u, mh);
    float df = vkml_f16_bits_to_f32(dh), mf = vkml_f16_bits_to_f32(mh);
    for (uint j = 0u; j < 16u; j++) {
        precise float d = df * float(sc[j] & 15u);
        if (d == 0.0) continue;
        precise float dm = mf * float(sc[j] >> 4);
        for (uint i = 0u; i < 16u; i++) {
            precise float xm = x[e0 + 16u * j + i] + dm;
            precise float t = div_rn(xm, d);
            set_l(at, 16u * j + i, uint(clamp(nearest_int(t), 0, 3)));
        }
    }
}
#endif

#if defined(Q3_K)
// make_q3_quants(n = 16, nmax = 4, do_rmse): quants in -4..3 (stored + 4), weights x^2,
// refined value by value (5 rounds at most) while the fit improves.
float make_q3(uint at, uint e0, uint l0) {
    float amax, vmax;
    absmax_signed(e0, 16u, amax, vmax);
    if (amax < EPS) {
        for (uint i = 0u; i < 16u; i++) set_l(at, l0 + i, 0u);
        return 0.0;
    }
    precise float iscale = div_rn(-4.0, vmax);
    int lc[16];
    precise float sumlx = 0.0;
    precise float suml2 = 0.0;
    for (uint i = 0u; i < 16u; i++) {
        float v = x[e0 + i];
        precise float t = iscale * v;
        int l = clamp(nearest_int(t), -4, 3);
        lc[i] = l;
        precise float wt = v * v;
        sumlx += wt * v * float(l);
        suml2 += wt * float(l) * float(l);
    }
    for (int itr = 0; itr < 5; itr++) {
        int n_changed = 0;
        for (uint i = 0u; i < 16u; i++) {
            float v = x[e0 + i];
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
    for (uint i = 0u; i < 16u; i++) set_l(at, l0 + i, uint(lc[i] + 4));
    precise float r = suml2 > 0.0 ? div_rn(sumlx, suml2) : 0.0;
    return r;
}

// 16 sub-blocks of 16; 6-bit signed scales against the one of largest magnitude
// (d = 1 / (-32 / max_scale)), packed 4 + 4 low bits and 2 high bits per scale.
void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 256u;
    float scales[16];
    float max_scale = 0.0, amax = 0.0;
    for (uint j = 0u; j < 16u; j++) {
        scales[j] = make_q3(at, e0 + 16u * j, 16u * j);
        float s = abs(scales[j]);
        if (s > amax) {
            amax = s;
            max_scale = scales[j];
        }
    }
    uint sc[12];
    for (uint j = 0u; j < 12u; j++) sc[j] = 0u;
    uint dh = 0u;
    if (max_scale != 0.0) {
        precise float iscale = div_rn(-32.0, max_scale);
        for (uint j = 0u; j < 16u; j++) {
            precise float t = iscale * scales[j];
            uint lv = uint(clamp(low_i8(nearest_int(t)), -32, 31) + 32);
            if (j < 8u) {
                sc[j] = lv & 15u;
            } else {
                sc[j - 8u] |= (lv & 15u) << 4;
            }
            sc[j % 4u + 8u] |= (lv >> 4) << (2u * (j / 4u));
        }
        precise float dq = div_rn(1.0, iscale);
        dh = f16_of(dq);
    }
    for (uint j = 0u; j < 12u; j++) put8(at + 96u + j, sc[j]);
    put16(at + 108u, dh);
    float df = vkml_f16_bits_to_f32(dh);
    for (uint j = 0u; j < 16u; j++) {
        uint s = j < 8u ? sc[j] & 15u : sc[j - 8u] >> 4;
        s |= ((sc[8u + j % 4u] >> (2u * (j / 4u))) & 3u) << 4;
        precise float d = df * float(int(s) - 32);
        if (d == 0.0) continue;
        for (uint i = 0u; i < 16u; i++) {
            precise float t = div_rn(x[e0 + 16u * j + i], d);
            set_l(at, 16u * j + i, uint(clamp(nearest_int(t), -4, 3) + 4));
        }
    }
}
#endif

#if defined(Q6_K)
// make_qx_quants(n = 16, nmax = 32, rmse_type 1): quants in -32..31 (stored + 32), weights
// x^2, the best of nmax / max and 18 trial scales -(32 + 0.1 is) / max.
float make_qx(uint at, uint e0, uint l0) {
    float amax, vmax;
    absmax_signed(e0, 16u, amax, vmax);
    if (amax < EPS) {
        for (uint i = 0u; i < 16u; i++) set_l(at, l0 + i, 0u);
        return 0.0;
    }
    precise float iscale = div_rn(-32.0, vmax);
    precise float sumlx = 0.0;
    precise float suml2 = 0.0;
    for (uint i = 0u; i < 16u; i++) {
        float v = x[e0 + i];
        precise float t = iscale * v;
        int l = clamp(nearest_int(t), -32, 31);
        set_l(at, l0 + i, uint(l + 32));
        precise float wt = v * v;
        sumlx += wt * v * float(l);
        suml2 += wt * float(l) * float(l);
    }
    precise float scale = suml2 != 0.0 ? div_rn(sumlx, suml2) : 0.0;
    precise float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        precise float num = -(32.0 + 0.1 * float(is));
        precise float isc = div_rn(num, vmax);
        precise float slx = 0.0;
        precise float sl2 = 0.0;
        for (uint i = 0u; i < 16u; i++) {
            float v = x[e0 + i];
            precise float t = isc * v;
            float lf = float(clamp(nearest_int(t), -32, 31));
            precise float wt = v * v;
            slx += wt * v * lf;
            sl2 += wt * lf * lf;
        }
        precise float lhs = slx * slx;
        precise float rhs = best * sl2;
        if (sl2 > 0.0 && lhs > rhs) {
            for (uint i = 0u; i < 16u; i++) {
                precise float t = isc * x[e0 + i];
                set_l(at, l0 + i, uint(clamp(nearest_int(t), -32, 31) + 32));
            }
            scale = div_rn(slx, sl2);
            best = scale * slx;
        }
    }
    return scale;
}

// 16 sub-blocks of 16; 8-bit signed scales against the one of largest magnitude
// (d = 1 / (-128 / max_scale)); a super-block whose scales are all below 1e-15 is all zeros.
void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 256u;
    float scales[16];
    float max_scale = 0.0, max_abs = 0.0;
    for (uint j = 0u; j < 16u; j++) {
        scales[j] = make_qx(at, e0 + 16u * j, 16u * j);
        float s = abs(scales[j]);
        if (s > max_abs) {
            max_abs = s;
            max_scale = scales[j];
        }
    }
    if (max_abs < EPS) {
        for (uint i = 0u; i < BLOCK_BYTES; i++) set_bits(at + i, 0u, 8u, 0u);
        return;
    }
    precise float iscale = div_rn(-128.0, max_scale);
    precise float dq = div_rn(1.0, iscale);
    uint dh = f16_of(dq);
    put16(at + 208u, dh);
    int sc[16];
    for (uint j = 0u; j < 16u; j++) {
        precise float t = iscale * scales[j];
        sc[j] = low_i8(min(nearest_int(t), 127));
        put8(at + 192u + j, uint(sc[j]));
    }
    float df = vkml_f16_bits_to_f32(dh);
    for (uint j = 0u; j < 16u; j++) {
        precise float d = df * float(sc[j]);
        if (d == 0.0) continue;
        for (uint i = 0u; i < 16u; i++) {
            precise float t = div_rn(x[e0 + 16u * j + i], d);
            set_l(at, 16u * j + i, uint(clamp(nearest_int(t), -32, 31) + 32));
        }
    }
}
#endif

#if defined(Q8_K)
// quantize_row_q8_K_ref: iscale = -127 / (the signed value of largest magnitude), quants
// nearest_int(iscale x) (at most 127), d = 1 / iscale as f32, bsums per 16; zeros stay zeros.
void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 256u;
    float amax, vmax;
    absmax_signed(e0, 256u, amax, vmax);
    if (amax == 0.0) return;
    precise float iscale = div_rn(-127.0, vmax);
    int sum = 0;
    for (uint j = 0u; j < 256u; j++) {
        precise float t = iscale * x[e0 + j];
        int q = low_i8(min(nearest_int(t), 127));
        put8(at + 4u + j, uint(q));
        sum += q;
        if ((j & 15u) == 15u) {
            put16(at + 260u + 2u * (j >> 4), uint(sum));
            sum = 0;
        }
    }
    precise float d = div_rn(1.0, iscale);
    w[at >> 2] = floatBitsToUint(d); // at is a multiple of 4 (292-byte blocks)
}
#endif

#if defined(IQ4_NL) || defined(IQ4_XS)
const int KV[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

// best_index_int8: the index of the level nearest v (bisection; a tie to the upper one).
uint best_index(float v) {
    if (v <= float(KV[0])) return 0u;
    if (v >= float(KV[15])) return 15u;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (v < float(KV[mav])) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    precise float lo = v - float(KV[mu - 1]);
    precise float hi = float(KV[mu]) - v;
    return lo < hi ? uint(mu - 1) : uint(mu);
}

// quantize_row_iq4_nl_impl's scale of the 32 values at e0 (weights x^2): the fit at
// d = max / -127 (or -max / -127 with trials), then trial scales (itry - 127) / max for
// itry in -ntry..ntry. 0 where the largest magnitude is below 1e-15 (then `zero`).
float iq4_scale(uint e0, int ntry, out bool zero) {
    float amax, vmax;
    absmax_signed(e0, 32u, amax, vmax);
    zero = amax < EPS;
    if (zero) return 0.0;
    precise float d = ntry > 0 ? div_rn(-vmax, -127.0) : div_rn(vmax, -127.0);
    precise float id = div_rn(1.0, d);
    precise float sumqx = 0.0;
    precise float sumq2 = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        float v = x[e0 + j];
        precise float al = id * v;
        float q = float(KV[best_index(al)]);
        precise float wt = v * v;
        sumqx += wt * q * v;
        sumq2 += wt * q * q;
    }
    d = sumq2 > 0.0 ? div_rn(sumqx, sumq2) : 0.0;
    precise float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        precise float tid = div_rn(float(itry - 127), vmax);
        precise float sqx = 0.0;
        precise float sq2 = 0.0;
        for (uint j = 0u; j < 32u; j++) {
            float v = x[e0 + j];
            precise float al = tid * v;
            float q = float(KV[best_index(al)]);
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
#endif

#if defined(IQ4_NL)
// The quants of the first fit (d = max / -127) of the block at element e0 (not a zero one).
void iq4_nl_quants(uint at, uint e0) {
    float amax, vmax;
    absmax_signed(e0, 32u, amax, vmax);
    precise float d = div_rn(vmax, -127.0);
    precise float id = div_rn(1.0, d);
    for (uint j = 0u; j < 32u; j++) {
        precise float al = id * x[e0 + j];
        set_l(at, j, best_index(al));
    }
}

void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 32u;
    bool zero;
    float d = iq4_scale(e0, -1, zero);
    put16(at, f16_of(d));
    if (!zero) {
        iq4_nl_quants(at, e0);
        return;
    }
    // The CPU's stale scratch quants: those of the previous block that is not zero.
    uint g = e0 / 32u;
    for (uint k = 1u; k <= 16u && k <= g; k++) {
        float amax, vmax;
        absmax_signed(32u * (g - k), 32u, amax, vmax);
        if (amax >= EPS) {
            iq4_nl_quants(at, 32u * (g - k));
            return;
        }
    }
}
#endif

#if defined(IQ4_XS)
// 8 sub-blocks of 32 (ntry 7); 6-bit signed scales against the largest magnitude
// (d = -max_scale / 32), the quants re-chosen with the scales as quantized.
void quantize_block(uint b, uint at) {
    uint e0 = p.x_off + b * 256u;
    float scales[8];
    float max_scale = 0.0, amax_scale = 0.0;
    for (uint ib = 0u; ib < 8u; ib++) {
        bool zero;
        scales[ib] = iq4_scale(e0 + 32u * ib, 7, zero);
        if (abs(scales[ib]) > amax_scale) {
            amax_scale = abs(scales[ib]);
            max_scale = scales[ib];
        }
    }
    precise float d = -max_scale * 0.03125; // = -max_scale / 32, exactly
    precise float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    uint sh = 0u;
    for (uint ib = 0u; ib < 8u; ib++) {
        precise float t = id * scales[ib];
        int li = clamp(nearest_int(t), -32, 31);
        precise float dl = d * float(li);
        precise float idl = dl != 0.0 ? div_rn(1.0, dl) : 0.0;
        for (uint j = 0u; j < 32u; j++) {
            precise float al = idl * x[e0 + 32u * ib + j];
            set_l(at, 32u * ib + j, best_index(al));
        }
        uint lu = uint(li + 32);
        put8(at + 4u + ib / 2u, (lu & 15u) << (4u * (ib & 1u)));
        sh |= (lu >> 4) << (2u * ib);
    }
    put16(at, f16_of(d));
    put16(at + 2u, sh);
}
#endif

void main() {
    uint inv = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint b0 = INV_BLOCKS * inv;
    if (b0 >= p.n_blocks) return;
    for (uint i = 0u; i < INV_WORDS; i++) w[i] = 0u;
    quantize_block(b0, 0u);
#if defined(PAIRED)
    if (b0 + 1u < p.n_blocks) quantize_block(b0 + 1u, BLOCK_BYTES);
#endif
    uint base = inv * INV_WORDS;
    for (uint i = 0u; i < INV_WORDS; i++) {
        if (base + i < p.n_words) y[base + i] = w[i];
    }
}
