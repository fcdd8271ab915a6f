// Launch scheme of the block-wise fused mat-vec kernels (mul_mat_vec_q32.comp,
// mul_mat_vec_k.comp, mul_mat_vec_iq.comp):
// one subgroup per NR rows, subgroup add at the end.
// y[b, r] = sum_c W[r, c] * x[b, c], b < NB.
// Bindings: 0 = W (raw blocks, row r at w_offset + r * row_bytes), 1 = x (vec4[NB * k / 4]),
//           2 = y (f32[NB * rows]; epilogue per include/mat_vec_out.glsl: with the gated
//           products each subgroup also computes the NR up rows beside its gate rows),
//           3 = the norm weight (include/mat_vec_norm.glsl), 4-6 = the post-norm epilogue's
//           residual, weight and count (include/mat_vec_post_norm.glsl; stand-ins otherwise),
//           7 = expert ids (below), 8-11 = the MoE folds' buffers and a plain product's
//           bias (include/mat_vec_moe.glsl; stand-ins otherwise).
// Push constants: w_offset, row_bytes, k, rows (output rows), batch (unused: NB), y_stride
// (include/mat_vec_out.glsl), eps (include/mat_vec_norm.glsl: x normalised first with
// specialization constant 11; then binding 3 = the norm weight).
// Specialization: 0 = workgroup size (a multiple of the subgroup size; subgroups must be
// full), 1 = NB, the batch count (1..8), 2 = NR, rows per subgroup: each x vec4 loaded once
// serves NR rows.
// Expert-indexed (MV_IDS, specialization constant 17; MoE decode): W holds experts of `rows`
// rows each, and workgroup z = slot j multiplies expert ids[j] (binding 7, u32; y stands in
// otherwise) into y row j (y_stride apart), with x row j / MV_IDS_X (constant 18: 1, each
// slot its own x row; k, the k slots of a token sharing its row) or x row 0 (MV_IDS_X 0).
// NB is 1 there, without the norm prologue; with the gated products (MV_GLU) each expert
// holds 2 rows rows, its gate rows then its up rows.
//
// Each block is cut into SPB slices (SPB lanes share a block); lane i of the subgroup takes
// slices i, i + subgroup size, ... of the row (consecutive lanes read consecutive bytes), so
// a 256-element super-block keeps 8 lanes busy and any subgroup size and any k that is a
// multiple of QK is handled. The including shader includes quant.glsl first and defines:
//   SPB                 slices per block   } before including this file
//   XV                  x vec4s per slice  }
//   uint x_at(uint s, uint j)   vec4 index, within the block, of the slice's j-th x vec4
//   float slice_dot(uint blk, uint s, vec4 xv[XV])   sum of w * x over slice s of the block
//                                                    at byte blk (xv[j] = x vec4 x_at(s, j))
//   SHARED_INIT (optional)  a void init_shared() that the whole workgroup runs before any
//                           invocation returns (code books into shared memory), then a barrier.
// Kernels for types whose QBYTES is a multiple of 4 read fields with LOAD_ALIGNED and so
// need w_offset % 4 == 0 (ops always binds matrices at offset 0).
#ifndef VKML_MUL_MAT_VEC_BLOCK_GLSL
#define VKML_MUL_MAT_VEC_BLOCK_GLSL

layout(std430, set = 0, binding = 1) readonly buffer X { vec4 x4[]; };
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint batch; uint y_stride; float eps; } p;
#define MV_POST_NORM 1
#include "mat_vec_out.glsl"
#define MV_X4(i) x4[i]
#include "mat_vec_norm.glsl"
#include "mat_vec_post_norm.glsl"

// N words from the 4-byte-aligned byte offset `at`.
#define LOAD_ALIGNED(q, N, at) { uint w_ = (at) >> 2; [[unroll]] for (uint i_ = 0; i_ < N; i_++) q[i_] = qw[w_ + i_]; }
// N words of bytes from any byte offset `at`, reading only the words that hold those bytes
// (LOAD_WORDS may read the word after the last one, past the end of the buffer).
#define LOAD_SPAN(q, N, at) { uint a_ = (at); uint w_ = a_ >> 2; uint s_ = (a_ & 3u) * 8u; uint last_ = (a_ + 4u * N - 1u) >> 2; \
    uint prev_ = qw[w_]; [[unroll]] for (uint i_ = 0; i_ < N; i_++) { uint next_ = qw[min(w_ + i_ + 1u, last_)]; \
    q[i_] = funnel(prev_, next_, s_); prev_ = next_; } }

// The four bytes of u as floats, unsigned and signed.
vec4 u8x4(uint u) { return vec4(u & 0xFFu, (u >> 8) & 0xFFu, (u >> 16) & 0xFFu, u >> 24); }
vec4 i8x4(uint u) { int v = int(u); return vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8), bitfieldExtract(v, 24, 8)); }

uint x_at(uint s, uint j);
float slice_dot(uint blk, uint s, vec4 xv[XV]);
#ifdef SHARED_INIT
void init_shared();
#endif

layout(constant_id = 17) const bool MV_IDS = false;
layout(constant_id = 18) const uint MV_IDS_X = 0u;
// (Written by the routing of include/mat_vec_moe.glsl.)
layout(std430, set = 0, binding = 7) buffer IDS { uint expert_ids[]; };
#define MV_MOE_B 8
#include "mat_vec_moe.glsl"

// Dot products of the NR rows from r0 (< p.rows) of the matrix at byte w_base with x row
// xrow (each batch row b < NB after it where NB > 1), summed over the subgroup into
// mv_t[rr * NB + b], and mv_u the up rows' with the gated products (0 otherwise).
float mv_t[NR * NB], mv_u[NR * NB];
void mv_dots(uint r0, uint w_base, uint xrow) {
    uint xoff = xrow * (p.k / 4u);
    uint lane = gl_SubgroupInvocationID;
    uint nslices = p.k / uint(QK) * uint(SPB);
    float acc[NR * NB], acc2[NR * NB]; // acc2: the up rows of the gated products
    [[unroll]] for (uint i = 0; i < NR * NB; i++) { acc[i] = 0.0; acc2[i] = 0.0; }
    // (the one-pass norm: the subgroup's own sum of squares of x, no workgroup barrier)
    float ss[NB];
    [[unroll]] for (uint b = 0; b < NB; b++) {
        ss[b] = 0.0;
        if (MV_NORM && MV_NORM_ONE_PASS) {
            for (uint i = lane; i < p.k / 4u; i += gl_SubgroupSize) {
                vec4 v = MV_X4(b * (p.k / 4u) + i);
                ss[b] += dot(v, v);
            }
        }
    }
    for (uint i = lane; i < nslices; i += gl_SubgroupSize) {
        uint ib = i / uint(SPB), s = i % uint(SPB);
        uint x0 = ib * uint(QK / 4);
        [[unroll]] for (uint b = 0; b < NB; b++) {
            vec4 xv[XV];
            [[unroll]] for (uint j = 0; j < uint(XV); j++) xv[j] = mv_x4(b, xoff + x0 + x_at(s, j));
            [[unroll]] for (uint rr = 0; rr < NR; rr++) {
                uint r = min(r0 + rr, p.rows - 1u); // rows past the end recompute the last row, unstored
                uint blk = w_base + r * p.row_bytes + ib * uint(QBYTES);
                acc[rr * NB + b] += slice_dot(blk, s, xv);
                if (MV_GLU) acc2[rr * NB + b] += slice_dot(blk + p.rows * p.row_bytes, s, xv);
            }
        }
    }
    [[unroll]] for (uint i = 0; i < NR * NB; i++) {
        mv_t[i] = subgroupAdd(acc[i]);
        mv_u[i] = MV_GLU ? subgroupAdd(acc2[i]) : 0.0;
    }
    if (MV_NORM && MV_NORM_ONE_PASS) {
        [[unroll]] for (uint b = 0; b < NB; b++) {
            float sc = mv_norm_scale_of(subgroupAdd(ss[b]));
            [[unroll]] for (uint rr = 0; rr < NR; rr++) {
                mv_t[rr * NB + b] *= sc;
                mv_u[rr * NB + b] *= sc;
            }
        }
    }
}

// The NR rows from r0 (< p.rows) of the subgroup: dot products and stores. w_base: byte of
// the matrix's row 0; slot: the expert slot (0 without MV_IDS; the token with MV_SUM), whose
// x row (slot / MV_IDS_X) and y row it takes; e: its expert (MV_IDS without MV_SUM).
void mv_rows(uint r0, uint w_base, uint slot, uint e) {
    if (MV_SUM > 0u) {
        // The token's k experts, each on its own slot's x row, weighted.
        float tot[NR * NB];
        [[unroll]] for (uint i = 0; i < NR * NB; i++) tot[i] = 0.0;
        for (uint j = 0u; j < MV_SUM; j++) {
            uint sj = slot * MV_SUM + j, ej = mv_expert_id(sj);
            mv_dots(r0, p.w_offset + ej * p.rows * p.row_bytes, sj);
            [[unroll]] for (uint rr = 0; rr < NR; rr++) tot[rr] += mv_sum_term(sj, ej, min(r0 + rr, p.rows - 1u), p.rows, mv_t[rr]);
        }
        [[unroll]] for (uint rr = 0; rr < NR; rr++) tot[rr] = mv_sum_addend(slot, min(r0 + rr, p.rows - 1u), p.rows, tot[rr]);
        [[unroll]] for (uint i = 0; i < NR * NB; i++) mv_t[i] = tot[i];
    } else {
        mv_dots(r0, w_base, MV_IDS_X > 0u ? slot / MV_IDS_X : 0u);
    }
    if (gl_SubgroupInvocationID != 0u) return;
    [[unroll]] for (uint rr = 0; rr < NR; rr++) {
        [[unroll]] for (uint b = 0; b < NB; b++) {
            if (r0 + rr < p.rows) {
                if (MV_GLU) {
                    vec2 gu = mv_glu_bias(e, r0 + rr, p.rows, mv_t[rr * NB + b], mv_u[rr * NB + b]);
                    mv_store_glu(b + slot, r0 + rr, gu.x, gu.y);
                } else {
                    mv_store(b + slot, r0 + rr, mv_row_bias(r0 + rr, mv_t[rr * NB + b]));
                }
            }
        }
    }
}

// Weighted sums with the experts split over the subgroups (specialization constant 26,
// MV_SUM_SPLIT; a workgroup of MV_SUM subgroups): every subgroup takes the workgroup's NR
// rows of one of the token's experts (subgroup j, slot n k + j), so NR rows share each x
// load as in one expert's mat-vec, and the first subgroup adds the k terms in order j = 0,
// 1, .. (the bits of mv_rows' sums). Every invocation calls it (it holds a barrier).
layout(constant_id = 26) const bool MV_SUM_SPLIT = false;
shared float mv_sum_part[(MV_SUM + 1u) * NR];
void mv_rows_split(uint r0, uint token) {
    uint j = gl_SubgroupID, sj = token * MV_SUM + j;
    if (r0 < p.rows && j < MV_SUM) {
        uint ej = mv_expert_id(sj);
        mv_dots(r0, p.w_offset + ej * p.rows * p.row_bytes, sj);
        if (gl_SubgroupInvocationID == 0u) {
            [[unroll]] for (uint rr = 0; rr < NR; rr++) mv_sum_part[j * NR + rr] = mv_sum_term(sj, ej, min(r0 + rr, p.rows - 1u), p.rows, mv_t[rr]);
        }
    }
    barrier();
    if (r0 >= p.rows || gl_LocalInvocationIndex != 0u) return;
    [[unroll]] for (uint rr = 0; rr < NR; rr++) {
        float tot = 0.0;
        for (uint i = 0u; i < MV_SUM; i++) tot += mv_sum_part[i * NR + rr];
        if (r0 + rr < p.rows) mv_store(token, r0 + rr, mv_sum_addend(token, r0 + rr, p.rows, tot));
    }
}

void main() {
#ifdef SHARED_INIT
    init_shared();
    barrier();
#endif
    if (MV_SUM_SPLIT) {
        mv_rows_split((gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * NR, gl_WorkGroupID.z);
        return;
    }
    uint wg0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * gl_NumSubgroups;
    // The whole workgroup, before the norm's and the routing's barriers.
    if ((MV_NORM || MV_ROUTE != 0u) && wg0 * NR >= p.rows) return;
    if (MV_NORM) mv_norm_scales();
    uint r0 = (wg0 + gl_SubgroupID) * NR;
    uint slot = MV_IDS ? gl_WorkGroupID.z : 0u;
    // (With MV_SUM each of the token's slots has its own expert, read in mv_rows.)
    uint e = MV_IDS && MV_SUM == 0u ? mv_slot_expert(slot) : 0u;
    // (An expert of the gated products holds its gate rows, then its up rows.)
    uint w_base = p.w_offset + e * (MV_GLU ? 2u : 1u) * p.rows * p.row_bytes;
    if (r0 < p.rows) mv_rows(r0, w_base, slot, e); // uniform across the subgroup
    // (With the post-norm epilogue every workgroup reaches it; the host never combines it
    // with the norm prologue.)
    if (MV_POST) mv_post_norm_add();
}

#endif
