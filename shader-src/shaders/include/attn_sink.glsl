// Attention sinks (gpt-oss; llama.cpp's ggml_flash_attn_ext_add_sinks): a per-head logit s
// that joins the softmax's denominator and has no value. For a row with running max m
// (-inf without a visible key) and sum l = sum_j exp(x_j - m), the normalised output is
// acc * attn_sink_scale(s, m, l) for the unnormalised acc = sum_j exp(x_j - m) v_j:
// with M = max(m, s), exp(m - M) / (l exp(m - M) + exp(s - M)).
#ifndef VKML_ATTN_SINK_GLSL
#define VKML_ATTN_SINK_GLSL
float attn_sink_scale(float s, float m, float l) {
    float mx = max(m, s);
    float w = isinf(m) ? 0.0 : exp(m - mx);
    return w / (l * w + exp(s - mx));
}
#endif
