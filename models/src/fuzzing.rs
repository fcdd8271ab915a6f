//! Entry points for fuzzing what reads a model file after the GGUF reader: the
//! hyper-parameters, the tokenizer, the chat template, and a whole model load. The
//! cargo-fuzz targets in `fuzz/fuzz_targets/` call these, and so does
//! `models/tests/fuzz_replay.rs`, which replays every kept corpus file and crash input in
//! the ordinary test run (no nightly toolchain needed).
//!
//! Each function takes arbitrary bytes and must return without panicking, aborting,
//! hanging or allocating past the bounds the loaders enforce: errors are the expected
//! outcome for almost every input.

use std::sync::OnceLock;

use candle_core::cpu_backend::CpuDevice;
use candle_core::CpuStorage;
use vkml_quant::gguf::GgufFile;

use crate::arch;
use crate::config::{Hparams, Meta};
use crate::rope::RopeConfig;
use crate::runner::{LoadOptions, Runner};
use crate::storage::WeightFormat;
use crate::tokenizer::GgufTokenizer;

/// Largest tensor data (in bytes) [`model_load`] loads: the CPU backend dequantizes every
/// matrix to f32, and a fuzz input may declare large ones.
pub const MAX_LOAD_BYTES: u64 = 4 << 20;

/// `data` as a GGUF file, then every architecture's hyper-parameters and rope tables of a
/// few positions.
pub fn config(data: &[u8]) {
    let Ok(f) = GgufFile::from_vec(data.to_vec()) else { return };
    let Ok(m) = Meta::new(&f) else { return };
    let _ = arch::hparams(&f);
    let Ok(hp) = Hparams::from_meta(&m) else { return };
    let _ = arch::gemma3::config(&m, &hp);
    let _ = arch::gemma2::config(&m, &hp);
    for style in [vkml_ops::nn::RopeStyle::Neox, vkml_ops::nn::RopeStyle::Interleaved] {
        if let Ok(r) = RopeConfig::from_meta(&m, hp.head_dim, style) {
            let _ = r.tables(8);
        }
    }
}

/// `data` as a GGUF file, then its tokenizer: encode and decode a text with special
/// tokens, bytes outside ASCII and digits; render the chat template.
pub fn tokenizer(data: &[u8]) {
    let Ok(f) = GgufFile::from_vec(data.to_vec()) else { return };
    let Ok(tok) = GgufTokenizer::from_gguf(&f) else { return };
    if let Ok(ids) = tok.encode("Hello, wörld! 12345 <s></s> <start_of_turn>\n\t", true) {
        let _ = tok.decode(&ids);
    }
    let _ = tok.apply_chat_template(Some("Be brief."), "Hi");
}

/// A small synthetic model's tokenizer (SentencePiece, 400 pieces), made once.
fn base_tokenizer() -> Option<&'static GgufTokenizer> {
    static TOK: OnceLock<Option<GgufTokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let sh = crate::synth::SynthShape { n_layers: 1, vocab: 400, ..crate::synth::SHAPES[0] };
        let f = crate::synth::synthetic_model("llama", &sh, vkml_quant::GgmlType::F32, 1).ok()?;
        GgufTokenizer::from_gguf(&f).ok()
    })
    .as_ref()
}

/// `data` (UTF-8) as a chat template, rendered for a system and a user message.
pub fn template(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Some(base) = base_tokenizer() else { return };
    let mut tok = base.clone();
    tok.chat_template = Some(text.to_string());
    let _ = tok.apply_chat_template(Some("Be brief."), "Hi");
}

/// `data` as a GGUF file loaded as a model on candle's CPU backend (16 positions, chunks
/// of 4), weights dequantized and then kept in their blocks, then a prompt of three
/// tokens and one decode step; files with more than
/// [`MAX_LOAD_BYTES`] of tensor data are skipped.
pub fn model_load(data: &[u8]) {
    let Ok(f) = GgufFile::from_vec(data.to_vec()) else { return };
    let bytes = f.tensors().iter().try_fold(0u64, |a, t| a.checked_add(t.n_bytes));
    if bytes.is_none_or(|b| b > MAX_LOAD_BYTES) {
        return;
    }
    for weights in [WeightFormat::Dequantized, WeightFormat::Blocks] {
        let opts = LoadOptions { ctx: Some(16), max_batch: 4, weights, micro_batch: None };
        let Ok(mut m) = Runner::<CpuStorage>::load(&CpuDevice, &f, opts, &mut |_, _| {}) else { return };
        let vocab = m.hparams().vocab as u32;
        let ids: Vec<u32> = (0..3u32).map(|i| i % vocab.max(1)).collect();
        if m.forward(&ids, false).is_ok() {
            let _ = m.forward(&[0], false);
        }
    }
}
