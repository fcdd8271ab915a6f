// Activation quantization to Q8_1 (ggml `quantize_row_q8_1_ref`): per 32 values,
// d = amax / 127, q = round_half_away(x / d), s = d * sum(q) (f32 d), stored as
// { f16 d, f16 s, i8 qs[32] } = 9 words per block. Division on the GPU may differ from
// the CPU by an ulp (Vulkan allows 2.5 ulp), so a q can differ by one step at a rounding
// boundary; tests bound that.
// Bindings: 0 = x f32 [n_blocks * 32], 1 = out (uint words [n_blocks * 9]). Push: n_blocks.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "common.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Q { uint qw[]; };
layout(push_constant) uniform P { uint n_blocks; } p;

#include "q8_1.glsl"

void main() {
    uint b = vkml_global_index_1d();
    if (b >= p.n_blocks) return;
    uint qs[8];
    uint ds = q8_1_block(b * 32u, qs);
    for (uint w = 0; w < 8u; w++) qw[b * 9u + 1u + w] = qs[w];
    qw[b * 9u] = ds;
}
