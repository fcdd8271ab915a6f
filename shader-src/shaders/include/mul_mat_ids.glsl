// The expert-grouped form of the quantized mat-mats (mul_mat_q.comp, mul_mat_cm.comp;
// mul_mat_cm256.comp declares it but the op never runs it grouped): a mixture-of-experts
// prompt's products with each expert's tokens together (llama.cpp's ggml_mul_mat_id for
// batches), the weight holding n_expert experts of p.rows rows each (a 3-D ffn_*_exps
// tensor, experts outermost).
// Specialization constant 13, MM_IDS: workgroup z is expert e, whose slots are
// mm_slots[mm_first[e] .. mm_first[e + 1]) (binding 7, u32; binding 8, u32[n_expert + 1]:
// moe_group.comp's grouping); the workgroup's token j is slot mm_slots[mm_first[e] + j],
// which reads x row slot / p.x_slots and writes C row slot, and the weight rows start at
// row e * p.rows. A token tile past the expert's count exits at once; the grid's y covers
// the largest count possible. No split-K (z is the expert), no accumulate.
// Without MM_IDS the kernels run as before: token j is x row and C row j, and bindings
// 7 and 8 are bound but unused.
// The kernel calls mm_ids_begin(n0) first and uses mm_n_tok for the run's tokens and
// mm_w_offset for the weight's byte offset. Include after the push constants `p` (with
// x_slots).
#ifndef VKML_MUL_MAT_IDS_GLSL
#define VKML_MUL_MAT_IDS_GLSL
layout(constant_id = 13) const bool MM_IDS = false;
layout(std430, set = 0, binding = 7) readonly buffer MmSlots { uint mm_slots[]; };
layout(std430, set = 0, binding = 8) readonly buffer MmFirst { uint mm_first[]; };

uint mm_n_tok;    // tokens of this workgroup's run: p.n_tok, or its expert's slots
uint mm_w_offset; // byte offset of the run's weight rows
uint mm_slot0;    // the run's first slot in mm_slots
uint mm_split_z;  // the split-K index: gl_WorkGroupID.z, or 0 grouped

// Sets the run's globals; false where the workgroup (token tile at n0) has no tokens.
bool mm_ids_begin(uint n0) {
    mm_n_tok = p.n_tok;
    mm_w_offset = p.w_offset;
    mm_slot0 = 0u;
    mm_split_z = gl_WorkGroupID.z;
    if (MM_IDS) {
        uint e = gl_WorkGroupID.z;
        mm_slot0 = mm_first[e];
        mm_n_tok = mm_first[e + 1u] - mm_slot0;
        mm_w_offset = p.w_offset + e * p.rows * p.row_bytes;
        mm_split_z = 0u;
    }
    return n0 < mm_n_tok;
}

// The x row of the run's token j.
uint mm_x_row(uint j) {
    return MM_IDS ? mm_slots[mm_slot0 + j] / p.x_slots : j;
}

// The C row of the run's token j.
uint mm_out_row(uint j) {
    return MM_IDS ? mm_slots[mm_slot0 + j] : j;
}
#endif
