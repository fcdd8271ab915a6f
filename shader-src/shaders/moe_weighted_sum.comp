// The mixture-of-experts output of each token: the weighted sum of its k slots' expert
// outputs (llama.cpp's build_moe_ffn: ggml_mul by the weights, then the sum over the
// experts),
//   y[n, c] (+)= sum_{j < k} w[n, j] * d[n k + j, c],
// accumulated in f32 in order j = 0, 1, ...; with accumulate the sum is added to y (the
// residual stream: the block's residual add in the same pass). With has_bias (gpt-oss's
// ffn_down_exps.bias) each slot's expert bias joins its output first: d + b[ids[n k + j], c].
// With sigmoid_w each weight is the sigmoid of w (Qwen2-MoE's shared expert: its output
// times sigmoid(ffn_gate_inp_shexp x), k = 1).
// Bindings: 0 = w f32 [t, k], 1 = d f32 [t k, n], 2 = y f32 [t, n], 3 = ids u32 [t k], 4 = b
// f32 [n_expert, n] (w stands in for both without a bias). Push constants: k, n,
// accumulate, has_bias, sigmoid_w. Grid: x = ceil(n / 256), y = t.
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in; // always 256
layout(std430, set = 0, binding = 0) readonly buffer W { float w[]; };
layout(std430, set = 0, binding = 1) readonly buffer D { float d[]; };
layout(std430, set = 0, binding = 2) buffer Y { float y[]; };
layout(std430, set = 0, binding = 3) readonly buffer Ids { uint ids[]; };
layout(std430, set = 0, binding = 4) readonly buffer B { float b[]; };
layout(push_constant) uniform P { uint k; uint n; uint accumulate; uint has_bias; uint sigmoid_w; } p;

void main() {
    uint c = gl_GlobalInvocationID.x, tok = gl_WorkGroupID.y;
    if (c >= p.n) return;
    float s = 0.0;
    for (uint j = 0; j < p.k; j++) {
        uint slot = tok * p.k + j;
        float v = d[slot * p.n + c];
        if (p.has_bias != 0u) v += b[ids[slot] * p.n + c];
        float ws = p.sigmoid_w != 0u ? 1.0 / (1.0 + exp(-w[slot])) : w[slot];
        s += ws * v;
    }
    uint at = tok * p.n + c;
    y[at] = p.accumulate != 0u ? y[at] + s : s;
}
