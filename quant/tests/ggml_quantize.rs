//! Quantized bytes vs ggml itself: `quant/scripts/make_quant_fixtures.py` compiles ggml's
//! `src/ggml-quants.c` (ggml-org/ggml d99724f2) and stores the bytes of its
//! `quantize_row_*_ref` for a fixed set of rows (random at several magnitudes, all-zero,
//! constant, one outlier, huge/tiny, rounding ties).

use std::path::PathBuf;
use vkml_quant::{quantize, GgmlType};

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e} (run quant/scripts/make_quant_fixtures.py)", p.display()))
}

fn input_rows() -> (usize, Vec<f32>) {
    let b = fixture("quant_input.bin");
    assert_eq!(&b[..4], b"VKQI");
    let n_rows = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    let row_len = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
    let data: Vec<f32> = b[12..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(data.len(), n_rows * row_len);
    (row_len, data)
}

fn check(ty: GgmlType) {
    let (row_len, data) = input_rows();
    let expected = fixture(&format!("quant_{}.bin", ty.name().to_ascii_lowercase()));
    let row_bytes = ty.row_size(row_len as u64).unwrap() as usize;
    assert_eq!(expected.len(), data.len() / row_len * row_bytes, "{ty}: fixture size");
    let ts = ty.type_size();
    let mut diffs = Vec::new();
    for (r, (row, exp)) in data.chunks(row_len).zip(expected.chunks(row_bytes)).enumerate() {
        let got = quantize(ty, row).unwrap();
        for (b, (g, e)) in got.chunks(ts).zip(exp.chunks(ts)).enumerate() {
            // IQ4_NL: for an all-zero block ggml packs its uninitialized scratch buffer next to
            // a zero scale; only the scale is defined there.
            let undefined_quants = ty == GgmlType::IQ4_NL && e[..2] == [0, 0];
            let same = if undefined_quants { g[..2] == e[..2] } else { g == e };
            if !same {
                diffs.push(format!("row {r} block {b}:\n  ours {g:02x?}\n  ggml {e:02x?}"));
            }
        }
    }
    assert!(
        diffs.is_empty(),
        "{ty}: {} blocks differ from ggml, e.g.\n{}",
        diffs.len(),
        diffs[..diffs.len().min(3)].join("\n")
    );
}

macro_rules! same_as_ggml {
    ($($name:ident => $ty:ident),* $(,)?) => { $( #[test] fn $name() { check(GgmlType::$ty); } )* };
}

same_as_ggml! {
    q4_0 => Q4_0, q4_1 => Q4_1, q5_0 => Q5_0, q5_1 => Q5_1, q8_0 => Q8_0, q8_1 => Q8_1,
    q2_k => Q2_K, q3_k => Q3_K, q4_k => Q4_K, q5_k => Q5_K, q6_k => Q6_K, q8_k => Q8_K,
    tq1_0 => TQ1_0, tq2_0 => TQ2_0, mxfp4 => MXFP4, nvfp4 => NVFP4, q1_0 => Q1_0, q2_0 => Q2_0,
    iq4_nl => IQ4_NL, iq4_xs => IQ4_XS,
}
