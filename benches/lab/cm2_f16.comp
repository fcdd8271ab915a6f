// LAB: f16 x f16 GEMM on workgroup-scope NV cooperative matrices (no decode): how fast is
// the driver's own staging for plain f16 operands? Same bindings as mul_mat_cm (W f16
// [rows, k], X f16 [n_tok, k], C f32 [n_tok, rows]); no split-K; interior tiles only
// unclamped.
#version 450
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#ifndef BM
#define BM 128u
#endif
#ifndef BN
#define BN 128u
#endif
#ifndef BK
#define BK 32u
#endif
#ifndef UNROLL
#define UNROLL 4u
#endif
#ifndef WG
#define WG 256
#endif
layout(local_size_x = WG) in;
layout(std430, set = 0, binding = 0) readonly buffer W { float16_t wh[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float16_t xh[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint n_tok; uint accumulate; uint k_chunk; uint ldc; } p;

#define MAT_A coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define MAT_C coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

void main() {
    uint r0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN;
    tensorViewNV<2, false, 1, 0> view_t = createTensorViewNV(2, false, 1, 0);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lc = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lc = setTensorLayoutDimensionNV(lc, p.n_tok, p.rows);
    lc = setTensorLayoutStrideNV(lc, p.rows, 1);
    tensorLayoutNV<2> la = createTensorLayoutNV(2);
    la = setTensorLayoutDimensionNV(la, p.rows, p.k);
    la = setTensorLayoutStrideNV(la, p.k, 1);
    tensorLayoutNV<2> lb = createTensorLayoutNV(2);
    lb = setTensorLayoutDimensionNV(lb, p.n_tok, p.k);
    lb = setTensorLayoutStrideNV(lb, p.k, 1);
    MAT_C acc = MAT_C(0.0);
    for (uint k0 = 0; k0 < p.k; k0 += UNROLL * BK) {
        [[unroll]] for (uint j = 0; j < UNROLL; j++) {
            MAT_A a; MAT_B b;
            coopMatLoadTensorNV(a, wh, 0u, sliceTensorLayoutNV(la, r0, BM, k0 + j * BK, BK));
            coopMatLoadTensorNV(b, xh, 0u, sliceTensorLayoutNV(lb, n0, BN, k0 + j * BK, BK), view_t);
            acc = coopMatMulAdd(a, b, acc);
        }
    }
    coopMatStoreTensorNV(acc, c, 0u, sliceTensorLayoutNV(lc, n0, BN, r0, BM), view_t);
}
