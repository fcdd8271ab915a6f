//! target vulkan1.3
// F16 matmul on cooperative matrices for aligned operands (vkml_ops::matmul's CoopMat path
// when the layout allows): as matmul_cm.comp,
//   y[b, i, j] = sum_k a[b, i, k] * b[b, k, j],   y packed [batch, m, n],
// but every global load is 16 bytes (8 halves) and the tiles are double-buffered with the
// next step's loads in flight during the current step's products (one barrier per step).
// Needs a contiguous along k (a_cs = 1) and b contiguous along n (b_cs = 1, B_KMAJOR = 0:
// b row-major, the plain a b) or along k (b_rs = 1, B_KMAJOR = 1: b = w^T for a row-major
// w [n, k], as x w^T), every other stride and offset a multiple of 8, k a multiple of 8,
// and n a multiple of 8 when B_KMAJOR = 0 (the host checks; matmul_cm.comp takes the rest).
// One workgroup of 256 invocations = 8 subgroups of 32 computes a 128 x 128 tile of y over
// k in steps of 32; subgroup s owns rows 32 (s % 4) .. + 32 and columns 64 (s / 4) .. + 64
// as 2 x 4 accumulators. f32 accumulation; each result rounded once to f16 (round to
// nearest even) through a staging tile.
// Bindings: 0 = a, 1 = b, 2 = y. Grid: (ceil(n / 128), ceil(m / 128), batch).
// Push constants: m, n, k, a_off, a_bs, a_rs, a_cs, b_off, b_bs, b_rs, b_cs (elements).
// Specialization constants: 1 = B_KMAJOR. Requires subgroups of 32.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#define V_F16 1
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint B_KMAJOR = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A { uvec4 a8[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { uvec4 b8[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { uint16_t y[]; };
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

#define BM 128u
#define BN 128u
#define BK 32u
// Shared tiles in f16vec4 units. k-major rows (a, and b when B_KMAJOR): BK / 4 = 8 plus 2
// of padding (80-byte rows spread the banks). n-major rows (b otherwise): BN / 4 = 32
// plus 2.
#define LK 10u
#define LN 34u
#define A_TILE (BM * LK)
#define B_TILE (BN * LK) // >= BK * LN = 1088
shared f16vec4 sa[2u * A_TILE];
shared f16vec4 sb[2u * B_TILE];
shared float stage[8u * 256u];

#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

// This invocation's 2 + 2 vectors of 8 halves for the step at k0.
uvec4 ra[2];
uvec4 rb[2];

void load(uint k0, uint row0, uint col0, uint a_base, uint b_base) {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint q = 0u; q < 2u; ++q) {
        uint e = t + 256u * q;   // 512 vectors per tile
        // a: row e / 4, k vector e % 4.
        uint i = e / 4u;
        uint gk = k0 + 8u * (e % 4u);
        uint gi = row0 + i;
        ra[q] = (gi < p.m && gk < p.k) ? a8[(a_base + gi * p.a_rs + gk) / 8u] : uvec4(0u);
        if (B_KMAJOR == 1u) {
            // b: column j = e / 4 (a row of w), k vector e % 4.
            uint gj = col0 + e / 4u;
            rb[q] = (gj < p.n && gk < p.k) ? b8[(b_base + gj * p.b_cs + gk) / 8u] : uvec4(0u);
        } else {
            // b: k row e / 16, n vector e % 16.
            uint gkb = k0 + e / 16u;
            uint gj = col0 + 8u * (e % 16u);
            rb[q] = (gj < p.n && gkb < p.k) ? b8[(b_base + gkb * p.b_rs + gj) / 8u] : uvec4(0u);
        }
    }
}

f16vec4 lo4(uvec4 v) { return f16vec4(unpackFloat2x16(v.x), unpackFloat2x16(v.y)); }
f16vec4 hi4(uvec4 v) { return f16vec4(unpackFloat2x16(v.z), unpackFloat2x16(v.w)); }

void store(uint buf) {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint q = 0u; q < 2u; ++q) {
        uint e = t + 256u * q;
        uint ai = buf * A_TILE + (e / 4u) * LK + 2u * (e % 4u);
        sa[ai] = lo4(ra[q]);
        sa[ai + 1u] = hi4(ra[q]);
        uint bi = B_KMAJOR == 1u ? buf * B_TILE + (e / 4u) * LK + 2u * (e % 4u)
                                 : buf * B_TILE + (e / 16u) * LN + 2u * (e % 16u);
        sb[bi] = lo4(rb[q]);
        sb[bi + 1u] = hi4(rb[q]);
    }
}

void main() {
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint wm = (sg % 4u) * 32u;
    uint wn = (sg / 4u) * 64u;
    uint row0 = gl_WorkGroupID.y * BM;
    uint col0 = gl_WorkGroupID.x * BN;
    uint bi = gl_WorkGroupID.z;
    uint a_base = p.a_off + bi * p.a_bs;
    uint b_base = p.b_off + bi * p.b_bs;
    MAT_C acc[2][4];
    [[unroll]] for (uint r = 0u; r < 2u; ++r) {
        [[unroll]] for (uint c = 0u; c < 4u; ++c) acc[r][c] = MAT_C(0.0);
    }
    load(0u, row0, col0, a_base, b_base);
    store(0u);
    barrier();
    uint cur = 0u;
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        bool more = k0 + BK < p.k;
        if (more) load(k0 + BK, row0, col0, a_base, b_base);
        [[unroll]] for (uint ks = 0u; ks < BK; ks += 16u) {
            MAT_A ma[2];
            MAT_B mb[4];
            [[unroll]] for (uint r = 0u; r < 2u; ++r) {
                coopMatLoad(ma[r], sa, cur * A_TILE + (wm + 16u * r) * LK + ks / 4u, LK, gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                if (B_KMAJOR == 1u) {
                    coopMatLoad(mb[c], sb, cur * B_TILE + (wn + 16u * c) * LK + ks / 4u, LK, gl_CooperativeMatrixLayoutColumnMajor);
                } else {
                    coopMatLoad(mb[c], sb, cur * B_TILE + ks * LN + (wn + 16u * c) / 4u, LN, gl_CooperativeMatrixLayoutRowMajor);
                }
            }
            [[unroll]] for (uint r = 0u; r < 2u; ++r) {
                [[unroll]] for (uint c = 0u; c < 4u; ++c) acc[r][c] = coopMatMulAdd(ma[r], mb[c], acc[r][c]);
            }
        }
        if (more) store(cur ^ 1u);
        barrier();
        cur ^= 1u;
    }
    uint y_base = bi * p.m * p.n;
    [[unroll]] for (uint r = 0u; r < 2u; ++r) {
        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
            coopMatStore(acc[r][c], stage, sg * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = lane; e < 256u; e += gl_SubgroupSize) {
                uint gi = row0 + wm + 16u * r + e / 16u;
                uint gj = col0 + wn + 16u * c + e % 16u;
                if (gi < p.m && gj < p.n) V_STORE(y, y_base + gi * p.n + gj, stage[sg * 256u + e]);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
        }
    }
}
