//! `vkml`: Vulkan compute for Rust machine learning, from the command line.
//!
//! - `vkml info [--json]`: every Vulkan device with its capabilities.
//! - `vkml generate [--model FILE] --prompt TEXT [--chat] ...`: text from a GGUF model.
//! - `vkml bench (-m FILE | --synthetic NAME[:TYPE]) [-p 512] [-n 128] [-r 5] [-o md|json]`:
//!   prompt and generation speed, llama-bench style; `vkml bench ops`: per-kernel figures.
//! - `vkml gguf inspect FILE`: a GGUF file's metadata and tensor table.
//! - `vkml gguf synth --shape NAME [--type Q4_0] -o FILE`: a synthetic model as a GGUF file.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod fetch;
mod generate;
mod gguf_quantize;
mod info;
mod model_args;
mod serve;
mod synth;

#[derive(Parser, Debug)]
#[command(
    name = "vkml",
    version,
    about = "Vulkan compute for Rust machine learning",
    after_help = "Exit status: 0 on success; 1 on an error, printed as one line starting `error: ` \
                  (a bad model file, device or argument value); 2 on a usage error (unknown flag, missing \
                  argument, a value clap refuses)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List every Vulkan device with its capabilities (cooperative-matrix shapes,
    /// integer dot product, subgroups, limits, memory).
    Info {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Generate text with a GGUF language model (llama family) on the best Vulkan
    /// device (or --device), streaming it as it is sampled.
    Generate(generate::Args),
    /// Chat with a GGUF model through its chat template: multi-turn, the KV cache kept
    /// between turns; /system TEXT, /reset, /exit; Ctrl-C stops a reply.
    Chat(chat::Args),
    /// Serve a GGUF model over OpenAI's HTTP API (/v1/chat/completions, /v1/completions,
    /// /v1/models, /health) on 127.0.0.1:8080 (--host, --port).
    Serve(serve::Args),
    /// Measure a model's prompt and generation speed (llama-bench's pp/tg tests) on a GGUF
    /// file or a synthetic model, or per-kernel figures with `vkml bench ops`.
    Bench(bench::Args),
    /// GGUF model files.
    Gguf {
        #[command(subcommand)]
        command: GgufCommand,
    },
}

#[derive(Subcommand, Debug)]
enum GgufCommand {
    /// Print a GGUF file's metadata and tensor table (name, type, shape, bytes).
    Inspect {
        /// The .gguf file.
        file: std::path::PathBuf,
    },
    /// Write a synthetic model (a named shape, random weights of one type, a synthetic
    /// tokenizer) as a GGUF file: the model the benchmarks run, for other engines.
    Synth(synth::Args),
    /// Requantize an F32 / F16 / BF16 / Q8_0 GGUF to Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0, the
    /// matrices quantized on the GPU (llama-quantize's job and its choice of types).
    Quantize(gguf_quantize::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("VKML_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { json } => info::run(json),
        Command::Generate(args) => generate::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Gguf { command: GgufCommand::Inspect { file } } => vkml_quant::gguf::GgufFile::open(&file)
            .map(|f| print!("{}", vkml_quant::gguf::inspect::render(&f)))
            .map_err(|e| e.to_string()),
        Command::Gguf { command: GgufCommand::Synth(args) } => synth::run(args),
        Command::Gguf { command: GgufCommand::Quantize(args) } => gguf_quantize::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
