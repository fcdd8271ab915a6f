//! variant f32
//! variant f16 F16=1
//! variant pair_f32 PAIR=1
//! variant pair_f16 PAIR=1 F16=1
// Appends new keys or values to an f16 cache: cache[kvh, (pos0 + t) % ctx, :] = f16(x[t, kvh, :]),
// where token t's heads start at element x_off + t * x_stride of x (contiguous
// [t_new, n_kv_heads, d]: x_off 0, x_stride n_kv_heads * d; the K or V part of stacked
// Q|K|V rows: their offset and the stacked row length).
// Bindings: 0 = x, f32, or with F16 packed f16 words (copied as they are; no 16-bit
// storage feature needed; x_off and x_stride even), 1 = cache (packed f16 words,
// [n_kv_heads, ctx, d]). Push: t_new, n_kv_heads, d (even), pos0, ctx, x_off, x_stride.
// One invocation per pair of elements; grid x over d/2, y over t_new * n_kv_heads.
// PAIR: keys and values in one dispatch, workgroup z = 0 appending x to the cache of
// binding 1 and z = 1 binding 2's x to binding 3's cache, from x_off / x_stride and
// v_off / v_stride (two more push constants); grid z = 2.
#version 450
layout(local_size_x_id = 0, local_size_x = 64) in;
#ifdef F16
layout(std430, set = 0, binding = 0) readonly buffer X { uint xw[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
#endif
layout(std430, set = 0, binding = 1) buffer C { uint cw[]; };
#ifdef PAIR
#ifdef F16
layout(std430, set = 0, binding = 2) readonly buffer XV { uint vxw[]; };
#else
layout(std430, set = 0, binding = 2) readonly buffer XV { float vx[]; };
#endif
layout(std430, set = 0, binding = 3) buffer CV { uint cvw[]; };
layout(push_constant) uniform P {
    uint t_new; uint n_kv_heads; uint d; uint pos0; uint ctx; uint x_off; uint x_stride; uint v_off; uint v_stride;
} p;
#else
layout(push_constant) uniform P { uint t_new; uint n_kv_heads; uint d; uint pos0; uint ctx; uint x_off; uint x_stride; } p;
#endif

void main() {
    uint i = gl_GlobalInvocationID.x, row = gl_GlobalInvocationID.y;
    if (i >= p.d / 2u || row >= p.t_new * p.n_kv_heads) return;
    uint t = row / p.n_kv_heads, kvh = row % p.n_kv_heads;
    // Position pos0 + t goes to slot (pos0 + t) % ctx: a plain cache (positions < ctx) or a
    // ring over the last ctx positions (a sliding-window layer's).
    uint dst = ((kvh * p.ctx + (p.pos0 + t) % p.ctx) * p.d) / 2u + i;
#ifdef PAIR
    if (gl_WorkGroupID.z == 1u) {
        uint vsrc = p.v_off + t * p.v_stride + kvh * p.d + 2u * i;
#ifdef F16
        cvw[dst] = vxw[vsrc / 2u];
#else
        cvw[dst] = packHalf2x16(vec2(vx[vsrc], vx[vsrc + 1u]));
#endif
        return;
    }
#endif
    uint src = p.x_off + t * p.x_stride + kvh * p.d + 2u * i;
#ifdef F16
    cw[dst] = xw[src / 2u];
#else
    cw[dst] = packHalf2x16(vec2(x[src], x[src + 1u]));
#endif
}
