// Workgroup-wide sum and max of one float per invocation, through shared memory
// (portable: no subgroup feature needed). Include after the workgroup-size layout; the
// workgroup size must be a power of two no larger than REDUCE_MAX (default 1024).
// Every invocation of the workgroup must call these (they contain barriers).
#ifndef VKML_REDUCE_GLSL
#define VKML_REDUCE_GLSL
#ifndef REDUCE_MAX
#define REDUCE_MAX 1024
#endif
shared float red_buf[REDUCE_MAX];

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
