//! `vkml chat`: an interactive conversation with a GGUF model through its chat template.
//! The KV cache is kept between turns (each turn runs only its new tokens). Commands:
//! `/system TEXT`, `/reset`, `/help`, `/exit`; Ctrl-C stops a reply (at the prompt it ends
//! the program), end of input (Ctrl-D) ends it too.

use std::io::{BufRead as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use candle_core::backend::BackendDevice;
use vkml_models::chat_template::ChatMessage;
use vkml_models::storage::ModelStorage;
use vkml_models::{Error, FinishReason, GenerateOptions, Generator};

use crate::model_args::{self, ModelArgs, SamplingArgs};

/// Arguments of `vkml chat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The system message the conversation starts with (`/system TEXT` changes it).
    #[arg(long)]
    system: Option<String>,
    /// Print the tokens and speed of each reply.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    sampling: SamplingArgs,
}

const HELP: &str = "commands: /system TEXT (new conversation with this system message), /reset (new \
                    conversation), /exit; Ctrl-C stops a reply";

/// The conversation: the system message, then alternating user and assistant messages.
fn conversation(system: Option<&str>) -> Vec<ChatMessage> {
    system.map(|s| ChatMessage::new("system", s)).into_iter().collect()
}

/// Runs `vkml chat`.
pub fn run(a: Args) -> Result<(), String> {
    let opts = a.sampling.options();
    opts.sampling.validate().map_err(|e| e.to_string())?;
    let (path, file) = model_args::open_model(&a.model)?;
    let mut system = a.system.clone();
    let mut m = model_args::load(&a.model, &path, &file, |tok| {
        // A template that cannot render fails now, not at the first message.
        tok.render_chat(&[ChatMessage::new("user", "hi")], true).map(|_| ()).map_err(|e| e.to_string())
    })?;
    eprintln!(
        "{} on {} (context {} tokens, loaded in {:.2} s). {HELP}; end of input (Ctrl-D) ends the chat.",
        m.name,
        m.device,
        m.generator.context(),
        m.load_s
    );

    // Ctrl-C while a reply streams stops it; at the prompt it ends the program.
    let replying = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (replying, interrupted) = (replying.clone(), interrupted.clone());
        ctrlc::set_handler(move || {
            if replying.load(Ordering::SeqCst) {
                interrupted.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                std::process::exit(130);
            }
        })
        .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    }

    let mut messages = conversation(system.as_deref());
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut seed = opts.sampling.seed;
    loop {
        eprint!("> ");
        let Some(line) = lines.next() else {
            eprintln!();
            return Ok(());
        };
        let line = line.map_err(|e| format!("reading standard input: {e}"))?;
        let input = line.trim();
        match input.split_once(' ').map_or((input, ""), |(c, rest)| (c, rest.trim())) {
            ("", _) => continue,
            ("/exit" | "/quit", _) => return Ok(()),
            ("/help", _) => {
                eprintln!("{HELP}");
                continue;
            }
            ("/reset", _) => {
                messages = conversation(system.as_deref());
                m.generator.reset();
                eprintln!("(new conversation)");
                continue;
            }
            ("/system", text) => {
                system = (!text.is_empty()).then(|| text.to_string());
                messages = conversation(system.as_deref());
                m.generator.reset();
                eprintln!("(new conversation, system message {})", if text.is_empty() { "removed" } else { "set" });
                continue;
            }
            (c, _) if c.starts_with('/') && !c[1..].contains('/') => {
                eprintln!("unknown command {c}; {HELP}");
                continue;
            }
            _ => {}
        }
        messages.push(ChatMessage::new("user", input));
        let mut turn = opts.clone();
        turn.sampling.seed = seed;
        seed = seed.wrapping_add(1);
        interrupted.store(false, Ordering::SeqCst);
        replying.store(true, Ordering::SeqCst);
        let result = crate::with_generator!(&mut m.generator, g => reply(g, &messages, &turn, &interrupted, a.stats));
        replying.store(false, Ordering::SeqCst);
        match result {
            Ok(text) => messages.push(ChatMessage::new("assistant", text)),
            Err(Error::Context { tokens, ctx }) => {
                messages.pop();
                eprintln!(
                    "(the conversation with this message needs {tokens} tokens; the context holds {ctx}: /reset to \
                     start over, or a larger --ctx)"
                );
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Streams the reply to `messages` to standard output until it ends or `interrupted`;
/// returns its text (what was shown, when interrupted).
fn reply<S: ModelStorage>(
    g: &mut Generator<S>,
    messages: &[ChatMessage],
    opts: &GenerateOptions,
    interrupted: &AtomicBool,
    stats: bool,
) -> Result<String, Error>
where
    S::Device: BackendDevice<Storage = S>,
{
    let mut generation = g.chat(messages, opts)?;
    let mut text = String::new();
    let mut out = std::io::stdout().lock();
    let mut stopped = false;
    for piece in &mut generation {
        let piece = piece?;
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
        text.push_str(&piece);
        if interrupted.load(Ordering::SeqCst) {
            stopped = true;
            break;
        }
    }
    let _ = writeln!(out);
    drop(out);
    if stopped {
        eprintln!("(stopped)");
    } else if generation.finish_reason() == Some(FinishReason::Length) {
        eprintln!("(the reply reached --max-tokens or the end of the context)");
    }
    if stats {
        eprintln!(
            "({} prompt tokens, {} from the cache; {} tokens at {:.1} tokens/s)",
            generation.prompt_tokens(),
            generation.reused_tokens(),
            generation.generated(),
            generation.generated() as f64 / generation.generation_seconds()
        );
    }
    Ok(text)
}
