//! vkml-candle: models on vkml's GPU kernels, with what a chat front needs around them.
//!
//! Built so far (issue 5, first slice):
//! - [`llama`]: llama-family GGUF models (llama, mistral, smollm) on the GPU: quantized
//!   weights stay quantized on the device, f16 KV cache on the device, one command buffer
//!   and one host wait per step, the prompt in one batched pass.
//! - [`tokenizer`]: the tokenizer from GGUF metadata (`tokenizer.ggml.*`) through the
//!   `tokenizers` crate, and the chat template (`tokenizer.chat_template`) through
//!   minijinja.
//! - [`sampling`]: greedy, temperature, top-k, top-p, repeat penalty, seeded.
//!
//! Not yet: Candle's `BackendDevice`/`BackendStorage` on Vulkan and the tensor front over
//! them (issue 6); the model code here calls vkml-ops directly.

pub mod error;
pub mod llama;
pub mod sampling;
pub mod synth;
pub mod tokenizer;

pub use error::{Error, Result};
