//! variant f32 QTYPE=0
//! variant f16 QTYPE=1
//! variant bf16 QTYPE=30
//! variant q4_0 QTYPE=2
//! variant q4_1 QTYPE=3
//! variant q5_0 QTYPE=6
//! variant q5_1 QTYPE=7
//! variant q8_0 QTYPE=8
//! variant q8_1 QTYPE=9
//! variant q2_k QTYPE=10
//! variant q3_k QTYPE=11
//! variant q4_k QTYPE=12
//! variant q5_k QTYPE=13
//! variant q6_k QTYPE=14
//! variant q8_k QTYPE=15
//! variant iq4_nl QTYPE=20
//! variant iq4_xs QTYPE=23
//! variant mxfp4 QTYPE=39
//! variant nvfp4 QTYPE=40
//! variant tq1_0 QTYPE=34
//! variant tq2_0 QTYPE=35
//! variant q1_0 QTYPE=41
//! variant q2_0 QTYPE=42
//! variant iq2_xxs QTYPE=16
//! variant iq2_xs QTYPE=17
//! variant iq2_s QTYPE=22
//! variant iq3_xxs QTYPE=18
//! variant iq3_s QTYPE=21
//! variant iq1_s QTYPE=19
//! variant iq1_m QTYPE=29
// Embedding lookup: out[r, :] = dequant(table[ids[r], :]) * scale for r < n_ids (scale:
// Gemma's sqrt(n_embd), else 1).
// Bindings: 0 = table rows (raw blocks; row i starts at src_offset + i * row_bytes),
//           1 = ids (u32[n_ids]), 2 = out (f32[n_ids * k]).
// Push constants: src_offset (bytes), row_bytes, k (elements per row, multiple of QK),
//                 n_ids, n_rows (rows in this binding), row0 (the table row the binding
//                 starts at: a table split over several bindings runs one dispatch per
//                 part, each writing only the ids it holds), last (1 for the last part:
//                 ids >= row0 + n_rows give NaN rows there), scale (f32 bits).
// Grid: x over the k elements of a row, y over ids.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer Ids { uint ids[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { uint src_offset; uint row_bytes; uint k; uint n_ids; uint n_rows; uint row0; uint last; float scale; } p;

void main() {
    uint c = gl_GlobalInvocationID.x;
    uint r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
    if (c >= p.k || r >= p.n_ids) return;
    uint id = ids[r];
    float v = uintBitsToFloat(0x7FC00000u); // out-of-range ids give NaN, never a read past the table
    if (id >= p.row0 && id - p.row0 < p.n_rows) {
        v = dq(p.src_offset + (id - p.row0) * p.row_bytes + (c / QK) * QBYTES, c % QK) * p.scale;
    } else if (id < p.row0 || p.last == 0u) {
        return; // another part's row
    }
    y[r * p.k + c] = v;
}
