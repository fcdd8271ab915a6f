// Q8_1 quantization of one block of 32 f32 values (ggml `quantize_row_q8_1_ref`):
// d = amax / 127, q = round_half_away(x / d), s = d * sum(q). Shared by
// quantize_q8_1.comp (ggml's block layout) and quantize_q8_1_tiles.comp (the int8
// mat-mat's tiled layout), so both give the same quants and scales, and by norm.comp's
// rms_q8_1 variant (the normalised row quantized as it is made). Include after a binding
// `float x[]`, or define Q8_1_NO_X for q8_1_pack alone.

// Round half away from zero, exactly (v - trunc(v) is exact for |v| < 2^23).
float round_away(float v) {
    float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

// The block v[0 .. 32): its 32 quants as 8 little-endian words and packHalf2x16(d, s).
uint q8_1_pack(float v[32], out uint qs[8]) {
    float amax = 0.0;
    for (uint j = 0; j < 32u; j++) amax = max(amax, abs(v[j]));
    float d = amax / 127.0;
    float id = d != 0.0 ? 1.0 / d : 0.0;
    int sum = 0;
    for (uint w = 0; w < 8u; w++) {
        uint packed = 0u;
        for (uint k = 0; k < 4u; k++) {
            int q = int(round_away(v[4u * w + k] * id));
            sum += q;
            packed |= (uint(q) & 0xFFu) << (8u * k);
        }
        qs[w] = packed;
    }
    return packHalf2x16(vec2(d, float(sum) * d));
}

#ifndef Q8_1_NO_X
// The block of x[base .. base + 32), as q8_1_pack.
uint q8_1_block(uint base, out uint qs[8]) {
    float v[32];
    for (uint j = 0; j < 32u; j++) v[j] = x[base + j];
    return q8_1_pack(v, qs);
}
#endif
