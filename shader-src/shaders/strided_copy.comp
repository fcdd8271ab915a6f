//! variant f32_f32
//! variant f32_f16 DST_F16=1
//! variant f16_f32 SRC_F16=1
//! variant f16_f16 SRC_F16=1 DST_F16=1
// Strided copy with dtype conversion (vkml_ops::elementwise::copy): for i < n,
// dst[dst_off + sum_d idx_d(i) * dst_str[d]] = convert(src[src_off + sum_d idx_d(i) * src_str[d]]),
// idx(i) the row-major multi-index of i over shape[0..rank]. Works on the bits only
// (strided.glsl): same-type copies are bit-exact, f16 -> f32 exact, f32 -> f16 rounds to
// nearest even, as the `half` crate does.
// Bindings: 0 = src, 1 = dst (variant `SRC_DST`).
// Push constants: n, rank (1..=6), src_off, dst_off, shape[6], src_str[6], dst_str[6]
// (elements). Specialization constant 0: workgroup size.
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(SRC_F16) || defined(DST_F16)
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
#include "strided.glsl"

#ifdef SRC_F16
#define SRC_T uint16_t
#else
#define SRC_T uint
#endif
#ifdef DST_F16
#define DST_T uint16_t
#else
#define DST_T uint
#endif

layout(std430, set = 0, binding = 0) readonly buffer S { SRC_T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer D { DST_T dst[]; };
layout(push_constant) uniform P {
    uint n;
    uint rank;
    uint src_off;
    uint dst_off;
    uint shape[VKML_MAX_RANK];
    uint src_str[VKML_MAX_RANK];
    uint dst_str[VKML_MAX_RANK];
} p;

void main() {
    uint i = vkml_global_index_1d();
    if (i >= p.n) return;
    uint r = i;
    uint is = p.src_off;
    uint id = p.dst_off;
    for (uint d = p.rank - 1u; d > 0u; --d) {
        uint q = r / p.shape[d];
        uint c = r - q * p.shape[d];
        is += c * p.src_str[d];
        id += c * p.dst_str[d];
        r = q;
    }
    is += r * p.src_str[0];
    id += r * p.dst_str[0];
    uint bits = uint(src[is]);
#if defined(SRC_F16) && !defined(DST_F16)
    bits = vkml_f16_bits_to_f32_bits(bits);
#elif !defined(SRC_F16) && defined(DST_F16)
    bits = vkml_f32_bits_to_f16_bits(bits);
#endif
    dst[id] = DST_T(bits);
}
