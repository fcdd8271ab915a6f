//! variant f16 V_F16=1 ET=float16_t
//! variant bf16 V_BF16=1 ET=bfloat16_t
//! target vulkan1.3
// Batched float matmul on cooperative matrices (vkml_ops::matmul's CoopMat path,
// VK_KHR_cooperative_matrix with 16x16x16 subgroup matrices, f16 or bf16 (GL_EXT_bfloat16,
// VK_KHR_shader_bfloat16) inputs and f32 accumulation):
//   y[b, i, j] = sum_k a[b, i, k] * b[b, k, j],   y packed [batch, m, n]
// with any element strides, as matmul.comp: each operand tile is staged through shared
// memory, read along whichever of its dims has stride 1 so that loads coalesce (k for a
// row-major a, m for a transposed one; n or k for b).
// One workgroup of 256 invocations = 8 subgroups of 32 computes a 128 x 128 tile of y over
// k in steps of 32; subgroup s owns rows 32 (s % 4) .. + 32 and columns 64 (s / 4) .. + 64
// as 2 x 4 accumulators. Products are exact in f32 and summed in f32 (tensor cores may
// add in another order or with wider intermediates); each result is rounded once to the
// dtype (round to nearest even, as the tiled kernel) through a staging tile.
// Bindings: 0 = a, 1 = b, 2 = y. Grid: (ceil(n / 128), ceil(m / 128), batch).
// Push constants: m, n, k, a_off, a_bs, a_rs, a_cs, b_off, b_bs, b_rs, b_cs (elements).
// Requires subgroups of 32 (vkml_ops::tuning::matmul_config).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#if defined(V_BF16)
#extension GL_EXT_bfloat16 : require
#endif
layout(local_size_x = 256) in;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer A { ET xa[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { ET xb[]; };
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

#define BM 128u
#define BN 128u
#define BK 32u
#define LA (BK + 8u) // a tile: BM rows of BK (+ 8 of padding against bank conflicts)
#define LB (BN + 8u) // b tile: BK rows of BN
shared ET sa[BM * LA];
shared ET sb[BK * LB];
shared float stage[8u * 256u]; // one 16 x 16 f32 tile per subgroup

#define MAT_A coopmat<ET, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<ET, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

void main() {
    uint t = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint wm = (sg % 4u) * 32u;
    uint wn = (sg / 4u) * 64u;
    uint row0 = gl_WorkGroupID.y * BM;
    uint col0 = gl_WorkGroupID.x * BN;
    uint bi = gl_WorkGroupID.z;
    uint a_base = p.a_off + bi * p.a_bs;
    uint b_base = p.b_off + bi * p.b_bs;
    bool a_along_k = p.a_cs == 1u;
    bool b_along_n = p.b_cs == 1u;
    MAT_C acc[2][4];
    [[unroll]] for (uint r = 0u; r < 2u; ++r) {
        [[unroll]] for (uint c = 0u; c < 4u; ++c) acc[r][c] = MAT_C(0.0);
    }
    for (uint k0 = 0u; k0 < p.k; k0 += BK) {
        // 4096 elements of each tile, 16 per invocation, consecutive invocations on
        // consecutive addresses where the operand has a unit stride.
        [[unroll]] for (uint q = 0u; q < 16u; ++q) {
            uint e = t + 256u * q;
            uint i = a_along_k ? e / BK : e % BM;
            uint kk = a_along_k ? e % BK : e / BM;
            uint gi = row0 + i;
            uint gk = k0 + kk;
            sa[i * LA + kk] = (gi < p.m && gk < p.k) ? xa[a_base + gi * p.a_rs + gk * p.a_cs] : ET(0.0);
            uint j = b_along_n ? e % BN : e / BK;
            uint kb = b_along_n ? e / BN : e % BK;
            uint gj = col0 + j;
            uint gkb = k0 + kb;
            sb[kb * LB + j] = (gj < p.n && gkb < p.k) ? xb[b_base + gkb * p.b_rs + gj * p.b_cs] : ET(0.0);
        }
        barrier();
        [[unroll]] for (uint ks = 0u; ks < BK; ks += 16u) {
            MAT_A ma[2];
            MAT_B mb[4];
            [[unroll]] for (uint r = 0u; r < 2u; ++r) {
                coopMatLoad(ma[r], sa, (wm + 16u * r) * LA + ks, LA, gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                coopMatLoad(mb[c], sb, ks * LB + wn + 16u * c, LB, gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint r = 0u; r < 2u; ++r) {
                [[unroll]] for (uint c = 0u; c < 4u; ++c) acc[r][c] = coopMatMulAdd(ma[r], mb[c], acc[r][c]);
            }
        }
        barrier();
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
