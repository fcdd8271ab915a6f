// Common declarations for vkml compute shaders.
// Include with `#include "common.glsl"` after `#extension GL_GOOGLE_include_directive : require`
// and after the workgroup-size layout declaration (the helpers read gl_WorkGroupSize).
#ifndef VKML_COMMON_GLSL
#define VKML_COMMON_GLSL

// Element type of activation buffers: `float`, or `float16_t` in variants that define F16.
// Those shaders enable GL_EXT_shader_16bit_storage: 16-bit loads and stores converted
// with float(...) / ACT(...), all arithmetic in f32 (no shaderFloat16 needed).
#ifdef F16
#define ACT float16_t
#else
#define ACT float
#endif

// Flattened global invocation index for a 1-D launch that may use the y dimension
// to exceed maxComputeWorkGroupCount[0]: gl_NumWorkGroups.x * local size x per row.
uint vkml_global_index_1d() {
    return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}

#endif
