//! vkml-models: the model layer. GGUF architectures built from shared blocks, run by one
//! decode runner on any backend that implements the model ops.
//!
//! - [`storage`]: [`storage::ModelStorage`], the ops candle keeps outside `BackendStorage`
//!   (quantized products and embedding, rms_norm, rope, attention over an f16 KV cache),
//!   on Vulkan ([`storage::vulkan`]) and on candle's `CpuStorage` ([`storage::cpu`], the
//!   conformance oracle); [`tensor::ModelTensor`] puts them on the front's tensors.
//! - [`blocks`]: embedding, RMS norm, attention (split or fused QKV, biases, q/k norms,
//!   sliding windows, GQA), gated feed-forward, output head; [`rope`]: rope tables
//!   (linear, Llama 3 frequency factors, YaRN, Phi-3's LongRoPE); [`config`]: GGUF hyper-parameters.
//! - [`arch`]: one file per architecture (`llama`, `mistral`, `qwen2`, `qwen3`, `gemma2`,
//!   `gemma3`, `phi3`),
//!   and [`arch::load`], which picks one by `general.architecture`.
//! - [`device_map`]: which device each layer runs on (one, or a layer split over several).
//! - [`runner`]: [`runner::Runner`], the decode runner: chunked prompts, one submission and
//!   host wait per chunk, the next decode step recorded ahead on Vulkan.
//! - [`generator`]: [`generator::Generator`], the library API: load a GGUF model on a
//!   device, generate text or chat as a stream of text pieces, the KV cache kept between
//!   calls.
//! - [`tokenizer`], [`chat_template`], [`sampling`]: the tokenizer from GGUF metadata; the
//!   chat template, bounded; greedy, temperature, top-k, top-p, min-p, repeat penalty.
//! - [`synth`]: synthetic models of real shapes, for benchmarks and tests; [`fuzzing`]:
//!   the entry points the fuzz targets and their corpus-replay test share.

pub mod arch;
pub mod blocks;
pub mod chat_template;
pub mod config;
pub mod device_map;
pub mod error;
pub mod fuzzing;
pub mod generator;
pub mod harmony;
pub mod rope;
pub mod runner;
pub mod sampling;
pub mod storage;
pub mod synth;
pub mod tensor;
pub mod tokenizer;

pub use device_map::DeviceMap;
pub use error::{Error, Result};
pub use generator::{FinishReason, GenerateOptions, Generation, Generator};
pub use runner::{LoadOptions, Runner, StepProfile};
pub use storage::WeightFormat;

/// The README's Rust samples (the HAL and the library API), compiled as doctests here,
/// where every crate they use is a dependency.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
