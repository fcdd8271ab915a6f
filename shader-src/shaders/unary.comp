//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// Strided unary ops (vkml_ops::elementwise::{unary, affine, powf, elu, softcap}): for i < n,
// y[i] = f(x[x_off + sum_d idx_d(i) * x_str[d]]), idx(i) the row-major multi-index of i
// over shape[0..rank], y contiguous. f32 arithmetic for f32, f16 and bf16 (dtype.glsl:
// exact widening, one rounding on store). The f64 variant computes in double: every op,
// the transcendental ones through include/math64.glsl (a few ulp; candle's f64 formulas);
// the integer variants have candle's integer forms (abs, floor/ceil/round as identity,
// relu, sign; gelu, gelu_erf, erf, silu give 0 as candle). The host refuses the other
// (op, dtype) pairs.
// Bindings: 0 = x, 1 = y (the variant's dtype).
// Push constants: n, rank (1..=6), x_off, p0, p1 (the op's f32 parameters), shape[6],
// x_str[6] (elements), pw[4] (affine's parameters for f64 and integers; powf's exponent
// and elu's alpha as f64 bits in pw[0..2] for f64).
// Specialization constants: 0 = workgroup size, 1 = op: the OP_* codes below, which
// ops/src/elementwise.rs (`UnaryKind::code`) mirrors. Formulas as candle-core 0.11
// (src/op.rs, cpu_backend) computes them in f32.
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(V_U8)
#extension GL_EXT_shader_8bit_storage : require
#endif
#if defined(V_F64) || defined(V_I64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define VKML_INT64 1
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(constant_id = 1) const uint OP = 0;
#include "common.glsl"
#include "activation.glsl"
#include "strided.glsl"
#include "dtype.glsl"

#define OP_EXP 0u
#define OP_LOG 1u
#define OP_SIN 2u
#define OP_COS 3u
#define OP_ABS 4u
#define OP_NEG 5u
#define OP_RECIP 6u
#define OP_SQR 7u
#define OP_SQRT 8u
#define OP_GELU 9u
#define OP_GELU_ERF 10u
#define OP_ERF 11u
#define OP_RELU 12u
#define OP_SILU 13u
#define OP_TANH 14u
#define OP_FLOOR 15u
#define OP_CEIL 16u
#define OP_ROUND 17u
#define OP_SIGN 18u
#define OP_AFFINE 19u
#define OP_POWF 20u
#define OP_ELU 21u
#define OP_SOFTCAP 22u
#define OP_SIGMOID 23u

layout(std430, set = 0, binding = 0) readonly buffer X { V_ST x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint x_off;
    float p0;
    float p1;
    uint shape[VKML_MAX_RANK];
    uint x_str[VKML_MAX_RANK];
    // affine's mul and add for the f64 and integer variants: f64 bits, or the integer
    // (candle's T::from_f64 of the parameters), low word first.
    uint pw[4];
} p;

#define NAN uintBitsToFloat(0x7fc00000u)
#define INF uintBitsToFloat(0x7f800000u)

// f32::round: half-way cases away from zero. x - trunc(x) is exact in f32.
float round_away(float x) {
    float t = trunc(x);
    return abs(x - t) >= 0.5 ? t + (x < 0.0 ? -1.0 : 1.0) : t;
}

// f32::powf: IEEE pow's special cases around exp2(e * log2(|x|)).
float powf_ieee(float x, float e) {
    if (e == 0.0 || x == 1.0) return 1.0;
    // Exact for the common exponents (and no spurious overflow near f32::MAX).
    if (e == 1.0) return x;
    if (e == 2.0) return x * x;
    if (isnan(x) || isnan(e)) return NAN;
    float ax = abs(x);
    if (isinf(e)) {
        if (ax == 1.0) return 1.0;
        return (ax > 1.0) == (e > 0.0) ? INF : 0.0;
    }
    bool e_int = floor(e) == e;
    if (x < 0.0 && !isinf(x) && !e_int) return NAN;
    // Integers of 2^24 and more are even.
    bool e_odd = e_int && abs(e) < 16777216.0 && mod(e, 2.0) == 1.0;
    float mag;
    if (ax == 0.0) {
        mag = e > 0.0 ? 0.0 : INF;
    } else if (isinf(ax)) {
        mag = e > 0.0 ? INF : 0.0;
    } else {
        mag = exp2(e * log2(ax));
    }
    // Negative base (-0 and -inf included) to an odd integer power is negative.
    return (e_odd && (floatBitsToUint(x) >> 31) != 0u) ? -mag : mag;
}

float apply_f32(float v) {
    if (OP == OP_EXP) return exp(v);
    if (OP == OP_LOG) return v < 0.0 ? NAN : (v == 0.0 ? -INF : log(v));
    if (OP == OP_SIN) return sin(v);
    if (OP == OP_COS) return cos(v);
    if (OP == OP_ABS) return abs(v);
    if (OP == OP_NEG) return -v;
    if (OP == OP_RECIP) return 1.0 / v;
    if (OP == OP_SQR) return v * v;
    if (OP == OP_SQRT) return v < 0.0 ? NAN : sqrt(v);
    if (OP == OP_GELU) return act_gelu(v);
    if (OP == OP_GELU_ERF) return act_gelu_erf(v);
    if (OP == OP_ERF) return erf_approx(v);
    if (OP == OP_RELU) return v > 0.0 ? v : 0.0;
    if (OP == OP_SILU) return act_silu(v);
    // tanh saturates to +-1 in f32 beyond |x| = 9.1; clamping keeps exp-based
    // implementations away from inf / inf.
    if (OP == OP_TANH) return isnan(v) ? v : tanh(clamp(v, -10.0, 10.0));
    if (OP == OP_FLOOR) return floor(v);
    if (OP == OP_CEIL) return ceil(v);
    if (OP == OP_ROUND) return round_away(v);
    if (OP == OP_SIGN) return float(v > 0.0) - float(v < 0.0);
    if (OP == OP_AFFINE) {
        // Two roundings, as candle's v * mul + add: no fused multiply-add.
        precise float r = v * p.p0 + p.p1;
        return r;
    }
    if (OP == OP_POWF) return powf_ieee(v, p.p0);
    // candle-nn's sigmoid: 1 / (1 + exp(-v)).
    if (OP == OP_SIGMOID) return 1.0 / (1.0 + exp(-v));
    // p1 * tanh(v * p0) with p0 = 1 / p1 (include/activation.glsl).
    if (OP == OP_SOFTCAP) return softcap(v, p.p0, p.p1);
    // OP_ELU: candle's elu, v if the sign bit is clear, else (exp(v) - 1) * alpha.
    return (floatBitsToUint(v) >> 31) == 0u ? v : (exp(v) - 1.0) * p.p0;
}

#if defined(V_F64)
#include "math64.glsl"

double round_away_f64(double x) {
    double t = trunc(x);
    return abs(x - t) >= 0.5lf ? t + (x < 0.0lf ? -1.0lf : 1.0lf) : t;
}

// f64::powf: IEEE pow's special cases around exp(e log |x|).
double powf64(double x, double e) {
    if (e == 0.0lf || x == 1.0lf) return 1.0lf;
    if (e == 1.0lf) return x;
    if (e == 2.0lf) return x * x;
    if (isnan(x) || isnan(e)) return M64_NAN;
    double ax = abs(x);
    if (isinf(e)) {
        if (ax == 1.0lf) return 1.0lf;
        return (ax > 1.0lf) == (e > 0.0lf) ? M64_INF : 0.0lf;
    }
    bool e_int = floor(e) == e;
    if (x < 0.0lf && !isinf(x) && !e_int) return M64_NAN;
    // Integers of 2^53 and more are even.
    bool e_odd = e_int && abs(e) < 9007199254740992.0lf && mod(e, 2.0lf) == 1.0lf;
    double mag;
    if (ax == 0.0lf) {
        mag = e > 0.0lf ? 0.0lf : M64_INF;
    } else if (isinf(ax)) {
        mag = e > 0.0lf ? M64_INF : 0.0lf;
    } else {
        mag = exp64(e * log64(ax));
    }
    // Negative base (-0 and -inf included) to an odd integer power is negative.
    return (e_odd && (unpackDouble2x32(x).y >> 31) != 0u) ? -mag : mag;
}

double apply(double v) {
    double pa = packDouble2x32(uvec2(p.pw[0], p.pw[1]));
    if (OP == OP_EXP) return exp64(v);
    if (OP == OP_LOG) return log64(v);
    if (OP == OP_SIN) return sin64(v);
    if (OP == OP_COS) return cos64(v);
    if (OP == OP_TANH) return tanh64(v);
    if (OP == OP_ERF) return erf64(v);
    // candle: 0.5 v (1 + tanh(sqrt(2 / pi) v (1 + 0.044715 v^2))).
    if (OP == OP_GELU) return 0.5lf * v * (1.0lf + tanh64(0.7978845608028654lf * v * (1.0lf + 0.044715lf * v * v)));
    // candle: (erf(v / sqrt 2) + 1) 0.5 v.
    if (OP == OP_GELU_ERF) return (erf64(v * 0.7071067811865476lf) + 1.0lf) * 0.5lf * v;
    if (OP == OP_SILU) return v / (1.0lf + exp64(-v));
    if (OP == OP_POWF) return powf64(v, pa);
    if (OP == OP_ELU) return (unpackDouble2x32(v).y >> 31) == 0u ? v : (exp64(v) - 1.0lf) * pa;
    if (OP == OP_ABS) return abs(v);
    if (OP == OP_NEG) return -v;
    if (OP == OP_RECIP) return 1.0lf / v;
    if (OP == OP_SQR) return v * v;
    if (OP == OP_SQRT) return sqrt(v);
    if (OP == OP_RELU) return v > 0.0lf ? v : 0.0lf;
    if (OP == OP_FLOOR) return floor(v);
    if (OP == OP_CEIL) return ceil(v);
    if (OP == OP_ROUND) return round_away_f64(v);
    if (OP == OP_SIGN) return double(v > 0.0lf) - double(v < 0.0lf);
    if (OP == OP_AFFINE) {
        precise double r = v * packDouble2x32(uvec2(p.pw[0], p.pw[1])) + packDouble2x32(uvec2(p.pw[2], p.pw[3]));
        return r;
    }
    return 0.0lf;
}
#elif defined(V_INT)
V_T apply(V_T v) {
#ifdef V_I64
    if (OP == OP_ABS) return v < 0l ? -v : v;
    if (OP == OP_RELU) return v > 0l ? v : 0l;
    if (OP == OP_SIGN) return int64_t(v > 0l) - int64_t(v < 0l);
#else
    if (OP == OP_ABS || OP == OP_RELU) return v;
    if (OP == OP_SIGN) return min(v, 1u);
#endif
    if (OP == OP_FLOOR || OP == OP_CEIL || OP == OP_ROUND) return v;
    if (OP == OP_AFFINE) {
#ifdef V_I64
        return v * int64_t(packUint2x32(uvec2(p.pw[0], p.pw[1]))) + int64_t(packUint2x32(uvec2(p.pw[2], p.pw[3])));
#else
        return v * p.pw[0] + p.pw[2];
#endif
    }
    return V_T(0); // gelu, gelu_erf, erf, silu: candle's integer forms return 0
}
#else
float apply(float v) { return apply_f32(v); }
#endif

void main() {
    uint i = vkml_global_index_1d();
    if (i >= p.n) return;
    uint r = i;
    uint ix = p.x_off;
    for (uint d = p.rank - 1u; d > 0u; --d) {
        uint q = r / p.shape[d];
        ix += (r - q * p.shape[d]) * p.x_str[d];
        r = q;
    }
    ix += r * p.x_str[0];
    V_STORE(y, i, apply(V_LOAD(x, ix)));
}
