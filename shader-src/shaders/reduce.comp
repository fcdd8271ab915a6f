//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
//! variant arg_f32 V_F32=1 ARG=1
//! variant arg_f16 V_F16=1 ARG=1
//! variant arg_bf16 V_BF16=1 ARG=1
//! variant arg_f64 V_F64=1 ARG=1
//! variant arg_u8 V_U8=1 ARG=1
//! variant arg_u32 V_U32=1 ARG=1
//! variant arg_i64 V_I64=1 ARG=1
// Reductions over a set of dims (vkml_ops::reduce, candle's ReduceOp: sum, min, max,
// argmin, argmax). Output element o (row-major over the kept dims) reduces the source
// elements src[src_off + kept(o) + red(j)], j < r_n, where kept(o) = sum_d k_idx_d(o) *
// k_str[d] over k_shape[0..k_rank] and red(j) = sum_d r_idx_d(j) * r_str[d] over
// r_shape[0..r_rank], both row-major.
//
// Sums accumulate in V_T (f32 for f16 and bf16, rounded once at the end; integers wrap).
// min / max / argmin / argmax follow candle's CPU fold, which starts from element j = 0
// and takes a later element only when it is strictly smaller (larger): the first of equal
// extremes wins, NaN elements are skipped, and a NaN at j = 0 is the result. Indices are
// u32 positions j along the reduced dims (the ARG variants).
//
// MODE (specialization constant 2): 0 = one workgroup per output, invocations stride over
// j and combine in shared memory; 1 = one invocation per output, j in order (the CPU's
// summation order), for short reductions.
// Bindings: 0 = src, 1 = y (V_ST, or u32 in the ARG variants).
// Push constants: n_out, r_n, src_off, k_rank, r_rank, k_shape[6], k_str[6], r_shape[6],
// r_str[6] (elements).
// Specialization constants: 0 = workgroup size (a power of two), 1 = op: 0 sum, 1 min,
// 2 max (argmin / argmax are min / max in the ARG variants), 2 = MODE.
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
layout(constant_id = 2) const uint MODE = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer S { V_ST src[]; };
#ifdef ARG
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
#else
layout(std430, set = 0, binding = 1) writeonly buffer Y { V_ST y[]; };
#endif
layout(push_constant) uniform P {
    uint n_out;
    uint r_n;
    uint src_off;
    uint k_rank;
    uint r_rank;
    uint k_shape[VKML_MAX_RANK];
    uint k_str[VKML_MAX_RANK];
    uint r_shape[VKML_MAX_RANK];
    uint r_str[VKML_MAX_RANK];
} p;

#define NONE 0xffffffffu
shared V_T s_val[gl_WorkGroupSize.x];
shared uint s_idx[gl_WorkGroupSize.x];

uint kept_offset(uint o) {
    uint off = 0u;
    for (uint d = p.k_rank; d > 0u; --d) {
        uint q = o / p.k_shape[d - 1u];
        off += (o - q * p.k_shape[d - 1u]) * p.k_str[d - 1u];
        o = q;
    }
    return off;
}

uint red_offset(uint j) {
    uint off = 0u;
    for (uint d = p.r_rank; d > 0u; --d) {
        uint q = j / p.r_shape[d - 1u];
        off += (j - q * p.r_shape[d - 1u]) * p.r_str[d - 1u];
        j = q;
    }
    return off;
}

// Whether candidate (v, j) replaces the best (b, bj) (bj == NONE: nothing yet). Used with
// candidates in increasing j within one invocation, and to merge two partial results
// (then the smaller index wins a tie).
bool better(V_T v, uint j, V_T b, uint bj) {
    if (bj == NONE) return true;
    if (OP == 1u) return v < b || (v == b && j < bj);
    return v > b || (v == b && j < bj);
}

void store(uint o, V_T v, uint j) {
#ifdef ARG
    y[o] = j;
#else
    V_STORE(y, o, v);
#endif
}

void main() {
    uint t = gl_LocalInvocationID.x;
    uint base;
    uint o;
    if (MODE == 1u) {
        o = vkml_global_index_1d();
        if (o >= p.n_out) return;
        base = p.src_off + kept_offset(o);
        V_T first = V_LOAD(src, base);
        if (OP == 0u) {
            V_T acc = first;
            for (uint j = 1u; j < p.r_n; ++j) acc += V_LOAD(src, base + red_offset(j));
            store(o, acc, 0u);
            return;
        }
        V_T b = first;
        uint bj = V_ISNAN(first) ? 0u : NONE;
        if (bj == NONE) {
            for (uint j = 0u; j < p.r_n; ++j) {
                V_T v = V_LOAD(src, base + red_offset(j));
                if (!V_ISNAN(v) && better(v, j, b, bj)) { b = v; bj = j; }
            }
        }
        store(o, b, bj);
        return;
    }
    o = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (o >= p.n_out) return; // uniform over the workgroup
    base = p.src_off + kept_offset(o);
    V_T acc = V_T(0);
    uint bj = NONE;
    for (uint j = t; j < p.r_n; j += gl_WorkGroupSize.x) {
        V_T v = V_LOAD(src, base + red_offset(j));
        if (OP == 0u) {
            acc += v;
        } else if (!V_ISNAN(v) && better(v, j, acc, bj)) {
            acc = v;
            bj = j;
        }
    }
    s_val[t] = acc;
    s_idx[t] = bj;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (t < s) {
            if (OP == 0u) {
                s_val[t] += s_val[t + s];
            } else if (s_idx[t + s] != NONE && better(s_val[t + s], s_idx[t + s], s_val[t], s_idx[t])) {
                s_val[t] = s_val[t + s];
                s_idx[t] = s_idx[t + s];
            }
        }
        barrier();
    }
    if (t == 0u) {
        V_T first = V_LOAD(src, base);
        if (OP != 0u && (V_ISNAN(first) || s_idx[0] == NONE)) {
            store(o, first, 0u);
        } else {
            store(o, s_val[0], s_idx[0]);
        }
    }
}
