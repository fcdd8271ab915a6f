//! variants-of get_rows.comp
// The lookup over a table in up to four bindings (include/get_rows.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define QW_PARTS 3
#include "get_rows.glsl"
