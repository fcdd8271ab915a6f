// Activations of the gated products (candle's silu / gelu / gelu_erf), in f32:
//   silu: g / (1 + exp(-g));  gelu: tanh approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)));
//   gelu_erf: 0.5 g (1 + erf(g / sqrt(2)));
// and gpt-oss's clamped SwiGLU of gate and up together (glu_swiglu_oai).
#ifndef VKML_ACTIVATION_GLSL
#define VKML_ACTIVATION_GLSL
// erf with |error| < 1.2e-7 (W. J. Cody's rational Chebyshev form as tabulated in
// Numerical Recipes, erfc via exp(-z^2 - 1.26551223 + t * (...))).
float erf_approx(float x) {
    float z = abs(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
        t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
        t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0.0 ? 1.0 - r : r - 1.0;
}

float act_silu(float x) { return x / (1.0 + exp(-x)); }

float act_gelu(float x) {
    float inner = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(inner));
}

float act_gelu_erf(float x) { return 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)); }

// gpt-oss's gated product (ggml's swiglu_oai with llama.cpp's alpha 1.702 and limit 7):
// x = min(g, 7), y = clamp(u, -7, 7), x / (1 + exp(-1.702 x)) * (y + 1).
float glu_swiglu_oai(float g, float u) {
    float x = min(g, 7.0), y = clamp(u, -7.0, 7.0);
    return x / (1.0 + exp(1.702 * (-x))) * (y + 1.0);
}

// Soft-capping (Gemma 2's logits): cap * tanh(v * inv), inv = 1 / cap rounded to f32 on the
// host, as an affine, a tanh and an affine round it (candle's composition). tanh saturates
// to +-1 in f32 beyond |a| = 9.1; clamping keeps exp-based implementations finite.
float softcap(float v, float inv, float cap) {
    precise float a = v * inv + 0.0;
    float t = isnan(a) ? a : tanh(clamp(a, -10.0, 10.0));
    precise float r = t * cap + 0.0;
    return r;
}
#endif
