//! vkml-candle: Candle's backend traits on Vulkan, a tensor front over them, and models
//! with what a chat front needs around them.
//!
//! - [`vulkan`]: `VulkanDevice: BackendDevice`, `VulkanStorage: BackendStorage`
//!   (candle-core 0.11), deferred execution on one stream per device. Issue 5's slice of
//!   the methods; the rest return errors naming them (issue 6).
//! - [`front`]: [`front::Tensor`], candle's tensor methods over any `BackendStorage`, and
//!   [`front::ModelStorage`], the model ops candle keeps outside the trait; [`cpu`]
//!   implements them on candle's `CpuStorage`.
//! - [`llama`]: the llama family on the front, generic over the storage: on Vulkan it
//!   is what `vkml generate` runs (quantized weights stay quantized on the device, f16
//!   KV cache, one command buffer and one host wait per step, the prompt in one batched
//!   pass, the next decode step recorded ahead); on the CPU it is the conformance oracle
//!   of the Vulkan run.
//! - [`tokenizer`]: the tokenizer from GGUF metadata (`tokenizer.ggml.*`) through the
//!   `tokenizers` crate, and the chat template (`tokenizer.chat_template`) through
//!   minijinja.
//! - [`sampling`]: greedy, temperature, top-k, top-p, repeat penalty, seeded.
//! - [`synth`]: synthetic models of named shapes, for benchmarks and tests.

pub mod cpu;
pub mod error;
pub mod front;
pub mod llama;
pub mod sampling;
pub mod synth;
pub mod tokenizer;
pub mod vulkan;

pub use error::{Error, Result};
