//! variant q4_0 QTYPE=2
//! variant q8_0 QTYPE=8
//! variant q4_0_x_f32 QTYPE=2 X_F32=1
//! variant q8_0_x_f32 QTYPE=8 X_F32=1
//! variant mxfp4 QTYPE=39
//! variant mxfp4_x_f32 QTYPE=39 X_F32=1
// Integer-dot mat-vec: y[b, r] = sum over blocks of d_w * d_x * sumi, where sumi is the
// exact integer dot of the weight quants with x quantized to Q8_1 (quantize_q8_1.comp),
// computed with packed 4x8-bit dot products (GL_EXT_integer_dot_product; hardware-
// accelerated where Capabilities says so). Q4_0: sumi = sum(nibble * q) - 8 * sum(q), as
// ggml's vec_dot_q4_0 with (nibble - 8). MXFP4: sumi = sum(v * q), v the code's doubled
// E2M1 value (ggml's kvalues_mxfp4, an int8), d_w = 2^(e - 128) (ggml_e8m0_to_fp32_half),
// as ggml's vec_dot_mxfp4_q8_0; a word's 8 codes become their magnitudes by bit
// arithmetic within each nibble (fp4_magnitudes), negated bytewise where the sign is set;
// its blocks in vkml's device layout (quant.glsl's mxfp4_qs: 16-byte-aligned codes).
// One subgroup per NR rows, whole blocks per invocation, subgroup add.
// Bindings: 0 = W (raw blocks), 1 = xq (Q8_1 words, 9 per block, [NB, k/32]), 2 = y f32 [NB, rows]
// (epilogue per include/mat_vec_out.glsl: with the gated products each subgroup also
// computes the NR up rows, at r + rows, beside its gate rows; x is loaded once for both).
// Push: w_offset, row_bytes, k, rows (output rows), batch, y_stride (include/mat_vec_out.glsl),
// eps (the *_x_f32 variants' norm prologue and post-norm epilogue; else unused).
// Specialization: 0 = workgroup, 1 = NB, 2 = NR, 10 = epilogue, 16 = Q8_1 output of the
// gated products (*_x_f32: binding 7).
// *_x_f32: x is f32 (binding 1: vec4[k / 4], one batch row, k a multiple of 32 and at most
// 32 * MAX_XBLOCKS) and each workgroup quantizes it to Q8_1 into shared memory first, as
// quantize_q8_1.comp does (include/q8_1.glsl's arithmetic): no quantize dispatch before
// the mat-vec. With specialization constant 11 (MV_NORM) x is RMS-normalised on the way,
// as norm.comp's rms_q8_1 variant makes it: v = (x * (1 / sqrt(mean(x²) + eps))) * w,
// w = binding 3 (f32 [k]; bound but unread without the norm), eps = p.eps. Needs
// subgroup shuffles and a subgroup of at least 8 invocations. Also epilogue 5
// (include/mat_vec_post_norm.glsl: bindings 4-6).
// *_x_f32, expert-indexed (MV_IDS, specialization constant 17; MoE decode, as the block
// kernels' include/mul_mat_vec_block.glsl): W holds experts of `rows` rows (2 rows with the
// gated products, gate then up), workgroup z = slot j multiplies expert ids[j] (binding
// 8, u32; y stands in otherwise) with x row j / MV_IDS_X (constant 18; 0: row 0), which each
// workgroup quantizes, into y row j; NB 1, no Q8_1 output, no post-norm. Bindings 9-12:
// include/mat_vec_moe.glsl's (routing, expert biases, weighted sums: each workgroup then
// quantizes its token's k slot rows), also a plain product's bias.
// *_x_f32, the weighted sums by the last workgroup (constant 27, MV_SUM_LAST, with MV_SUM =
// k): workgroup z = slot j multiplies its own expert as without the sums and stores its
// row into y row j (f32 [slots, rows]); then the last of a token's k workgroups of a row
// group, counted on binding 6 (u32 [tokens, row groups], zero between dispatches, left
// zero), stores the token's sums of those rows into binding 4 (f32 [tokens, rows]), in
// the order and arithmetic of the folded sums (include/mat_vec_moe.glsl's weights,
// sigmoid, expert biases and addend; added to binding 4 with flag bit 5 of constant 22).
// The experts' products spread over k times the workgroups of the folded sums, with no
// pass after them.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_integer_dot_product : require
layout(local_size_x_id = 0, local_size_x = 128) in;
layout(constant_id = 1) const uint NB = 1;
layout(constant_id = 2) const uint NR = 1;
#include "quant.glsl"
layout(push_constant) uniform P { uint w_offset; uint row_bytes; uint k; uint rows; uint batch; uint y_stride; float eps; } p;
#ifdef X_F32
#define MV_POST_NORM 1
#endif
#include "mat_vec_out.glsl"
#ifdef X_F32
#extension GL_KHR_shader_subgroup_shuffle : require
#define SUBGROUP_REDUCE 1
#define REDUCE_MAX 128
#include "reduce.glsl"
#include "mat_vec_post_norm.glsl"
layout(std430, set = 0, binding = 1) readonly buffer X { vec4 x4[]; };
layout(std430, set = 0, binding = 3) readonly buffer NW { vec4 nw4[]; };
layout(constant_id = 11) const bool MV_NORM = false;
// (ops/src/quant/mat_vec.rs mirrors this as DOT_X_MAX_BLOCKS.)
#define MAX_XBLOCKS 512u
// x as Q8_1 blocks of 9 words (packHalf2x16(d, s), then 8 words of quants): the global
// layout of quantize_q8_1.comp, whose odd stride also keeps the lanes' reads of
// consecutive blocks on distinct banks.
shared uint xs[MAX_XBLOCKS * 9u];
#define XQ(i) xs[i]

#define Q8_1_NO_X
#include "q8_1.glsl"

layout(constant_id = 17) const bool MV_IDS = false;
layout(constant_id = 18) const uint MV_IDS_X = 0u;
layout(constant_id = 27) const bool MV_SUM_LAST = false;
// (Written by the routing of include/mat_vec_moe.glsl.)
layout(std430, set = 0, binding = 8) buffer IDS { uint expert_ids[]; };
#define MV_MOE_B 9
#include "mat_vec_moe.glsl"
// The token's k experts summed in each workgroup (mv_rows), unless the last workgroup sums.
const uint MV_FOLD = MV_SUM_LAST ? 0u : MV_SUM;

// MV_SUM_LAST: after the workgroup of slot `slot` has stored its rows from row0, counts it
// among its token's k for the row group; the last one stores the token's weighted sums of
// the group's rows (in order j = 0, 1, .., as mv_rows folds them). Every invocation calls
// it from uniform control flow (it holds barriers).
void mv_sums_last(uint row0, uint slot) {
    uint tid = gl_LocalInvocationIndex, tok = slot / MV_SUM;
    uint c = tok * gl_NumWorkGroups.x * gl_NumWorkGroups.y + gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    // Publish this workgroup's rows, then count it.
    memoryBarrierBuffer();
    barrier();
    if (tid == 0u) mv_last = atomicAdd(mv_cnt[c], 1u) + 1u == MV_SUM ? 1u : 0u;
    barrier();
    if (mv_last == 0u) return;
    memoryBarrierBuffer();
    uint n = min(gl_NumSubgroups * NR, p.rows - row0);
    for (uint i = tid; i < n; i += gl_WorkGroupSize.x) {
        uint r = row0 + i;
        float tot = 0.0;
        for (uint j = 0u; j < MV_SUM; j++) {
            uint sj = tok * MV_SUM + j;
            tot += mv_sum_term(sj, mv_expert_id(sj), r, p.rows, y[sj * p.y_stride + r]);
        }
        tot = mv_sum_addend(tok, r, p.rows, tot);
        uint at = tok * p.rows + r;
        res[at] = (MV_ROUTE_FLAGS & 32u) != 0u ? res[at] + tot : tot;
    }
    if (tid == 0u) mv_cnt[c] = 0u;
}

// Max and sum over the 8 lanes 8c .. 8c + 7 of a subgroup (all active), by xor shuffles:
// exact, so every lane gets the same value in any order.
float max8(float v) {
    v = max(v, subgroupShuffleXor(v, 1u));
    v = max(v, subgroupShuffleXor(v, 2u));
    return max(v, subgroupShuffleXor(v, 4u));
}
int sum8(int v) {
    v += subgroupShuffleXor(v, 1u);
    v += subgroupShuffleXor(v, 2u);
    return v + subgroupShuffleXor(v, 4u);
}

// Q8_1 of a block of 32 values held 4 per lane by 8 consecutive lanes (in order): this
// lane's word of quants (.x) and the block's packHalf2x16(d, s) (.y), as q8_1.glsl's
// q8_1_pack computes them. Both x's quantization here and the gated products' Q8_1 output
// use it, so a product quantized by its producer is the x its consumer would quantize.
uvec2 q8_1_part(vec4 v) {
    vec4 a = abs(v);
    float amax = max8(max(max(a.x, a.y), max(a.z, a.w)));
    float d = amax / 127.0;
    float id = d != 0.0 ? 1.0 / d : 0.0;
    vec4 r = v * id;
    ivec4 q = ivec4(round_away(r.x), round_away(r.y), round_away(r.z), round_away(r.w));
    int sum = sum8(q.x + q.y + q.z + q.w);
    uvec4 u = uvec4(q) & 0xFFu;
    return uvec2(u.x | (u.y << 8) | (u.z << 16) | (u.w << 24), packHalf2x16(vec2(d, float(sum) * d)));
}

// Specialization constant 16 (with the gated products): the products as Q8_1 blocks into
// binding 7 (uint[9 * rows / 32], quantize_q8_1.comp's layout) instead of f32 into y, the x
// of the next mat-vec (the down projection). Needs rows a multiple of 32 and the
// workgroup's rows (subgroups x NR) too: its subgroup 0 quantizes them from shared memory.
layout(constant_id = 16) const bool MV_Q8_1_OUT = false;
layout(std430, set = 0, binding = 7) writeonly buffer YQ { uint yq[]; };
#define MAX_WG_ROWS 1024u
shared float wg_out[MAX_WG_ROWS];

// The workgroup's products (wg_out, rows wg_row0 ..) as Q8_1 blocks into yq. Called by
// every invocation of the workgroup, in uniform control flow (it holds a barrier).
void store_q8_1_out(uint wg_row0) {
    barrier();
    if (gl_SubgroupID != 0u) return;
    uint n = min(gl_NumSubgroups * NR, p.rows - min(wg_row0, p.rows)); // rows of the workgroup, a multiple of 32
    uint lane = gl_SubgroupInvocationID;
    // Each group of 8 lanes takes a block; the subgroup size is a multiple of 8.
    for (uint i0 = 0u; i0 < n / 4u; i0 += gl_SubgroupSize) {
        uint i = i0 + lane; // vec4 i of the workgroup's rows
        if (i < n / 4u) {
            uvec2 w = q8_1_part(vec4(wg_out[4u * i], wg_out[4u * i + 1u], wg_out[4u * i + 2u], wg_out[4u * i + 3u]));
            uint blk = (wg_row0 / 32u) + i / 8u;
            yq[blk * 9u + 1u + i % 8u] = w.x;
            if (i % 8u == 0u) yq[blk * 9u] = w.y;
        }
    }
}

// Rows xrow .. xrow + nrows of x (normalised where MV_NORM, one row) quantized into xs,
// one after another: 8 consecutive lanes make one block, one vec4 each, its amax and quant
// sum reduced over those 8 lanes. With `route` the first subgroup routes the token
// meanwhile (mv_route; the others quantize, unless it is the only one). Every invocation
// calls it from uniform control flow (it holds barriers).
void quantize_x(uint xrow, uint nrows, bool route, uint slot) {
    uint k4 = p.k / 4u;
    uint x0 = xrow * k4;
    float scale = 1.0;
    if (MV_NORM) {
        float s = 0.0;
        for (uint i = gl_LocalInvocationID.x; i < k4; i += gl_WorkGroupSize.x) {
            vec4 v = x4[x0 + i];
            s += dot(v, v);
        }
        scale = 1.0 / sqrt(wg_sum(s) / float(p.k) + p.eps);
    }
    uint sgs = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
    if (route && gl_SubgroupID == 0u) mv_route(slot);
    // The subgroups quantizing: all but the router's where there are others.
    uint q0 = route && gl_NumSubgroups > 1u ? 1u : 0u;
    // Whole groups of 8 lanes in or out: k4, the subgroup size and i0 are multiples of 8.
    for (uint i0 = (gl_SubgroupID - q0) * sgs; gl_SubgroupID >= q0 && i0 < nrows * k4; i0 += (gl_NumSubgroups - q0) * sgs) {
        uint i = i0 + lane;
        if (i < nrows * k4) {
            vec4 v = x4[x0 + i];
            if (MV_NORM) v = v * scale * nw4[i];
            uvec2 w = q8_1_part(v);
            uint blk = i / 8u;
            xs[blk * 9u + 1u + i % 8u] = w.x;
            if (i % 8u == 0u) xs[blk * 9u] = w.y;
        }
    }
    barrier();
}
#else
layout(std430, set = 0, binding = 1) readonly buffer XQ { uint xq[]; };
#define XQ(i) xq[i]
#endif

#if QTYPE == 39
// The magnitudes of a word's 8 MXFP4 codes, nibble for nibble: twice the E2M1 value of
// the code's low 3 bits [e1 e0 m] (ggml's kvalues_mxfp4: 0, 1, 2, 3, 4, 6, 8, 12), as
// m + 2 e0 + 4 e1 + 2 e0 e1 + m e1 + 2 m e0 e1, each term a bit of the nibble (at most 12,
// so no carry leaves a nibble). The sign is bit 3.
uint fp4_magnitudes(uint w) {
    uint e0e1 = w & (w >> 1) & 0x22222222u; // 2 e0 e1
    return (w & 0x77777777u) + e0e1 + (w & (w >> 2) & 0x11111111u) + (e0e1 & (w << 1));
}
#endif

// The weight block's scale d_w: the f16 d, or MXFP4's E8M0 byte (quant.glsl's e8m0_half).
float block_d(uint blk) {
#if QTYPE == 39
    return e8m0_half(mxfp4_e(blk));
#else
    return q_f16(blk);
#endif
}

// The exact integer dot of one weight block (at byte blk) with the Q8_1 quants xv; for
// Q4_0, xsum is the sum of those quants (the -8 offset of the nibbles).
int block_dot(uint blk, uint xv[8], int xsum) {
    int sumi = 0;
#if QTYPE == 39
    uint q[4];
    MXFP4_LOAD_QS(q, blk); // aligned: vkml's device layout (quant.glsl)
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        // Byte 4i + j holds element 4i + j (low nibble) and 4i + 16 + j (high nibble): the
        // low nibbles make the word of elements 4i .. 4i + 3, the high ones that of 4i + 16
        // .. 4i + 19. A negative code's byte is its magnitude negated, (v ^ 0xFF) + 1: no
        // carry leaves the byte, as v >= 1 there (the device layout has no negative zero).
        uint v = fp4_magnitudes(q[i]);
        uint s = (q[i] >> 3) & 0x11111111u;
        uint s_lo = s & 0x01010101u, s_hi = (s >> 4) & 0x01010101u;
        uint lo = ((v & 0x0F0F0F0Fu) ^ (s_lo * 0xFFu)) + s_lo;
        uint hi = (((v >> 4) & 0x0F0F0F0Fu) ^ (s_hi * 0xFFu)) + s_hi;
        sumi += dotPacked4x8EXT(int(xv[i]), int(lo)) + dotPacked4x8EXT(int(xv[4u + i]), int(hi));
    }
#elif QTYPE == 2
    uint q[4];
    LOAD_WORDS(q, 4u, blk + 2u);
    [[unroll]] for (uint i = 0; i < 4u; i++) {
        sumi += dotPacked4x8EXT(int(xv[i]), q[i] & 0x0F0F0F0Fu);
        sumi += dotPacked4x8EXT(int(xv[4u + i]), (q[i] >> 4) & 0x0F0F0F0Fu);
    }
    sumi -= 8 * xsum;
#else
    uint q[8];
    LOAD_WORDS(q, 8u, blk + 2u);
    [[unroll]] for (uint i = 0; i < 8u; i++) sumi += dotPacked4x8EXT(int(q[i]), int(xv[i]));
#endif
    return sumi;
}


// Dot products of the NR rows from r0 (< p.rows) of the matrix at byte w_base with the
// Q8_1 x blocks from block xb0 (each batch row b < NB after it), summed over the subgroup:
// mv_t[rr * NB + b], and mv_u the up rows' with the gated products (0 otherwise).
float mv_t[NR * NB], mv_u[NR * NB];
void mv_dots(uint r0, uint w_base, uint xb0) {
    uint lane = gl_SubgroupInvocationID;
    uint nblocks = p.k / 32u;
    float acc[NR * NB], acc2[NR * NB]; // acc2: the up rows of the gated products
    [[unroll]] for (uint i = 0; i < NR * NB; i++) { acc[i] = 0.0; acc2[i] = 0.0; }
    for (uint ib = lane; ib < nblocks; ib += gl_SubgroupSize) {
        [[unroll]] for (uint b = 0; b < NB; b++) {
            uint xb = (xb0 + b * nblocks + ib) * 9u;
            float dx = unpackHalf2x16(XQ(xb)).x;
            uint xv[8];
            [[unroll]] for (uint i = 0; i < 8u; i++) xv[i] = XQ(xb + 1u + i);
            int xsum = 0;
#if QTYPE == 2
            [[unroll]] for (uint i = 0; i < 8u; i++) xsum += dotPacked4x8EXT(int(xv[i]), 0x01010101u);
#endif
            [[unroll]] for (uint rr = 0; rr < NR; rr++) {
                uint r = min(r0 + rr, p.rows - 1u); // rows past the end recompute the last row, unstored
                uint blk = w_base + r * p.row_bytes + ib * QBYTES;
                acc[rr * NB + b] += float(block_dot(blk, xv, xsum)) * block_d(blk) * dx;
                if (MV_GLU) {
                    uint ublk = blk + p.rows * p.row_bytes;
                    acc2[rr * NB + b] += float(block_dot(ublk, xv, xsum)) * block_d(ublk) * dx;
                }
            }
        }
    }
    [[unroll]] for (uint i = 0; i < NR * NB; i++) {
        mv_t[i] = subgroupAdd(acc[i]);
        mv_u[i] = MV_GLU ? subgroupAdd(acc2[i]) : 0.0;
    }
}

// The NR rows from r0 (< p.rows) of the subgroup: dot products and stores. w_base: byte of
// the matrix's row 0; slot: the expert slot (0 without MV_IDS; the token with MV_FOLD), its y
// row; e: its expert (MV_IDS without MV_FOLD).
void mv_rows(uint r0, uint w_base, uint slot, uint e) {
#ifdef X_F32
    if (MV_FOLD > 0u) {
        // The token's k experts, each on its own slot's x row (xs holds the k rows), weighted.
        float tot[NR * NB];
        [[unroll]] for (uint i = 0; i < NR * NB; i++) tot[i] = 0.0;
        for (uint j = 0u; j < MV_FOLD; j++) {
            uint sj = slot * MV_FOLD + j, ej = mv_expert_id(sj);
            mv_dots(r0, p.w_offset + ej * p.rows * p.row_bytes, j * (p.k / 32u));
            [[unroll]] for (uint rr = 0; rr < NR; rr++) tot[rr] += mv_sum_term(sj, ej, min(r0 + rr, p.rows - 1u), p.rows, mv_t[rr]);
        }
        [[unroll]] for (uint rr = 0; rr < NR; rr++) tot[rr] = mv_sum_addend(slot, min(r0 + rr, p.rows - 1u), p.rows, tot[rr]);
        [[unroll]] for (uint i = 0; i < NR * NB; i++) mv_t[i] = tot[i];
    } else
#endif
    {
        mv_dots(r0, w_base, 0u);
    }
    if (gl_SubgroupInvocationID != 0u) return;
    [[unroll]] for (uint rr = 0; rr < NR; rr++) {
        [[unroll]] for (uint b = 0; b < NB; b++) {
            if (r0 + rr < p.rows) {
                float g = mv_t[rr * NB + b], v = mv_u[rr * NB + b];
#ifdef X_F32
                if (MV_GLU) {
                    vec2 gu = mv_glu_bias(e, r0 + rr, p.rows, g, v);
                    g = gu.x;
                    v = gu.y;
                }
                if (MV_GLU && MV_Q8_1_OUT) {
                    wg_out[gl_SubgroupID * NR + rr] = mv_glu(g, v);
                    continue;
                }
                if (!MV_GLU) g = mv_row_bias(r0 + rr, g);
#endif
                if (MV_GLU) {
                    mv_store_glu(b + slot, r0 + rr, g, v);
                } else {
                    mv_store(b + slot, r0 + rr, g);
                }
            }
        }
    }
}

void main() {
    uint wg0 = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * gl_NumSubgroups;
    uint slot = 0u, w_base = p.w_offset, e = 0u;
#ifdef X_F32
    // The whole workgroup, before quantize_x's and the routing's barriers (with the
    // post-norm epilogue every workgroup goes on: all of them count).
    if (!MV_POST && wg0 * NR >= p.rows) return;
    if (MV_IDS) slot = gl_WorkGroupID.z;
    // The routing (MV_ROUTE) runs while x is quantized.
    bool route = MV_IDS && MV_SUM == 0u && MV_ROUTE != 0u;
    // (MV_FOLD: the token's k slot rows, one after another.)
    if (MV_FOLD > 0u) {
        quantize_x(slot * MV_FOLD, MV_FOLD, false, 0u);
    } else {
        quantize_x(MV_IDS_X > 0u ? slot / MV_IDS_X : 0u, 1u, route, slot);
    }
    // (With MV_FOLD each of the token's slots has its own expert, read in mv_rows.)
    if (MV_IDS && MV_FOLD == 0u) {
        e = route ? mv_routed_expert(slot) : mv_expert_id(slot);
        // (An expert of the gated products holds its gate rows, then its up rows.)
        w_base += e * (MV_GLU ? 2u : 1u) * p.rows * p.row_bytes;
    }
#endif
    uint r0 = (wg0 + gl_SubgroupID) * NR;
    if (r0 < p.rows) mv_rows(r0, w_base, slot, e); // uniform across the subgroup
#ifdef X_F32
    if (MV_GLU && MV_Q8_1_OUT) store_q8_1_out(wg0 * NR);
    if (MV_POST) mv_post_norm_add();
    if (MV_IDS && MV_SUM_LAST) mv_sums_last(wg0 * NR, slot);
#endif
}
