//! Dequantization against gguf-py's reference (`gguf.quants.dequantize`, gguf 0.19.0).
//!
//! Fixtures are written by `quant/scripts/make_fixtures.py` (random block bytes with finite
//! scales in, gguf-py's floats out) into `quant/tests/fixtures/`.

use std::path::PathBuf;
use vkml_quant::{dequantize_to_vec, GgmlType};

struct Fixture {
    ty: GgmlType,
    blocks: Vec<u8>,
    expected: Vec<f32>,
}

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn load(name: &str) -> Fixture {
    let path = fixtures_dir().join(format!("{name}.bin"));
    let b =
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run quant/scripts/make_fixtures.py)", path.display()));
    assert_eq!(&b[..4], b"VKQF", "{name}: bad fixture magic");
    let ty = GgmlType::try_from(read_u32(&b, 4)).unwrap();
    let n_blocks = read_u32(&b, 8) as usize;
    let n_elems = read_u32(&b, 12) as usize;
    let nb = n_blocks * ty.type_size();
    assert_eq!(n_elems, n_blocks * ty.block_size());
    let blocks = b[16..16 + nb].to_vec();
    let expected: Vec<f32> = b[16 + nb..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(expected.len(), n_elems, "{name}: truncated fixture");
    Fixture { ty, blocks, expected }
}

/// Types gguf-py 0.19 can dequantize (the fixture script writes one file for each).
const TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ1_S,
    GgmlType::IQ4_NL,
    GgmlType::IQ3_S,
    GgmlType::IQ2_S,
    GgmlType::IQ4_XS,
    GgmlType::IQ1_M,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
];

#[test]
fn dequantize_matches_gguf_py() {
    let mut failures = Vec::new();
    for &ty in TYPES {
        let f = load(ty.name().to_ascii_lowercase().as_str());
        assert_eq!(f.ty, ty);
        let got = dequantize_to_vec(ty, &f.blocks).unwrap();
        assert_eq!(got.len(), f.expected.len());
        let mut bad = 0;
        let mut first = None;
        for (i, (g, e)) in got.iter().zip(&f.expected).enumerate() {
            if g.to_bits() != e.to_bits() && !(g.is_nan() && e.is_nan()) {
                bad += 1;
                first.get_or_insert((i, *g, *e));
            }
        }
        if bad > 0 {
            failures.push(format!("{ty}: {bad}/{} differ, first {:?}", got.len(), first.unwrap()));
        }
    }
    assert!(failures.is_empty(), "mismatches vs gguf-py:\n{}", failures.join("\n"));
}

#[test]
fn fixture_set_is_complete_and_small() {
    let mut total = 0;
    for &ty in TYPES {
        let p = fixtures_dir().join(format!("{}.bin", ty.name().to_ascii_lowercase()));
        total += std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).len();
    }
    assert!(total < 2 * 1024 * 1024, "fixtures are {total} bytes");
}

/// The integer dot products of the fixture blocks with quantized activations equal the float
/// dot product of gguf-py's dequantized values with the dequantized activations. This covers
/// the i-quants, whose blocks vkml-quant cannot produce itself.
#[test]
fn dot_products_match_gguf_py_values() {
    use vkml_quant::{quantize_q8_1, quantize_q8_k, vec_dot_q8_1, vec_dot_q8_k};
    let mut checked = 0;
    for &ty in TYPES {
        let f = load(ty.name().to_ascii_lowercase().as_str());
        let n = f.expected.len();
        let act: Vec<f32> = (0..n).map(|i| (((i * 37) % 101) as f32 - 50.0) * 0.02).collect();
        let (got, a_deq) = if n.is_multiple_of(32) {
            if let Ok(d) = vec_dot_q8_1(ty, &f.blocks, &quantize_q8_1(&act).unwrap()) {
                let y = quantize_q8_1(&act).unwrap();
                let bytes: Vec<u8> = y.iter().flat_map(|b| bytemuck::bytes_of(b).to_vec()).collect();
                (Some(d), dequantize_to_vec(GgmlType::Q8_1, &bytes).unwrap())
            } else if n.is_multiple_of(256) {
                let y = quantize_q8_k(&act).unwrap();
                let bytes: Vec<u8> = y.iter().flat_map(|b| bytemuck::bytes_of(b).to_vec()).collect();
                (vec_dot_q8_k(ty, &f.blocks, &y).ok(), dequantize_to_vec(GgmlType::Q8_K, &bytes).unwrap())
            } else {
                (None, vec![])
            }
        } else {
            (None, vec![])
        };
        let Some(got) = got else { continue };
        let want: f64 = f.expected.iter().zip(&a_deq).map(|(x, y)| *x as f64 * *y as f64).sum();
        let scale: f64 = f.expected.iter().zip(&a_deq).map(|(x, y)| (*x as f64 * *y as f64).abs()).sum();
        assert!(
            (got as f64 - want).abs() <= 1e-5 * scale + 1e-30,
            "{ty}: integer dot {got} vs gguf-py dequantized dot {want}"
        );
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} types checked");
}
