//! `vkml generate`: a GGUF language model on a Vulkan device, text streamed as it is
//! sampled, then load time and prompt / generation speed.

use std::io::Write as _;
use std::path::PathBuf;

use candle_core::backend::BackendDevice;
use vkml_models::storage::ModelStorage;
use vkml_models::{GenerateOptions, Generator};

use crate::model_args::{self, ModelArgs, SamplingArgs};

/// Arguments of `vkml generate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt.
    #[arg(long, short = 'p', required_unless_present = "file", conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from this file (`-`: standard input) instead of --prompt.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
    /// Wrap the prompt in the model's chat template (tokenizer.chat_template) as a
    /// user message, with the assistant's turn to follow.
    #[arg(long)]
    chat: bool,
    /// System message for --chat.
    #[arg(long)]
    system: Option<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// The prompt: `--prompt`, or the file `--file` names (`-`: standard input).
fn prompt_text(a: &Args) -> Result<String, String> {
    match (&a.prompt, &a.file) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| format!("--file -: reading standard input: {e}"))?;
            Ok(s)
        }
        (None, Some(f)) => {
            let meta = std::fs::metadata(f).map_err(|e| format!("--file {}: {e}", f.display()))?;
            if !meta.is_file() {
                return Err(format!("--file {}: not a regular file", f.display()));
            }
            std::fs::read_to_string(f).map_err(|e| format!("--file {}: {e}", f.display()))
        }
        (None, None) => Err("give --prompt TEXT or --file PATH".into()),
    }
}

/// Runs `vkml generate`.
pub fn run(a: Args) -> Result<(), String> {
    let text = prompt_text(&a)?;
    let opts = a.sampling.options();
    // Checked before anything is loaded.
    opts.sampling.validate().map_err(|e| e.to_string())?;
    let (path, file) = model_args::open_model(&a.model)?;
    // The prompt (and the file's chat template, which may fail) before any weight loads.
    let encode = |tok: &vkml_models::tokenizer::GgufTokenizer| -> Result<Vec<u32>, String> {
        let text = if a.chat {
            tok.apply_chat_template(a.system.as_deref(), &text).map_err(|e| e.to_string())?
        } else {
            text.clone()
        };
        tok.encode(&text, true).map_err(|e| e.to_string())
    };
    let mut prompt = Vec::new();
    let mut m = model_args::load(&a.model, &path, &file, |tok| {
        prompt = encode(tok)?;
        Ok(())
    })?;
    crate::with_generator!(&mut m.generator, g => stream(g, &prompt, &opts, &m.name, &m.device, m.load_s))
}

/// Generates from `prompt` on `g`, printing the text as it comes, then the timings line.
fn stream<S: ModelStorage>(
    g: &mut Generator<S>,
    prompt: &[u32],
    opts: &GenerateOptions,
    name: &str,
    device: &str,
    load_s: f64,
) -> Result<(), String>
where
    S::Device: BackendDevice<Storage = S>,
{
    let model_ctx = g.runner().hparams().context_length;
    let mut generation = g.generate_tokens(prompt, opts).map_err(|e| match e {
        vkml_models::Error::Context { ctx, .. } => format!(
            "the prompt has {} tokens; the context holds {ctx} (raise --ctx, up to the model's {model_ctx})",
            prompt.len()
        ),
        e => e.to_string(),
    })?;
    let mut out = std::io::stdout().lock();
    for piece in &mut generation {
        let _ = out.write_all(piece.map_err(|e| e.to_string())?.as_bytes());
        let _ = out.flush();
    }
    let _ = writeln!(out);
    drop(out);
    if let Some(stop) = generation.stopped_at_once() {
        let name = generation.tokenizer().token(stop).unwrap_or("?").to_string();
        eprintln!("(no text: the model's first token was its stop token {name:?})");
    }
    eprintln!(
        "\n{name} on {device}: load {load_s:.2} s; prompt {} tokens, {:.1} tokens/s; generation {} tokens, {:.1} tokens/s; seed {}",
        generation.prompt_tokens(),
        generation.prompt_tokens() as f64 / generation.prompt_seconds(),
        generation.generated(),
        generation.generated() as f64 / generation.generation_seconds(),
        opts.sampling.seed,
    );
    Ok(())
}
