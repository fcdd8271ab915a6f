//! variant q4_0 Q4_0=1
//! variant q4_1 Q4_1=1
//! variant q5_0 Q5_0=1
//! variant q5_1 Q5_1=1
//! variant q8_0 Q8_0=1
//! variant q8_1 Q8_1=1
// f32 values to GGML blocks of 32 (ggml's quantize_row_*_ref, as vkml-quant's CPU
// quantizers compute them): Q4_0 and Q5_0 scale by the signed value of largest magnitude
// (d = max / -8, / -16), Q4_1 and Q5_1 by the range (d = (max - min) / 15, / 31, m = min),
// Q8_0 and Q8_1 by the largest magnitude (d = amax / 127; Q8_1 also s = sum(q) d); the
// quants x / d truncated after adding 8.5, 16.5 or 0.5 (saturating, NaN to 0), or rounded
// half away from zero (Q8), d and m stored as f16 rounded to nearest even. Vulkan does not
// round division correctly: the divisions by -8 and -16 are exact products here, the others
// and the reciprocal are the device's, so where it rounds them otherwise a value on a
// rounding boundary may land one quant step away from the CPU's (lavapipe divides exactly).
// Each invocation writes two consecutive blocks of a part (whole 32-bit words: 2 blocks of
// any of these types are a multiple of 4 bytes), blocks packed from byte 0.
// Bindings: 0 = x (f32), 1 = y (the part's blocks, as words). Push constants: x_off (element
// of x where the part's first block starts), n_blocks (blocks in the part), n_words (words
// of y). Grid: x (then y) over block pairs.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0, local_size_x = 64) in;
#include "strided.glsl"
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint x_off; uint n_blocks; uint n_words; } p;

#if defined(Q4_0)
#define BLOCK_BYTES 18u
#elif defined(Q4_1)
#define BLOCK_BYTES 20u
#elif defined(Q5_0)
#define BLOCK_BYTES 22u
#elif defined(Q5_1)
#define BLOCK_BYTES 24u
#elif defined(Q8_0)
#define BLOCK_BYTES 34u
#else
#define BLOCK_BYTES 36u
#endif
#define PAIR_WORDS (2u * BLOCK_BYTES / 4u)

uint w[PAIR_WORDS];

void put8(uint at, uint v) {
    w[at >> 2] |= (v & 0xFFu) << ((at & 3u) * 8u);
}

void put16(uint at, uint v) {
    put8(at, v);
    put8(at + 1u, v >> 8);
}

uint f16_of(float v) {
    return vkml_f32_bits_to_f16_bits(floatBitsToUint(v));
}

// Rust's `v as i8` / `as u8`: truncation toward zero, saturating, NaN to 0.
int trunc_sat(float v, float lo, float hi) {
    return isnan(v) ? 0 : int(clamp(v, lo, hi));
}

void quantize_block(uint b, uint at) {
    uint x0 = p.x_off + b * 32u;
    float v[32];
    for (uint j = 0u; j < 32u; j++) v[j] = x[x0 + j];
#if defined(Q4_0) || defined(Q5_0)
    // The first value of largest magnitude, with its sign.
    float amax = 0.0, vmax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        if (amax < abs(v[j])) {
            amax = abs(v[j]);
            vmax = v[j];
        }
    }
#if defined(Q4_0)
    precise float d = vmax * -0.125; // = vmax / -8, exactly
    const float OFF = 8.5, TOP = 15.0;
#else
    precise float d = vmax * -0.0625; // = vmax / -16, exactly
    const float OFF = 16.5, TOP = 31.0;
#endif
    precise float id = d != 0.0 ? 1.0 / d : 0.0;
    put16(at, f16_of(d));
    uint qh = 0u;
    for (uint j = 0u; j < 16u; j++) {
        precise float a = v[j] * id + OFF;
        precise float c = v[16u + j] * id + OFF;
        uint q0 = uint(min(trunc_sat(a, -128.0, 127.0), int(TOP)));
        uint q1 = uint(min(trunc_sat(c, -128.0, 127.0), int(TOP)));
#if defined(Q4_0)
        put8(at + 2u + j, q0 | (q1 << 4));
#else
        put8(at + 6u + j, (q0 & 15u) | ((q1 & 15u) << 4));
        qh |= ((q0 >> 4) & 1u) << j;
        qh |= ((q1 >> 4) & 1u) << (j + 16u);
#endif
    }
#if defined(Q5_0)
    put16(at + 2u, qh);
    put16(at + 4u, qh >> 16);
#endif
#elif defined(Q4_1) || defined(Q5_1)
    float vmin = 3.4028234663852886e38, vmx = -3.4028234663852886e38;
    for (uint j = 0u; j < 32u; j++) {
        if (v[j] < vmin) vmin = v[j];
        if (v[j] > vmx) vmx = v[j];
    }
#if defined(Q4_1)
    precise float d = (vmx - vmin) / 15.0;
#else
    precise float d = (vmx - vmin) / 31.0;
#endif
    precise float id = d != 0.0 ? 1.0 / d : 0.0;
    put16(at, f16_of(d));
    put16(at + 2u, f16_of(vmin));
    uint qh = 0u;
    for (uint j = 0u; j < 16u; j++) {
        precise float a = (v[j] - vmin) * id + 0.5;
        precise float c = (v[16u + j] - vmin) * id + 0.5;
#if defined(Q4_1)
        uint q0 = uint(min(trunc_sat(a, -128.0, 127.0), 15));
        uint q1 = uint(min(trunc_sat(c, -128.0, 127.0), 15));
        put8(at + 4u + j, q0 | (q1 << 4));
#else
        uint q0 = uint(trunc_sat(a, 0.0, 255.0));
        uint q1 = uint(trunc_sat(c, 0.0, 255.0));
        put8(at + 8u + j, (q0 & 15u) | ((q1 & 15u) << 4));
        qh |= ((q0 >> 4) & 1u) << j;
        qh |= ((q1 >> 4) & 1u) << (j + 16u);
#endif
    }
#if defined(Q5_1)
    put16(at + 4u, qh);
    put16(at + 6u, qh >> 16);
#endif
#else
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(v[j]));
    precise float d = amax / 127.0;
    precise float id = d != 0.0 ? 1.0 / d : 0.0;
    put16(at, f16_of(d));
    int sum = 0;
#if defined(Q8_0)
    const uint QS = 2u;
#else
    const uint QS = 4u;
#endif
    for (uint j = 0u; j < 32u; j++) {
        precise float a = v[j] * id;
        // f32::round: half away from zero (a - trunc(a) is exact), then `as i8`.
        float r = trunc(a);
        if (abs(a - r) >= 0.5) r += sign(a);
        int q = trunc_sat(r, -128.0, 127.0);
        sum += q;
        put8(at + QS + j, uint(q));
    }
#if defined(Q8_1)
    precise float s = float(sum) * d;
    put16(at + 2u, f16_of(s));
#endif
#endif
}

void main() {
    uint pair = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint b0 = 2u * pair;
    if (b0 >= p.n_blocks) return;
    for (uint i = 0u; i < PAIR_WORDS; i++) w[i] = 0u;
    quantize_block(b0, 0u);
    if (b0 + 1u < p.n_blocks) quantize_block(b0 + 1u, BLOCK_BYTES);
    uint base = pair * PAIR_WORDS;
    for (uint i = 0u; i < PAIR_WORDS; i++) {
        if (base + i < p.n_words) y[base + i] = w[i];
    }
}
