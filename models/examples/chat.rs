//! Chat with a GGUF model through the library API: [`vkml_models::Generator`] loads the
//! model and tokenizer on a Vulkan device, and each turn streams its reply; the second
//! turn runs only its new tokens (the first turn's stay in the KV cache).
//!
//! `cargo run --release -p vkml-models --example chat -- MODEL.gguf` (default: the
//! SmolLM2-135M-Instruct test model in `$VKML_TEST_MODELS` or
//! `~/.cache/vkml/test-models`; `quant/scripts/fetch_test_models.sh` fetches it).

use std::io::Write as _;

use candle_core::backend::BackendDevice;
use vkml_candle::vulkan::VulkanDevice;
use vkml_models::chat_template::ChatMessage;
use vkml_models::{GenerateOptions, Generator, LoadOptions};
use vkml_quant::gguf::GgufFile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("VKML_TEST_MODELS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vkml/test-models")
            })
            .join("SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    let dev = VulkanDevice::new(0)?;
    let file = GgufFile::open(&path)?;
    let mut g: Generator = Generator::from_gguf(&dev, &file, LoadOptions { ctx: Some(1024), ..Default::default() })?;
    let opts = GenerateOptions { max_tokens: 32, ..Default::default() }; // greedy
    let mut messages = Vec::new();
    for question in ["What is the capital of France?", "And of Germany?"] {
        println!("> {question}");
        messages.push(ChatMessage::new("user", question));
        let mut reply = g.chat(&messages, &opts)?;
        let mut text = String::new();
        for piece in &mut reply {
            let piece = piece?;
            print!("{piece}");
            std::io::stdout().flush()?;
            text.push_str(&piece);
        }
        println!(
            "\n({} prompt tokens, {} of them from the cache; {} generated, {:?})",
            reply.prompt_tokens(),
            reply.reused_tokens(),
            reply.generated(),
            reply.finish_reason()
        );
        messages.push(ChatMessage::new("assistant", text));
    }
    Ok(())
}
