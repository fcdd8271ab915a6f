//! variant fma V_FMA=1
//! variant cm_f16 V_CM=1
//! target vulkan1.3
// Arithmetic ceilings for `vkml bench ops` (vkml_ops::bench): loops on registers only, no
// memory traffic, so a figure divided by their rate is a fraction of what the device can
// compute.
//   fma:    every invocation runs 8 independent f32 fma chains, 16 steps per iteration
//           (2 flops per fma): 256 flops per invocation per iteration.
//   cm_f16: every subgroup runs 4 independent accumulators C += A B of 16x16x16 f16
//           cooperative matrices with f32 accumulation (VK_KHR_cooperative_matrix):
//           4 * 2 * 16^3 = 32768 flops per subgroup per iteration.
// The results are stored when p.store != 0 (the host passes 0) or when they equal a value
// they cannot reach (-1): the condition depends on the loops' results, so the compiler
// must run them. The chains start from different values, so no two are provably equal.
// Bindings: 0 = y (f32, at least one value per invocation). Push constants: iters, store,
// a, b (the chains' multiplier and addend, close to 1 and 0 so nothing overflows).
// Grid: any; the host counts invocations (fma) or subgroups of its required size (cm_f16).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#if defined(V_CM)
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint iters;
    uint store;
    float a;
    float b;
} p;

void main() {
    uint wg = gl_WorkGroupID.x + gl_NumWorkGroups.x * gl_WorkGroupID.y;
#if defined(V_FMA)
    float x0 = float(gl_LocalInvocationIndex) * 1e-6;
    float x1 = x0 + 0.125, x2 = x0 + 0.25, x3 = x0 + 0.375;
    float x4 = x0 + 0.5, x5 = x0 + 0.625, x6 = x0 + 0.75, x7 = x0 + 0.875;
    for (uint i = 0u; i < p.iters; i++) {
        [[unroll]] for (uint j = 0u; j < 16u; j++) {
            x0 = fma(x0, p.a, p.b); x1 = fma(x1, p.a, p.b);
            x2 = fma(x2, p.a, p.b); x3 = fma(x3, p.a, p.b);
            x4 = fma(x4, p.a, p.b); x5 = fma(x5, p.a, p.b);
            x6 = fma(x6, p.a, p.b); x7 = fma(x7, p.a, p.b);
        }
    }
    float sum = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
    if (p.store != 0u || sum == -1.0) {
        y[wg * 256u + gl_LocalInvocationIndex] = sum;
    }
#else
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ma =
        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>(float16_t(p.a));
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> mb =
        coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>(float16_t(p.b));
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c0 =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c1 =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(1.0);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c2 =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(2.0);
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c3 =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(3.0);
    for (uint i = 0u; i < p.iters; i++) {
        c0 = coopMatMulAdd(ma, mb, c0);
        c1 = coopMatMulAdd(ma, mb, c1);
        c2 = coopMatMulAdd(ma, mb, c2);
        c3 = coopMatMulAdd(ma, mb, c3);
    }
    // One element of each accumulator (element 0 of the lane's share) joins the condition,
    // made uniform over the subgroup (the stores are subgroup operations).
    float sum = c0[0] + c1[0] + c2[0] + c3[0];
    if (subgroupAny(p.store != 0u || sum == -1.0)) {
        uint base = (wg * gl_NumSubgroups + gl_SubgroupID) * 1024u;
        coopMatStore(c0, y, base, 16, gl_CooperativeMatrixLayoutRowMajor);
        coopMatStore(c1, y, base + 256u, 16, gl_CooperativeMatrixLayoutRowMajor);
        coopMatStore(c2, y, base + 512u, 16, gl_CooperativeMatrixLayoutRowMajor);
        coopMatStore(c3, y, base + 768u, 16, gl_CooperativeMatrixLayoutRowMajor);
    }
#endif
}
