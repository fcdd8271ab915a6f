//! Where the real test models are: one definition, included by the test suites of
//! vkml-quant, vkml-candle and the cli (`#[path]` modules), so that the directory, the
//! environment variable and the message agree everywhere.

use std::path::PathBuf;

/// A real test model by file name, from `$VKML_TEST_MODELS` (default
/// `~/.cache/vkml/test-models`). Panics, naming the fetch script, when it is missing:
/// a missing model fails the test rather than skipping it.
pub fn test_model(name: &str) -> PathBuf {
    let dir = std::env::var_os("VKML_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vkml/test-models"));
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "test model {} is missing: run quant/scripts/fetch_test_models.sh (downloads ~331 MB into \
         $VKML_TEST_MODELS, default ~/.cache/vkml/test-models)",
        p.display()
    );
    p
}
