// The merge of split-KV attention's partial results (FlashDecoding), shared by
// flash_attn_combine.comp and flash_attn_gqa.comp's combine_* variants so both give the
// same bits: M = max_s m_s; L = sum_s l_s exp(m_s - M); out = sum_s o_s exp(m_s - M) / L
// (0 where no split saw a key); with sinks (p.has_sinks, attn_sinks: include/attn_sink.glsl)
// the sink of the row's head joins L. Include after the bindings po f32 [n_splits, t_q,
// n_heads, d], ml f32 [n_splits, t_q, n_heads, 2] and attn_sinks, and push constants with
// t_q, n_heads, d, n_splits and has_sinks.
#ifndef VKML_FLASH_ATTN_MERGE_GLSL
#define VKML_FLASH_ATTN_MERGE_GLSL

// Element dd of output row `row` (= token * n_heads + head).
float attn_merge(uint row, uint dd) {
    uint stride = p.t_q * p.n_heads;
    float m = uintBitsToFloat(0xFF800000u);
    for (uint s = 0; s < p.n_splits; s++) m = max(m, ml[(s * stride + row) * 2u]);
    float l = 0.0, a = 0.0;
    if (!isinf(m)) {
        for (uint s = 0; s < p.n_splits; s++) {
            float ms = ml[(s * stride + row) * 2u];
            if (isinf(ms)) continue; // a split with no visible key
            float w = exp(ms - m);
            l += ml[(s * stride + row) * 2u + 1u] * w;
            a += po[(s * stride + row) * p.d + dd] * w;
        }
    }
    if (p.has_sinks != 0u) return a * attn_sink_scale(attn_sinks[row % p.n_heads], m, l);
    return l > 0.0 ? a / l : 0.0;
}
#endif
