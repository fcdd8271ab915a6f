// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011):
// four random words for counter `c` under key `k`. rand.comp's fills and sample.comp's
// draws; vkml_ops::sampling::philox4x32_10 is the same function on the CPU.
#ifndef VKML_PHILOX_GLSL
#define VKML_PHILOX_GLSL
uvec4 philox(uvec4 c, uvec2 k) {
    for (int r = 0; r < 10; ++r) {
        if (r > 0) k += uvec2(0x9E3779B9u, 0xBB67AE85u);
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}
#endif
