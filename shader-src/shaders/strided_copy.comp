//! variant f32_f32 S_F32=1 D_F32=1
//! variant f32_f16 S_F32=1 D_F16=1
//! variant f32_bf16 S_F32=1 D_BF16=1
//! variant f32_f64 S_F32=1 D_F64=1
//! variant f32_u8 S_F32=1 D_U8=1
//! variant f32_u32 S_F32=1 D_U32=1
//! variant f32_i64 S_F32=1 D_I64=1
//! variant f16_f32 S_F16=1 D_F32=1
//! variant f16_f16 S_F16=1 D_F16=1
//! variant f16_bf16 S_F16=1 D_BF16=1
//! variant f16_f64 S_F16=1 D_F64=1
//! variant f16_u8 S_F16=1 D_U8=1
//! variant f16_u32 S_F16=1 D_U32=1
//! variant f16_i64 S_F16=1 D_I64=1
//! variant bf16_f32 S_BF16=1 D_F32=1
//! variant bf16_f16 S_BF16=1 D_F16=1
//! variant bf16_bf16 S_BF16=1 D_BF16=1
//! variant bf16_f64 S_BF16=1 D_F64=1
//! variant bf16_u8 S_BF16=1 D_U8=1
//! variant bf16_u32 S_BF16=1 D_U32=1
//! variant bf16_i64 S_BF16=1 D_I64=1
//! variant f64_f32 S_F64=1 D_F32=1
//! variant f64_f16 S_F64=1 D_F16=1
//! variant f64_bf16 S_F64=1 D_BF16=1
//! variant f64_f64 S_F64=1 D_F64=1
//! variant f64_u8 S_F64=1 D_U8=1
//! variant f64_u32 S_F64=1 D_U32=1
//! variant f64_i64 S_F64=1 D_I64=1
//! variant u8_f32 S_U8=1 D_F32=1
//! variant u8_f16 S_U8=1 D_F16=1
//! variant u8_bf16 S_U8=1 D_BF16=1
//! variant u8_f64 S_U8=1 D_F64=1
//! variant u8_u8 S_U8=1 D_U8=1
//! variant u8_u32 S_U8=1 D_U32=1
//! variant u8_i64 S_U8=1 D_I64=1
//! variant u32_f32 S_U32=1 D_F32=1
//! variant u32_f16 S_U32=1 D_F16=1
//! variant u32_bf16 S_U32=1 D_BF16=1
//! variant u32_f64 S_U32=1 D_F64=1
//! variant u32_u8 S_U32=1 D_U8=1
//! variant u32_u32 S_U32=1 D_U32=1
//! variant u32_i64 S_U32=1 D_I64=1
//! variant i64_f32 S_I64=1 D_F32=1
//! variant i64_f16 S_I64=1 D_F16=1
//! variant i64_bf16 S_I64=1 D_BF16=1
//! variant i64_f64 S_I64=1 D_F64=1
//! variant i64_u8 S_I64=1 D_U8=1
//! variant i64_u32 S_I64=1 D_U32=1
//! variant i64_i64 S_I64=1 D_I64=1
// Strided copy with dtype conversion (vkml_ops::elementwise::copy): for i < n,
// dst[dst_off + sum_d idx_d(i) * dst_str[d]] = convert(src[src_off + sum_d idx_d(i) * src_str[d]]),
// idx(i) the row-major multi-index of i over shape[0..rank]. Works on the bits
// (dtype.glsl): same-type copies are bit-exact, and conversions give candle-core's CPU
// results (`as` casts, the half crate; f64 -> f16 rounds through f32, as half does on
// x86-64 with F16C).
// Bindings: 0 = src, 1 = dst (variant `SRC_DST`).
// Push constants: n, rank (1..=6), src_off, dst_off, shape[6], src_str[6], dst_str[6]
// (elements). Specialization constant 0: workgroup size.
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(S_F16) || defined(D_F16) || defined(S_BF16) || defined(D_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(S_U8) || defined(D_U8)
#extension GL_EXT_shader_8bit_storage : require
#endif
#if defined(S_F64) || defined(D_F64) || defined(S_I64) || defined(D_I64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define VKML_INT64 1
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

// Buffer element types: the bits of each dtype.
#if defined(S_F16) || defined(S_BF16)
#define SRC_T uint16_t
#elif defined(S_U8)
#define SRC_T uint8_t
#elif defined(S_F64) || defined(S_I64)
#define SRC_T uint64_t
#else
#define SRC_T uint
#endif
#if defined(D_F16) || defined(D_BF16)
#define DST_T uint16_t
#elif defined(D_U8)
#define DST_T uint8_t
#elif defined(D_F64) || defined(D_I64)
#define DST_T uint64_t
#else
#define DST_T uint
#endif

// Values in registers: 32-bit words, or 64-bit for the 64-bit types.
#if defined(S_F64) || defined(S_I64)
#define SRC_W uint64_t
#else
#define SRC_W uint
#endif
#if defined(D_F64) || defined(D_I64)
#define DST_W uint64_t
#else
#define DST_W uint
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

#if (defined(S_F32) && defined(D_F32)) || (defined(S_F16) && defined(D_F16)) || \
    (defined(S_BF16) && defined(D_BF16)) || (defined(S_F64) && defined(D_F64)) || \
    (defined(S_U8) && defined(D_U8)) || (defined(S_U32) && defined(D_U32)) || (defined(S_I64) && defined(D_I64))
#define SAME_TYPE 1
#endif

DST_W convert(SRC_W s) {
#ifdef SAME_TYPE
    return DST_W(s);
#else
    // The source in one of four classes: f32 bits (f32, f16, bf16: exact), uint (u8,
    // u32), i64, f64 bits.
#if defined(S_F32) || defined(S_F16) || defined(S_BF16)
#if defined(S_F32)
    uint f = s;
#elif defined(S_F16)
    uint f = vkml_f16_bits_to_f32_bits(uint(s));
#else
    uint f = vkml_bf16_bits_to_f32_bits(uint(s));
#endif
#if defined(D_F32)
    return f;
#elif defined(D_F16)
    return (vkml_f32_bits_to_f16_bits(f));
#elif defined(D_BF16)
    return (vkml_f32_bits_to_bf16_bits(f));
#elif defined(D_U8)
    return (vkml_f32_bits_to_uint_sat(f, 255u));
#elif defined(D_U32)
    return vkml_f32_bits_to_uint_sat(f, 0xffffffffu);
#elif defined(D_I64)
    return uint64_t(vkml_f32_bits_to_i64_sat(f));
#else
    return vkml_f32_bits_to_f64_bits(f);
#endif

#elif defined(S_U8) || defined(S_U32)
    uint u = uint(s);
#if defined(D_F32)
    return vkml_u32_to_f32_bits(u);
#elif defined(D_F16)
    return (vkml_f32_bits_to_f16_bits(vkml_u32_to_f32_bits(u)));
#elif defined(D_BF16)
    return (vkml_f32_bits_to_bf16_bits(vkml_u32_to_f32_bits(u)));
#elif defined(D_U8)
    return u & 0xffu;
#elif defined(D_U32)
    return u;
#elif defined(D_I64)
    return uint64_t(u);
#else
    return vkml_u64_to_f64_bits(uint64_t(u));
#endif

#elif defined(S_I64)
    int64_t v = int64_t(s);
#if defined(D_F32)
    return vkml_i64_to_f32_bits(v);
#elif defined(D_F16)
    return (vkml_f32_bits_to_f16_bits(vkml_i64_to_f32_bits(v)));
#elif defined(D_BF16)
    return (vkml_f32_bits_to_bf16_bits(vkml_i64_to_f32_bits(v)));
#elif defined(D_U8)
    return uint(s) & 0xffu;
#elif defined(D_U32)
    return uint(s);
#else
    return vkml_i64_to_f64_bits(v);
#endif

#else // S_F64
#if defined(D_F32)
    return vkml_f64_bits_to_f32_bits(s);
#elif defined(D_F16)
    return (vkml_f32_bits_to_f16_bits(vkml_f64_bits_to_f32_bits(s)));
#elif defined(D_BF16)
    return (vkml_f64_bits_to_bf16_bits(s));
#elif defined(D_U8)
    return (vkml_f64_bits_to_uint_sat(s, 255u));
#elif defined(D_U32)
    return vkml_f64_bits_to_uint_sat(s, 0xffffffffu);
#else
    return uint64_t(vkml_f64_bits_to_i64_sat(s));
#endif
#endif
#endif
}

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
    dst[id] = DST_T(convert(SRC_W(src[is])));
}
