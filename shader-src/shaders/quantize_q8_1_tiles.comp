// Activation quantization to Q8_1 (include/q8_1.glsl, the same quants and scales as
// quantize_q8_1.comp) in the tiled layout the int8 mat-mat (mul_mat_cm_i8.comp) reads a
// step from as two contiguous runs: for token tile T (128 tokens; n_pad = tokens rounded
// up to 128) and k-block b (nb = k / 32 per token), tile block tb = T * nb + b,
//   quants: 128 tokens x 32 i8 at bytes 4096 tb + 32 (n % 128) (4 KiB per step),
//   scales: 128 f16 d at byte n_pad * k + 256 tb + 2 (n % 128) (256 bytes per step).
// Tokens n_tok .. n_pad - 1 get zero quants and scales. (s = d * sum(q) is not stored:
// the Q4_0 / Q8_0 products do not use it.)
// Bindings: 0 = x f32 [n_tok, k], 1 = out (uint words [n_pad * k / 4 + n_pad * k / 64]).
// Push: n_tok, k (a multiple of 32), n_pad. One invocation per token pair and k-block:
// grid over n_pad / 2 * nb invocations.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Q { uint qw[]; };
layout(push_constant) uniform P { uint n_tok; uint k; uint n_pad; } p;

#include "q8_1.glsl"

void main() {
    uint i = vkml_global_index_1d();
    uint nb = p.k >> 5;
    if (i >= (p.n_pad >> 1) * nb) return;
    uint b = i % nb, n = 2u * (i / nb);
    uint tb = (n >> 7) * nb + b;
    uint ds[2];
    [[unroll]] for (uint h = 0; h < 2u; h++) {
        uint qs[8];
        ds[h] = 0u;
        if (n + h < p.n_tok) {
            ds[h] = q8_1_block((n + h) * p.k + 32u * b, qs);
        } else {
            for (uint w = 0; w < 8u; w++) qs[w] = 0u;
        }
        uint o = (tb * 128u + ((n + h) & 127u)) * 8u;
        for (uint w = 0; w < 8u; w++) qw[o + w] = qs[w];
    }
    qw[(p.n_pad * p.k >> 2) + tb * 64u + ((n & 127u) >> 1)] = (ds[0] & 0xFFFFu) | (ds[1] << 16);
}
