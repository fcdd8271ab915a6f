// Harness around ggml's scalar dot products (`ggml_vec_dot_*_generic` in
// src/ggml-cpu/quants.c), used only by make_dot_fixtures.py. Not part of the crate.
//
// usage: harness TYPE_NAME ROW_LEN X_FILE ACT_FILE > dots.f32
//   X_FILE: rows of TYPE blocks; ACT_FILE: f32 rows (ROW_LEN each). For every row r the
//   activations are quantized with ggml's quantize_row_{q8_0,q8_1,q8_K}_ref (the type's
//   vec_dot_type) and one f32 dot product is written.
#include "ggml.h"
#include "ggml-impl.h"
#include "ggml-quants.h"
#include "ggml-cpu/arch-fallback.h"
#include "ggml-cpu/quants.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float ggml_table_f32_f16[1 << 16];
void ggml_abort(const char * file, int line, const char * fmt, ...) { fprintf(stderr, "abort %s:%d\n", file, line); exit(2); }
const char * ggml_type_name(enum ggml_type t) { (void) t; return "?"; }
size_t ggml_type_size(enum ggml_type t) { (void) t; return 0; }
size_t ggml_row_size(enum ggml_type t, int64_t ne) { (void) t; (void) ne; return 0; }

typedef void (*dotfn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef void (*qfn)(const float *, void *, int64_t);
enum act { Q8_0, Q8_1, Q8_K };
struct entry { const char * name; dotfn f; enum act a; size_t blck, tsize; };
static struct entry E_[] = {
    { "q4_0", ggml_vec_dot_q4_0_q8_0_generic, Q8_0, 32, 18 },
    { "q4_1", ggml_vec_dot_q4_1_q8_1_generic, Q8_1, 32, 20 },
    { "q5_0", ggml_vec_dot_q5_0_q8_0_generic, Q8_0, 32, 22 },
    { "q5_1", ggml_vec_dot_q5_1_q8_1_generic, Q8_1, 32, 24 },
    { "q8_0", ggml_vec_dot_q8_0_q8_0_generic, Q8_0, 32, 34 },
    { "mxfp4", ggml_vec_dot_mxfp4_q8_0_generic, Q8_0, 32, 17 },
    { "nvfp4", ggml_vec_dot_nvfp4_q8_0_generic, Q8_0, 64, 36 },
    { "q1_0", ggml_vec_dot_q1_0_q8_0_generic, Q8_0, 128, 18 },
    { "q2_0", ggml_vec_dot_q2_0_q8_0_generic, Q8_0, 64, 18 },
    { "iq4_nl", ggml_vec_dot_iq4_nl_q8_0_generic, Q8_0, 32, 18 },
    { "q2_k", ggml_vec_dot_q2_K_q8_K_generic, Q8_K, 256, 84 },
    { "q3_k", ggml_vec_dot_q3_K_q8_K_generic, Q8_K, 256, 110 },
    { "q4_k", ggml_vec_dot_q4_K_q8_K_generic, Q8_K, 256, 144 },
    { "q5_k", ggml_vec_dot_q5_K_q8_K_generic, Q8_K, 256, 176 },
    { "q6_k", ggml_vec_dot_q6_K_q8_K_generic, Q8_K, 256, 210 },
    { "tq1_0", ggml_vec_dot_tq1_0_q8_K_generic, Q8_K, 256, 54 },
    { "tq2_0", ggml_vec_dot_tq2_0_q8_K_generic, Q8_K, 256, 66 },
    { "iq2_xxs", ggml_vec_dot_iq2_xxs_q8_K_generic, Q8_K, 256, 66 },
    { "iq2_xs", ggml_vec_dot_iq2_xs_q8_K_generic, Q8_K, 256, 74 },
    { "iq2_s", ggml_vec_dot_iq2_s_q8_K_generic, Q8_K, 256, 82 },
    { "iq3_xxs", ggml_vec_dot_iq3_xxs_q8_K_generic, Q8_K, 256, 98 },
    { "iq3_s", ggml_vec_dot_iq3_s_q8_K_generic, Q8_K, 256, 110 },
    { "iq1_s", ggml_vec_dot_iq1_s_q8_K_generic, Q8_K, 256, 50 },
    { "iq1_m", ggml_vec_dot_iq1_m_q8_K_generic, Q8_K, 256, 56 },
    { "iq4_xs", ggml_vec_dot_iq4_xs_q8_K_generic, Q8_K, 256, 136 },
};

static void * slurp(const char * path, size_t * len) {
    FILE * f = fopen(path, "rb");
    if (!f) exit(3);
    fseek(f, 0, SEEK_END); *len = ftell(f); fseek(f, 0, SEEK_SET);
    void * p = malloc(*len);
    if (fread(p, 1, *len, f) != *len) exit(3);
    fclose(f);
    return p;
}

int main(int argc, char ** argv) {
    if (argc != 5) return 1;
    for (int i = 0; i < (1 << 16); i++) ggml_table_f32_f16[i] = GGML_COMPUTE_FP16_TO_FP32((ggml_fp16_t) i);
    long row_len = atol(argv[2]);
    struct entry * e = NULL;
    for (size_t i = 0; i < sizeof(E_)/sizeof(E_[0]); i++) if (!strcmp(E_[i].name, argv[1])) e = &E_[i];
    if (!e) return 1;
    size_t xl, al;
    unsigned char * x = slurp(argv[3], &xl);
    float * act = slurp(argv[4], &al);
    size_t row_bytes = e->tsize * (row_len / e->blck);
    size_t n_rows = xl / row_bytes;
    if (al / sizeof(float) / row_len < n_rows) return 4;
    void * y = malloc(row_len * 2 * sizeof(float));
    for (size_t r = 0; r < n_rows; r++) {
        const float * a = act + r * row_len;
        memset(y, 0, row_len * 2 * sizeof(float));
        if (e->a == Q8_0) quantize_row_q8_0_ref(a, y, row_len);
        else if (e->a == Q8_1) quantize_row_q8_1_ref(a, y, row_len);
        else quantize_row_q8_K_ref(a, y, row_len);
        float s = 0;
        e->f((int) row_len, &s, 0, x + r * row_bytes, 0, y, 0, 1);
        fwrite(&s, sizeof(float), 1, stdout);
    }
    return 0;
}
