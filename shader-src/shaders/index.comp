//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
//! variant u8 V_U8=1
//! variant u32 V_U32=1
//! variant i64 V_I64=1
// Indexing ops (vkml_ops::index; candle's index_select, gather, scatter_set,
// scatter_add_set, index_add) on packed row-major operands seen as [left, dim, right].
// Indices are read as 32-bit words whatever their dtype (u8, u32 or i64: specialization
// constant 2), so one kernel per value dtype serves every index dtype; i64 indices that
// are negative or past 2^32 - 1 count as out of range.
//
// MODE (specialization constant 1), with D = the indexed dim of src or dst, N = ids' dim:
//   0 index_select  y[l, i, r] = src[l, ids[i], r]            ids: [N]; one invocation per y
//   1 gather        y[l, i, r] = src[l, ids[l, i, r], r]      ids: [left, N, right]
//   2 scatter_set   dst[l, ids[l, i, r], r] = src[l, i, r]     (the last i wins, as candle's CPU)
//   3 scatter_add   dst[l, ids[l, i, r], r] += src[l, i, r]    (in order of i)
//   4 index_add     y[l, k, r] = base[l, k, r] + sum over i with ids[i] == k of src[l, i, r]
// Modes 2-4 run one invocation per destination element, which scans the N indices: no
// atomics, the result does not depend on scheduling, and sums keep candle's order.
// Sums are in V_T (f32 for f16 / bf16, rounded once at the end).
// An index >= D sets bit MODE of status[0] (atomicOr) and is skipped (0 for a gathered
// element); the host reports it as an error.
// Bindings: 0 = src, 1 = ids (words), 2 = y / dst (read-write), 3 = base (mode 4), 4 = status.
// Push constants: n (invocations), left, d_src, right, n_idx, d_dst, src_off, ids_off,
// y_off, base_off (elements of each operand's dtype).
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
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint IDS_DT = 1;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer S { V_ST src[]; };
layout(std430, set = 0, binding = 1) readonly buffer I { uint ids[]; };
layout(std430, set = 0, binding = 2) buffer Y { V_ST y[]; };
layout(std430, set = 0, binding = 3) readonly buffer B { V_ST base[]; };
layout(std430, set = 0, binding = 4) buffer St { uint status[]; };
layout(push_constant) uniform P {
    uint n;
    uint left;
    uint d_src;
    uint right;
    uint n_idx;
    uint d_dst;
    uint src_off;
    uint ids_off;
    uint y_off;
    uint base_off;
} p;

#define OUT_OF_RANGE 0xffffffffu

// Index element e (from ids_off) as u32; OUT_OF_RANGE for i64 values outside [0, 2^32).
uint index_at(uint e) {
    e += p.ids_off;
    if (IDS_DT == 0u) return (ids[e >> 2] >> ((e & 3u) * 8u)) & 0xffu;
    if (IDS_DT == 1u) return ids[e];
    return ids[2u * e + 1u] != 0u ? OUT_OF_RANGE : ids[2u * e];
}

void flag() {
    atomicOr(status[0], 1u << MODE);
}

void main() {
    uint g = vkml_global_index_1d();
    if (g >= p.n) return;
    uint r = g % p.right;
    uint q = g / p.right;
    if (MODE <= 1u) {
        uint i = q % p.n_idx;
        uint l = q / p.n_idx;
        uint k = index_at(MODE == 0u ? i : g);
        if (k >= p.d_src) {
            flag();
            V_STORE(y, p.y_off + g, V_T(0));
            return;
        }
        y[p.y_off + g] = src[p.src_off + (l * p.d_src + k) * p.right + r];
        return;
    }
    uint k = q % p.d_dst;
    uint l = q / p.d_dst;
    if (MODE == 2u) {
        bool hit = false;
        uint from = 0u;
        for (uint i = 0u; i < p.n_idx; ++i) {
            uint e = (l * p.n_idx + i) * p.right + r;
            uint t = index_at(e);
            if (t == k) { hit = true; from = e; }
            if (t >= p.d_dst && k == 0u) flag();
        }
        if (hit) y[p.y_off + g] = src[p.src_off + from];
        return;
    }
    V_T acc = MODE == 3u ? V_LOAD(y, p.y_off + g) : V_LOAD(base, p.base_off + g);
    for (uint i = 0u; i < p.n_idx; ++i) {
        uint t = index_at(MODE == 3u ? (l * p.n_idx + i) * p.right + r : i);
        if (t == k) acc += V_LOAD(src, p.src_off + (l * p.n_idx + i) * p.right + r);
        if (t >= p.d_dst && k == 0u) flag();
    }
    V_STORE(y, p.y_off + g, acc);
}
