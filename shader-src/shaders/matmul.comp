//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
// Batched float matmul (vkml_ops::matmul, candle's BackendStorage::matmul):
// y[b, i, j] = sum_k a[a_off + b * a_bs + i * a_rs + k * a_cs] * b[b_off + b * b_bs + k * b_rs + j * b_cs]
// with y packed [batch, m, n]. Any element strides (a transposed operand is a stride
// swap, a broadcast batch a stride of 0), read directly without a copy.
// Tiled in shared memory: a workgroup of (TILE / 4)^2 invocations computes a TILE x TILE
// tile of y, each invocation 4 x 4 elements, over k in steps of 16. Accumulates in V_T
// (f32 for f16 and bf16, rounded once on store).
// Bindings: 0 = a, 1 = b, 2 = y. Grid: (ceil(n / TILE), ceil(m / TILE), batch).
// Push constants: m, n, k, a_off, a_bs, a_rs, a_cs, b_off, b_bs, b_rs, b_cs (elements).
// Specialization constants: 0 = workgroup size (must be (TILE / 4)^2), 1 = TILE (a
// multiple of 4; vkml_ops::tuning::matmul_config picks it per device).
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(V_F64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define VKML_INT64 1
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(constant_id = 1) const uint TILE = 64;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A { V_ST xa[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { V_ST xb[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint m;
    uint n;
    uint k;
    uint a_off;
    uint a_bs;
    uint a_rs;
    uint a_cs;
    uint b_off;
    uint b_bs;
    uint b_rs;
    uint b_cs;
} p;

#define BK 16u
#define TQ (TILE / 4u)   // invocations per tile row / column
#define LD (TILE + 1u)   // shared row stride
shared V_T ta[BK * LD];
shared V_T tb[BK * LD];

void main() {
    uint t = gl_LocalInvocationID.x;
    uint tx = t % TQ; // column group: columns tx + TQ * c
    uint ty = t / TQ; // row group: rows ty + TQ * r
    uint row0 = gl_WorkGroupID.y * TILE;
    uint col0 = gl_WorkGroupID.x * TILE;
    uint bi = gl_WorkGroupID.z;
    uint a_base = p.a_off + bi * p.a_bs;
    uint b_base = p.b_off + bi * p.b_bs;
    V_T acc[4][4];
    for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 4; ++c) acc[r][c] = V_T(0);
    }
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        // TILE x 16 elements of each operand, 4 per invocation.
        for (uint e = t; e < TILE * BK; e += TQ * TQ) {
            uint kk = e % BK;
            uint i = e / BK;
            uint gi = row0 + i;
            uint gk = k0 + kk;
            ta[kk * LD + i] = (gi < p.m && gk < p.k) ? V_LOAD(xa, a_base + gi * p.a_rs + gk * p.a_cs) : V_T(0);
            uint j = e % TILE;
            uint kb = e / TILE;
            uint gj = col0 + j;
            uint gkb = k0 + kb;
            tb[kb * LD + j] = (gj < p.n && gkb < p.k) ? V_LOAD(xb, b_base + gkb * p.b_rs + gj * p.b_cs) : V_T(0);
        }
        barrier();
        for (uint kk = 0u; kk < BK; ++kk) {
            V_T av[4];
            V_T bv[4];
            for (int r = 0; r < 4; ++r) av[r] = ta[kk * LD + ty + TQ * uint(r)];
            for (int c = 0; c < 4; ++c) bv[c] = tb[kk * LD + tx + TQ * uint(c)];
            for (int r = 0; r < 4; ++r) {
                for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
            }
        }
        barrier();
    }
    uint y_base = bi * p.m * p.n;
    for (int r = 0; r < 4; ++r) {
        uint gi = row0 + ty + TQ * uint(r);
        if (gi >= p.m) continue;
        for (int c = 0; c < 4; ++c) {
            uint gj = col0 + tx + TQ * uint(c);
            if (gj < p.n) V_STORE(y, y_base + gi * p.n + gj, acc[r][c]);
        }
    }
}
