// Workgroup-wide sum and max of one float per invocation. Include after the
// workgroup-size layout; the workgroup size must be a power of two no larger than
// REDUCE_MAX (default 1024). Every invocation of the workgroup must call these from
// uniform control flow (they contain barriers); all get the same result.
//
// Two paths, chosen by the variant:
//   SUBGROUP_REDUCE: subgroupAdd / subgroupMax within each subgroup, then one barrier
//     and every invocation folds the gl_NumSubgroups partials from shared memory in the
//     same order. The including shader enables GL_KHR_shader_subgroup_arithmetic (the
//     device must report `arithmetic` subgroup operations). No subgroup size is assumed
//     (lavapipe 8, NVIDIA 32, AMD 32 or 64): the partials are indexed by gl_SubgroupID,
//     and a workgroup of one subgroup needs no shared memory at all.
//   otherwise (portable, no subgroup feature): a shared-memory tree, log2(workgroup)
//     barriers.
#ifndef VKML_REDUCE_GLSL
#define VKML_REDUCE_GLSL
#ifndef REDUCE_MAX
#define REDUCE_MAX 1024
#endif
shared float red_buf[REDUCE_MAX];

#ifdef SUBGROUP_REDUCE

float wg_sum(float v) {
    float s = subgroupAdd(v);
    if (gl_NumSubgroups == 1u) return s; // uniform: one subgroup spans the workgroup
    if (subgroupElect()) red_buf[gl_SubgroupID] = s;
    barrier();
    float r = red_buf[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r += red_buf[i];
    barrier();
    return r;
}

float wg_max(float v) {
    float s = subgroupMax(v);
    if (gl_NumSubgroups == 1u) return s;
    if (subgroupElect()) red_buf[gl_SubgroupID] = s;
    barrier();
    float r = red_buf[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) r = max(r, red_buf[i]);
    barrier();
    return r;
}

#else

float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    red_buf[t] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (t < s) red_buf[t] += red_buf[t + s];
        barrier();
    }
    float r = red_buf[0];
    barrier();
    return r;
}

float wg_max(float v) {
    uint t = gl_LocalInvocationID.x;
    red_buf[t] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (t < s) red_buf[t] = max(red_buf[t], red_buf[t + s]);
        barrier();
    }
    float r = red_buf[0];
    barrier();
    return r;
}

#endif
#endif
