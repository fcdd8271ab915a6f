//! variant f32 V_F32=1
//! variant f16 V_F16=1
//! variant bf16 V_BF16=1
//! variant f64 V_F64=1
// Direct 2-D convolution and transposed convolution (vkml_ops::conv: candle's conv1d,
// conv2d, conv_transpose1d and conv_transpose2d; the 1-D forms have in_h = k_h = 1), one
// invocation per output element, both operands read through their strides.
//
//   x: [batch, c_in, in_h, in_w]            y (packed): [batch, c_out, out_h, out_w]
//   w: [c_out, c_in, k_h, k_w]  (TRANSPOSED = 0)     [c_in, c_out, k_h, k_w]  (TRANSPOSED = 1)
//
// Forward (PyTorch's Conv2d, groups = 1; taps outside x read zero):
//   y[b, o, i, j] = sum_{c, u, v} x[b, c, i s_h + u d_h - p_h, j s_w + v d_w - p_w] w[o, c, u, v]
// Transposed (PyTorch's ConvTranspose2d; output_padding only widens out_h / out_w):
//   y[b, o, i, j] = sum_{c, u, v} x[b, c, ii, jj] w[c, o, u, v] over ii s_h = i + p_h - u d_h,
//   jj s_w = j + p_w - v d_w with 0 <= ii < in_h, 0 <= jj < in_w.
// Sums in the order c, u, v in V_T (f32 for f16 and bf16, rounded once on store).
// Bindings: 0 = x, 1 = w, 2 = y. Push constants as P (element offsets and strides).
// Specialization constants: 0 = workgroup size, 1 = TRANSPOSED.
#version 450
#extension GL_GOOGLE_include_directive : require
#if defined(V_F16) || defined(V_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#if defined(V_F64)
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#define VKML_INT64 1
#endif
layout(local_size_x_id = 0, local_size_x = 256) in;
layout(constant_id = 1) const uint TRANSPOSED = 0;
#include "common.glsl"
#include "strided.glsl"
#include "dtype.glsl"

layout(std430, set = 0, binding = 0) readonly buffer X { V_ST x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { V_ST w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { V_ST y[]; };
layout(push_constant) uniform P {
    uint n;        // batch * c_out * out_h * out_w
    uint c_in;
    uint c_out;
    uint in_h;
    uint in_w;
    uint out_h;
    uint out_w;
    uint k_h;
    uint k_w;
    uint p_h;
    uint p_w;
    uint s_h;
    uint s_w;
    uint d_h;
    uint d_w;
    uint x_off;
    uint x_str[4];
    uint w_off;
    uint w_str[4];
} p;

void main() {
    uint idx = vkml_global_index_1d();
    if (idx >= p.n) return;
    uint j = idx % p.out_w;
    uint t = idx / p.out_w;
    uint i = t % p.out_h;
    t /= p.out_h;
    uint o = t % p.c_out;
    uint b = t / p.c_out;
    V_T acc = V_T(0);
    uint xb = p.x_off + b * p.x_str[0];
    for (uint c = 0u; c < p.c_in; ++c) {
        uint xc = xb + c * p.x_str[1];
        uint wc = TRANSPOSED == 0u ? p.w_off + o * p.w_str[0] + c * p.w_str[1] : p.w_off + c * p.w_str[0] + o * p.w_str[1];
        for (uint u = 0u; u < p.k_h; ++u) {
            int ih;
            if (TRANSPOSED == 0u) {
                ih = int(i * p.s_h + u * p.d_h) - int(p.p_h);
            } else {
                int num = int(i + p.p_h) - int(u * p.d_h);
                if (num < 0 || uint(num) % p.s_h != 0u) continue;
                ih = int(uint(num) / p.s_h);
            }
            if (ih < 0 || uint(ih) >= p.in_h) continue;
            uint xr = xc + uint(ih) * p.x_str[2];
            uint wr = wc + u * p.w_str[2];
            for (uint v = 0u; v < p.k_w; ++v) {
                int iw;
                if (TRANSPOSED == 0u) {
                    iw = int(j * p.s_w + v * p.d_w) - int(p.p_w);
                } else {
                    int num = int(j + p.p_w) - int(v * p.d_w);
                    if (num < 0 || uint(num) % p.s_w != 0u) continue;
                    iw = int(uint(num) / p.s_w);
                }
                if (iw < 0 || uint(iw) >= p.in_w) continue;
                acc += V_LOAD(x, xr + uint(iw) * p.x_str[3]) * V_LOAD(w, wr + v * p.w_str[3]);
            }
        }
    }
    V_STORE(y, idx, acc);
}
