// Embedding lookup: out[r, :] = dequant(table[ids[r], :]) * scale for r < n_ids (scale:
// Gemma's sqrt(n_embd), else 1). get_rows.comp reads a table in one binding;
// get_rows_parts.comp (QW_PARTS) one in up to four (parts of rows: a table past the device's
// storage-buffer range), so that one dispatch serves any id of up to four parts.
// Bindings: 0 (and 3, 4, 5 with QW_PARTS) = the parts' rows (raw blocks; row i of a part at
//           byte i * row_bytes; unused parts bind the last one again), 1 = ids (u32[n_ids]),
//           2 = out (f32[n_ids * k]).
// Push constants: row_bytes, k (elements per row, multiple of QK), n_ids, row0 (the table
//                 row of part 0's first row), end[4] (part i holds rows end[i - 1] ..
//                 end[i], end[-1] = row0; unused parts are empty: end[i] = end[i - 1]; one
//                 binding: all four are its end), last (1 where end[3] is the table's end:
//                 ids past it give NaN rows; a table of more parts than a dispatch binds
//                 runs several, each writing only the ids it holds), scale (f32 bits).
// Grid: x over the k elements of a row, y over ids.
// Include after #version and GL_GOOGLE_include_directive.
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "quant.glsl"
layout(std430, set = 0, binding = 1) readonly buffer Ids { uint ids[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { uint row_bytes; uint k; uint n_ids; uint row0; uint end[4]; uint last; float scale; } p;

void main() {
    uint c = gl_GlobalInvocationID.x;
    uint r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
    if (c >= p.k || r >= p.n_ids) return;
    uint id = ids[r];
    float v = uintBitsToFloat(0x7FC00000u); // out-of-range ids give NaN, never a read past the table
    if (id >= p.row0 && id < p.end[3]) {
#ifdef QW_PARTS
        q_part = id < p.end[0] ? 0u : (id < p.end[1] ? 1u : (id < p.end[2] ? 2u : 3u));
        uint first = q_part == 0u ? p.row0 : p.end[q_part - 1u];
#else
        uint first = p.row0;
#endif
        v = dq((id - first) * p.row_bytes + (c / QK) * QBYTES, c % QK) * p.scale;
    } else if (id < p.row0 || p.last == 0u) {
        return; // another dispatch's row
    }
    y[r * p.k + c] = v;
}
