// A bias per expert added to each slot's row (ggml's add_id, as llama.cpp's build_moe_ffn
// adds the expert biases of gpt-oss): y[s, r] += b[ids[s] * b_stride + b_off + r] for
// s < n_slots, r < rows; a slot whose id is n_expert or more is left as it is.
// Bindings: 0 = y f32 [n_slots, rows] (read-write), 1 = b f32 [n_expert, b_stride],
// 2 = ids u32 [n_slots]. Push constants: n_slots, rows, b_stride, b_off, n_expert.
// Grid: x = ceil(rows / 256), y = slots (split over z past the device's y limit).
#version 450
layout(local_size_x_id = 0, local_size_x = 256) in; // always 256
layout(std430, set = 0, binding = 0) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer Ids { uint ids[]; };
layout(push_constant) uniform P { uint n_slots; uint rows; uint b_stride; uint b_off; uint n_expert; } p;

void main() {
    uint r = gl_GlobalInvocationID.x;
    uint slot = gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y;
    if (r >= p.rows || slot >= p.n_slots) return;
    uint e = ids[slot];
    if (e >= p.n_expert) return;
    y[slot * p.rows + r] += b[e * p.b_stride + p.b_off + r];
}
