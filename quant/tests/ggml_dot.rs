//! Dot products vs ggml itself: `quant/scripts/make_dot_fixtures.py` runs ggml's scalar
//! `ggml_vec_dot_*_generic` (src/ggml-cpu/quants.c, ggml-org/ggml d99724f2) on committed block
//! rows and stores one f32 per row. vkml-quant must give the same f32, bit for bit.
//!
//! Activations for row r are row r + 1 of `quant_input.bin`, quantized to Q8_1 / Q8_K by
//! vkml-quant (byte-identical to ggml's, see ggml_quantize.rs). For the types ggml pairs with
//! Q8_0, ggml was fed Q8_0 blocks, which carry the same `d` and `qs` as Q8_1.

use std::path::PathBuf;
use vkml_quant::{quantize_q8_1, quantize_q8_k, vec_dot_q8_1, vec_dot_q8_k, GgmlType};

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e} (run quant/scripts/make_dot_fixtures.py)", p.display()))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

const ROW: usize = 512;

fn check(ty: GgmlType) {
    let name = ty.name().to_ascii_lowercase();
    let inp = fixture("quant_input.bin");
    let n_rows = u32::from_le_bytes(inp[4..8].try_into().unwrap()) as usize;
    assert_eq!(u32::from_le_bytes(inp[8..12].try_into().unwrap()) as usize, ROW);
    let input = f32s(&inp[12..]);
    // x rows: ggml-quantized rows, or for i-quants the random blocks of the dequant fixture
    let x = if vkml_quant::quantize(ty, &[0.0; ROW]).is_ok() {
        fixture(&format!("quant_{name}.bin"))
    } else {
        let d = fixture(&format!("{name}.bin"));
        let n_blocks = u32::from_le_bytes(d[8..12].try_into().unwrap()) as usize;
        d[16..16 + n_blocks * ty.type_size()].to_vec()
    };
    let expected = f32s(&fixture(&format!("dot_{name}.bin")));
    let row_bytes = ty.row_size(ROW as u64).unwrap() as usize;
    assert_eq!(x.len() / row_bytes, expected.len(), "{ty}: row count");
    let mut bad = Vec::new();
    for (r, (xr, want)) in x.chunks(row_bytes).zip(&expected).enumerate() {
        let a = &input[((r + 1) % n_rows) * ROW..][..ROW];
        let got = match vec_dot_q8_1(ty, xr, &quantize_q8_1(a).unwrap()) {
            Ok(v) => v,
            Err(_) => vec_dot_q8_k(ty, xr, &quantize_q8_k(a).unwrap()).unwrap(),
        };
        if got.to_bits() != want.to_bits() && !(got.is_nan() && want.is_nan()) {
            bad.push(format!("row {r}: ours {got:e} ggml {want:e}"));
        }
    }
    assert!(bad.is_empty(), "{ty}: {} rows differ from ggml:\n{}", bad.len(), bad[..bad.len().min(5)].join("\n"));
}

macro_rules! same_as_ggml {
    ($($name:ident => $ty:ident),* $(,)?) => { $( #[test] fn $name() { check(GgmlType::$ty); } )* };
}

same_as_ggml! {
    q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0, mxfp4 => MXFP4,
    nvfp4 => NVFP4, q1_0 => Q1_0, q2_0 => Q2_0, iq4_nl => IQ4_NL,
    q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K, tq1_0 => TQ1_0,
    tq2_0 => TQ2_0, iq4_xs => IQ4_XS, iq2_xxs => IQ2_XXS, iq2_xs => IQ2_XS, iq2_s => IQ2_S,
    iq3_xxs => IQ3_XXS, iq3_s => IQ3_S, iq1_s => IQ1_S, iq1_m => IQ1_M,
}
