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

// Round half away from zero, exactly (x - trunc(x) is exact for |x| < 2^23).
float round_away(float v) {
    float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

void main() {
    uint b = vkml_global_index_1d();
    if (b >= p.n_blocks) return;
    float amax = 0.0;
    for (uint j = 0; j < 32u; j++) amax = max(amax, abs(x[b * 32u + j]));
    float d = amax / 127.0;
    float id = d != 0.0 ? 1.0 / d : 0.0;
    int sum = 0;
    for (uint w = 0; w < 8u; w++) {
        uint packed = 0u;
        for (uint k = 0; k < 4u; k++) {
            int q = int(round_away(x[b * 32u + 4u * w + k] * id));
            sum += q;
            packed |= (uint(q) & 0xFFu) << (8u * k);
        }
        qw[b * 9u + 1u + w] = packed;
    }
    qw[b * 9u] = packHalf2x16(vec2(d, float(sum) * d));
}
