// Order-preserving 32-bit key of a finite float: a larger float has a larger key; -0 and +0
// share +0's key (they compare equal). Radix selects over logits (sample.comp,
// sample_candidates.comp) work on these keys.
#ifndef VKML_ORDER_KEY_GLSL
#define VKML_ORDER_KEY_GLSL
uint order_key(float v) {
    uint b = floatBitsToUint(v + 0.0); // -0 + 0 is +0
    return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}
#endif
