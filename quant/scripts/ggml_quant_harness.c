// Harness around ggml's reference quantizers (src/ggml-quants.c), used only by
// make_quant_fixtures.py to produce expected bytes. Not part of the crate.
//
// usage: harness TYPE_NAME ROW_LEN < floats.f32 > blocks.bin   (rows quantized one at a time)
#include "ggml.h"
#include "ggml-quants.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ggml_abort(const char * file, int line, const char * fmt, ...) { fprintf(stderr, "abort %s:%d\n", file, line); exit(2); }
const char * ggml_type_name(enum ggml_type t) { (void) t; return "?"; }

typedef void (*qfn)(const float *, void *, int64_t);
struct entry { const char * name; enum ggml_type t; qfn f; size_t blck, tsize; };
#define E(n, T, fn, B, S) { n, T, (qfn) fn, B, S }
static struct entry E_[] = {
    E("q4_0", GGML_TYPE_Q4_0, quantize_row_q4_0_ref, 32, 18),
    E("q4_1", GGML_TYPE_Q4_1, quantize_row_q4_1_ref, 32, 20),
    E("q5_0", GGML_TYPE_Q5_0, quantize_row_q5_0_ref, 32, 22),
    E("q5_1", GGML_TYPE_Q5_1, quantize_row_q5_1_ref, 32, 24),
    E("q8_0", GGML_TYPE_Q8_0, quantize_row_q8_0_ref, 32, 34),
    E("q8_1", GGML_TYPE_Q8_1, quantize_row_q8_1_ref, 32, 36),
    E("q2_k", GGML_TYPE_Q2_K, quantize_row_q2_K_ref, 256, 84),
    E("q3_k", GGML_TYPE_Q3_K, quantize_row_q3_K_ref, 256, 110),
    E("q4_k", GGML_TYPE_Q4_K, quantize_row_q4_K_ref, 256, 144),
    E("q5_k", GGML_TYPE_Q5_K, quantize_row_q5_K_ref, 256, 176),
    E("q6_k", GGML_TYPE_Q6_K, quantize_row_q6_K_ref, 256, 210),
    E("q8_k", GGML_TYPE_Q8_K, quantize_row_q8_K_ref, 256, 292),
    E("tq1_0", GGML_TYPE_TQ1_0, quantize_row_tq1_0_ref, 256, 54),
    E("tq2_0", GGML_TYPE_TQ2_0, quantize_row_tq2_0_ref, 256, 66),
    E("mxfp4", GGML_TYPE_MXFP4, quantize_row_mxfp4_ref, 32, 17),
    E("nvfp4", GGML_TYPE_NVFP4, quantize_row_nvfp4_ref, 64, 36),
    E("q1_0", GGML_TYPE_Q1_0, quantize_row_q1_0_ref, 128, 18),
    E("q2_0", GGML_TYPE_Q2_0, quantize_row_q2_0_ref, 64, 18),
    E("iq4_nl", GGML_TYPE_IQ4_NL, quantize_row_iq4_nl_ref, 32, 18),
    E("iq4_xs", GGML_TYPE_IQ4_XS, quantize_row_iq4_xs_ref, 256, 136),
};

size_t ggml_type_size(enum ggml_type t) {
    for (size_t i = 0; i < sizeof(E_)/sizeof(E_[0]); i++) if (E_[i].t == t) return E_[i].tsize;
    return 0;
}
size_t ggml_row_size(enum ggml_type t, int64_t ne) {
    for (size_t i = 0; i < sizeof(E_)/sizeof(E_[0]); i++) if (E_[i].t == t) return E_[i].tsize * (ne / E_[i].blck);
    return 0;
}

int main(int argc, char ** argv) {
    if (argc != 3) return 1;
    long row_len = atol(argv[2]);
    struct entry * e = NULL;
    for (size_t i = 0; i < sizeof(E_)/sizeof(E_[0]); i++) if (!strcmp(E_[i].name, argv[1])) e = &E_[i];
    if (!e) return 1;
    float * row = malloc(row_len * sizeof(float));
    size_t out_len = e->tsize * (row_len / e->blck);
    void * out = malloc(out_len);
    while (fread(row, sizeof(float), row_len, stdin) == (size_t) row_len) {
        memset(out, 0, out_len); // ggml leaves Q8_K bsums of all-zero blocks untouched
        e->f(row, out, row_len);
        fwrite(out, 1, out_len, stdout);
    }
    return 0;
}
