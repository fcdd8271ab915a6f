// The rotary embedding of one element, as rope.comp rotates it (shared by rope_kv.comp and
// flash_attn_gqa.comp's rope_* variants, so that each rotates with the same arithmetic):
// within the first `rot` dims of a head, element e pairs with `partner` (INTERLEAVED: 2j
// and 2j + 1; else neox: j and j + rot / 2), j the column of the cos/sin tables, and the
// pair (a, b) turns into (a cos - b sin, a sin + b cos).
#ifndef VKML_ROPE_PAIR_GLSL
#define VKML_ROPE_PAIR_GLSL

// Element e's table column j, whether it is its pair's first element, and its partner,
// interleaved or neox as `interleaved` says.
void rope_pair_style(bool interleaved, uint e, uint rot, out uint j, out bool first, out uint partner) {
    if (interleaved) {
        j = e / 2u;
        first = (e & 1u) == 0u;
        partner = first ? e + 1u : e - 1u;
    } else {
        uint half_rot = rot / 2u;
        j = e % half_rot;
        first = e < half_rot;
        partner = first ? e + half_rot : e - half_rot;
    }
}

// rope_pair_style of the kernel's style (INTERLEAVED defined or not).
void rope_pair(uint e, uint rot, out uint j, out bool first, out uint partner) {
#ifdef INTERLEAVED
    rope_pair_style(true, e, rot, j, first, partner);
#else
    rope_pair_style(false, e, rot, j, first, partner);
#endif
}

// The rotated value of element a with partner b, cos c and sin s: first, a cos - b sin;
// second (a the pair's second, b its first), b sin + a cos.
float rope_apply(float a, float b, bool first, float c, float s) {
    return first ? a * c - b * s : b * s + a * c;
}
#endif
