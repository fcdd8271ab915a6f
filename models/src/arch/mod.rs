//! One file per GGUF architecture (`general.architecture`): its hyper-parameters from its
//! `{arch}.*` keys and its wiring of [`crate::blocks`], as llama.cpp's loader
//! (`src/llama-model.cpp`) and graphs (`src/models/*.cpp`) define them. [`load`] picks the
//! file by the architecture's name.
//!
//! Adding an architecture: a file here that either gives the pre-norm decoder's
//! [`llama::DecoderOptions`] (as `qwen2`, `qwen3`, `phi3` do) or has a `load` function that
//! reads its keys, validates them, loads its blocks and returns a [`Model`] (as the Gemma
//! files do); a line in [`load`] and in
//! [`ARCHITECTURES`]; a synthetic shape in [`crate::synth`]; a test against an independent
//! reference.

pub mod gemma2;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
pub mod phi3;
pub mod qwen2;
pub mod qwen2moe;
pub mod qwen3;
pub mod qwen3moe;

use candle_core::backend::BackendDevice;
use vkml_candle::front::Tensor;
use vkml_quant::gguf::GgufFile;

use self::llama::Decoder;
use crate::config::{Hparams, Meta};
use crate::device_map::DeviceMap;
use crate::error::{model_err, Result};
use crate::storage::ModelStorage;

/// The sizes a model is loaded for, and the form of its weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Positions of the context: KV caches of global layers and rope tables.
    pub ctx: usize,
    /// Most tokens one forward call runs: a sliding-window layer's KV cache is a ring of
    /// `window + max_batch - 1` slots (when that is less than `ctx`).
    pub max_batch: usize,
    /// How weight matrices are kept where the backend offers a choice.
    pub weights: crate::storage::WeightFormat,
}

/// The architectures [`load`] runs (`general.architecture` values).
pub const ARCHITECTURES: &[&str] =
    &["llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gpt-oss", "gemma2", "gemma3", "phi3"];

/// A loaded decoder: its blocks, weights and KV caches. The runner
/// ([`crate::runner::Runner`]) drives it one chunk of tokens at a time.
pub trait Model<S: ModelStorage>: std::fmt::Debug {
    /// The shared hyper-parameters.
    fn hparams(&self) -> &Hparams;

    /// Runs `ids: u32[t]` (on the first device) at positions `pos..pos + t` through every
    /// layer, appending their keys and values to the caches; returns the hidden states
    /// `f32[t, n_embd]` before the output head, on the last device. On a deferred device
    /// this records the work.
    ///
    /// # Errors
    /// Positions past the cache; device errors.
    fn forward(&mut self, ids: &Tensor<S>, pos: usize) -> Result<Tensor<S>>;

    /// The logits `f32[t, vocab]` of hidden states `x: f32[t, n_embd]`.
    ///
    /// # Errors
    /// Device errors.
    fn logits(&self, x: &Tensor<S>) -> Result<Tensor<S>>;

    /// Slots of the smallest KV cache that is a ring shorter than the context (a
    /// sliding-window layer's, see [`Sizes::max_batch`]); `None` when every cache holds
    /// the whole context. The runner needs it to know how far back the cache can be cut
    /// ([`crate::runner::Runner::truncate`]).
    fn kv_ring(&self) -> Option<usize> {
        None
    }
}

/// Loads the model of `file` onto the devices of `devs` (each layer on its device, the
/// embedding on the first, the output head on the last) for `sizes` (KV caches, rope
/// tables), calling `progress(done, total)` in bytes of weights uploaded.
///
/// # Errors
/// [`crate::Error::Model`] for an architecture not in [`ARCHITECTURES`] (naming it and
/// the supported ones), invalid or inconsistent hyper-parameters (naming the key),
/// missing or misshapen tensors, per-tensor weight scales (`blk.N.attn_q.scale` and the
/// like, which vkml does not apply); the backend's errors for types without kernels and
/// device errors.
pub fn load<S: ModelStorage>(
    devs: &DeviceMap<S>,
    file: &GgufFile,
    sizes: Sizes,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Box<dyn Model<S>>>
where
    S::Device: BackendDevice<Storage = S>,
{
    let m = Meta::new(file)?;
    refuse_weight_scales(file)?;
    Ok(match m.arch {
        "llama" | "mistral" => Box::new(Decoder::load(&m, devs, sizes, progress, llama::OPTIONS)?),
        "qwen2" => Box::new(Decoder::load(&m, devs, sizes, progress, qwen2::OPTIONS)?),
        "qwen3" => Box::new(Decoder::load(&m, devs, sizes, progress, qwen3::OPTIONS)?),
        "qwen2moe" => Box::new(Decoder::load(&m, devs, sizes, progress, qwen2moe::OPTIONS)?),
        "qwen3moe" => Box::new(Decoder::load(&m, devs, sizes, progress, qwen3moe::OPTIONS)?),
        "gpt-oss" => Box::new(Decoder::load(&m, devs, sizes, progress, gpt_oss::OPTIONS)?),
        "gemma2" => Box::new(gemma2::load(&m, devs, sizes, progress)?),
        "gemma3" => Box::new(gemma3::load(&m, devs, sizes, progress)?),
        "phi3" => Box::new(Decoder::load(&m, devs, sizes, progress, phi3::options(&m))?),
        _ => return Err(unsupported(&m)),
    })
}

/// The projections whose optional per-tensor (or per-expert) output scale llama.cpp loads
/// for every architecture, as `blk.N.<name>.scale` (`llama-model.cpp`'s generic pass after
/// the per-model tensors; NVFP4 files carry them as their second-level scales).
const SCALED_PROJECTIONS: &[&str] = &[
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "attn_qkv",
    "attn_gate",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "ffn_gate_shexp",
    "ffn_up_shexp",
    "ffn_down_shexp",
    "ffn_gate_exps",
    "ffn_up_exps",
    "ffn_down_exps",
];

/// Refuses a file with weight scales ([`SCALED_PROJECTIONS`]): llama.cpp multiplies each
/// such product by its scale, which vkml does not, so loading it would give wrong logits.
fn refuse_weight_scales(file: &GgufFile) -> Result<()> {
    let scaled = file.header().tensors.iter().find(|t| {
        t.name.strip_prefix("blk.").and_then(|r| r.split_once('.')).is_some_and(|(layer, rest)| {
            layer.parse::<u32>().is_ok() && rest.strip_suffix(".scale").is_some_and(|p| SCALED_PROJECTIONS.contains(&p))
        })
    });
    match scaled {
        Some(t) => Err(model_err(format!(
            "tensor {}: per-tensor weight scales (multiplied into the projection's output by llama.cpp, as \
             NVFP4 files carry them) are not supported",
            t.name
        ))),
        None => Ok(()),
    }
}

/// The error for an architecture not in [`ARCHITECTURES`], naming it and the supported
/// ones.
fn unsupported(m: &Meta<'_>) -> crate::Error {
    model_err(format!("architecture {:?} is not supported (supported: {})", m.arch, ARCHITECTURES.join(", ")))
}

/// The hyper-parameters of `file` as [`load`] would read them, without loading weights.
///
/// # Errors
/// An unsupported architecture, as [`load`]; then as [`Hparams::from_meta`].
pub fn hparams(file: &GgufFile) -> Result<Hparams> {
    let m = Meta::new(file)?;
    if !ARCHITECTURES.contains(&m.arch) {
        return Err(unsupported(&m));
    }
    Hparams::from_meta(&m)
}

#[cfg(test)]
mod tests {
    use vkml_quant::gguf::{GgufFile, GgufValue, GgufWriter};
    use vkml_quant::GgmlType;

    fn file(tensors: &[&str]) -> GgufFile {
        let mut w = GgufWriter::new();
        w.push_kv("general.architecture", GgufValue::String("qwen3moe".into()));
        for name in tensors {
            w.push_tensor(*name, GgmlType::F32, vec![1], vec![0; 4]);
        }
        GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()
    }

    /// llama.cpp multiplies a projection by its `blk.N.<name>.scale` (NVFP4 files); vkml
    /// refuses such a file by name instead of computing without the scale.
    #[test]
    fn weight_scales_are_refused_by_name() {
        for name in ["blk.3.attn_q.scale", "blk.0.ffn_down_exps.scale", "blk.12.ffn_up_shexp.scale"] {
            let e = super::refuse_weight_scales(&file(&["blk.0.attn_norm.weight", name])).unwrap_err().to_string();
            assert!(e.contains(&format!("tensor {name}: per-tensor weight scales")), "{e}");
        }
        // Other tensors named .scale, or no layer number, are not weight scales.
        super::refuse_weight_scales(&file(&["blk.0.attn_norm.weight", "blk.0.ssm_norm.scale", "blk.x.attn_q.scale"]))
            .unwrap();
    }
}
