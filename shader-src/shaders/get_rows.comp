//! variant f32 QTYPE=0
//! variant f16 QTYPE=1
//! variant bf16 QTYPE=30
//! variant q4_0 QTYPE=2
//! variant q4_1 QTYPE=3
//! variant q5_0 QTYPE=6
//! variant q5_1 QTYPE=7
//! variant q8_0 QTYPE=8
//! variant q8_1 QTYPE=9
//! variant q2_k QTYPE=10
//! variant q3_k QTYPE=11
//! variant q4_k QTYPE=12
//! variant q5_k QTYPE=13
//! variant q6_k QTYPE=14
//! variant q8_k QTYPE=15
//! variant iq4_nl QTYPE=20
//! variant iq4_xs QTYPE=23
//! variant mxfp4 QTYPE=39
//! variant nvfp4 QTYPE=40
//! variant tq1_0 QTYPE=34
//! variant tq2_0 QTYPE=35
//! variant q1_0 QTYPE=41
//! variant q2_0 QTYPE=42
//! variant iq2_xxs QTYPE=16
//! variant iq2_xs QTYPE=17
//! variant iq2_s QTYPE=22
//! variant iq3_xxs QTYPE=18
//! variant iq3_s QTYPE=21
//! variant iq1_s QTYPE=19
//! variant iq1_m QTYPE=29
// The lookup in one binding: include/get_rows.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "get_rows.glsl"
