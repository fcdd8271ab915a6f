// Copies n MXFP4 blocks between two parts in vkml's device layout (ops/src/quant/
// mxfp4_layout.rs: groups of 16 blocks, the 16 E8M0 scales then the 16 blocks' 16 code
// bytes): source block src0 + i to destination block dst0 + i. Blocks change group, so
// this is no byte copy; QMatrix::concat_rows runs it for MXFP4.
// Each invocation writes one destination quad (blocks 4q .. 4q + 3, whose scales share a
// word): the scale bytes of its blocks in the range, the other bytes of that word kept,
// and the codes of those blocks.
// Bindings: 0 = source part (uint[]), 1 = destination part (uint[], read-write). Push
// constants: src0, dst0, n (blocks), n_quads. Grid: x (then y) over n_quads quads from
// quad dst0 / 4.
#version 450
layout(local_size_x_id = 0, local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer S { uint src[]; };
layout(std430, set = 0, binding = 1) buffer D { uint dst[]; };
layout(push_constant) uniform P { uint src0; uint dst0; uint n; uint n_quads; } p;

// Word of block b's scale (its byte b % 4), and of its first code word.
uint scale_word(uint b) { return 68u * (b >> 4) + ((b & 15u) >> 2); }
uint code_word(uint b) { return 68u * (b >> 4) + 4u + 4u * (b & 15u); }

void main() {
    uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    if (i >= p.n_quads) return;
    uint first = ((p.dst0 >> 2) + i) * 4u;
    uint keep = 0u, scales = 0u;
    for (uint k = 0u; k < 4u; k++) {
        uint b = first + k;
        if (b < p.dst0 || b - p.dst0 >= p.n) {
            keep |= 0xFFu << (8u * k);
            continue;
        }
        uint sb = p.src0 + (b - p.dst0);
        scales |= ((src[scale_word(sb)] >> (8u * (sb & 3u))) & 0xFFu) << (8u * k);
        for (uint w = 0u; w < 4u; w++) dst[code_word(b) + w] = src[code_word(sb) + w];
    }
    uint at = scale_word(first);
    dst[at] = keep == 0u ? scales : (dst[at] & keep) | scales;
}
