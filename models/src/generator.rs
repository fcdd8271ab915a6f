//! The library API for running a GGUF model: [`Generator`] loads the model and its
//! tokenizer on a device and generates text from a prompt or a conversation, as a
//! stream of text pieces ([`Generation`]). `vkml generate`, `vkml chat` and `vkml serve`
//! are built on it.
//!
//! The KV cache is kept between calls: a prompt that starts with tokens the cache
//! already holds (the conversation so far, in a chat) runs only the tokens after them.
//!
//! ```no_run
//! # fn main() -> vkml_models::Result<()> {
//! use candle_core::backend::BackendDevice;
//! use vkml_candle::vulkan::VulkanDevice;
//! use vkml_models::chat_template::ChatMessage;
//! use vkml_models::generator::{GenerateOptions, Generator};
//!
//! let dev = VulkanDevice::new(0)?; // as `vkml info` numbers devices
//! let file = vkml_quant::gguf::GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let mut g: Generator = Generator::from_gguf(&dev, &file, Default::default())?;
//! let opts = GenerateOptions { max_tokens: 32, ..Default::default() };
//! let mut reply = g.chat(&[ChatMessage::new("user", "What is the capital of France?")], &opts)?;
//! for piece in &mut reply {
//!     print!("{}", piece?);
//! }
//! println!("\n({:?} after {} tokens)", reply.finish_reason(), reply.generated());
//! # Ok(())
//! # }
//! ```

use std::time::Instant;

use candle_core::backend::BackendDevice;
use vkml_candle::vulkan::VulkanStorage;
use vkml_quant::gguf::GgufFile;

use crate::chat_template::ChatMessage;
use crate::error::{Error, Result};
use crate::runner::{LoadOptions, Runner};
use crate::sampling::{Sampler, SamplingConfig, TokenChoice};
use crate::storage::ModelStorage;
use crate::tokenizer::{GgufTokenizer, TokenStream};

/// How to generate: how many tokens at most, how to sample, where to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens to generate (also bounded by the context left).
    pub max_tokens: usize,
    /// Temperature, top-k, top-p, min-p, repeat penalty, seed.
    pub sampling: SamplingConfig,
    /// Texts that end the generation where they appear; the text returned stops before
    /// the first of them (OpenAI's `stop`). At most [`MAX_STOP_TEXTS`] of at most
    /// [`MAX_STOP_BYTES`] bytes each: each piece is checked against every prefix of every
    /// stop text, so their lengths bound the work per token.
    pub stop: Vec<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_tokens: 256, sampling: SamplingConfig::default(), stop: Vec::new() }
    }
}

/// Most stop texts one generation takes ([`GenerateOptions::stop`]).
pub const MAX_STOP_TEXTS: usize = 16;

/// Longest stop text, in bytes ([`GenerateOptions::stop`]).
pub const MAX_STOP_BYTES: usize = 256;

/// Why a generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model's stop token, or a stop text of [`GenerateOptions::stop`].
    Stop,
    /// `max_tokens`, or the end of the context.
    Length,
}

impl FinishReason {
    /// `"stop"` or `"length"`, as OpenAI's API spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// A GGUF model on a device with its tokenizer, and the tokens its KV cache holds.
pub struct Generator<S: ModelStorage = VulkanStorage> {
    runner: Runner<S>,
    tokenizer: GgufTokenizer,
    /// The tokens at the cache's positions `0..runner.position()`, in order.
    cached: Vec<u32>,
}

impl<S: ModelStorage> std::fmt::Debug for Generator<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Generator({:?}, {} tokens cached)", self.runner, self.cached.len())
    }
}

impl<S: ModelStorage> Generator<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Loads the model and tokenizer of `file` onto `dev` ([`Runner::load`],
    /// [`GgufTokenizer::from_gguf`]).
    ///
    /// # Errors
    /// As [`Runner::load`] and [`GgufTokenizer::from_gguf`].
    pub fn from_gguf(dev: &S::Device, file: &GgufFile, opts: LoadOptions) -> Result<Self> {
        Self::from_gguf_with_progress(dev, file, opts, &mut |_, _| {})
    }

    /// As [`Generator::from_gguf`], calling `progress(done, total)` (bytes of weights) as
    /// weights are uploaded. The tokenizer is read first, so a file with a bad one fails
    /// before any weight is loaded.
    ///
    /// # Errors
    /// As [`Generator::from_gguf`].
    pub fn from_gguf_with_progress(
        dev: &S::Device,
        file: &GgufFile,
        opts: LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        crate::arch::hparams(file)?;
        let tokenizer = GgufTokenizer::from_gguf(file)?;
        let runner = Runner::load(dev, file, opts, progress)?;
        Ok(Generator { runner, tokenizer, cached: Vec::new() })
    }

    /// A generator over an already loaded runner and tokenizer.
    pub fn new(runner: Runner<S>, tokenizer: GgufTokenizer) -> Self {
        let mut runner = runner;
        runner.reset();
        Generator { runner, tokenizer, cached: Vec::new() }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    /// The runner (model, device, context).
    pub fn runner(&self) -> &Runner<S> {
        &self.runner
    }

    /// Positions of the context.
    pub fn context(&self) -> usize {
        self.runner.context()
    }

    /// Tokens the KV cache holds.
    pub fn cached_tokens(&self) -> usize {
        self.cached.len()
    }

    /// Empties the KV cache.
    pub fn reset(&mut self) {
        self.runner.reset();
        self.cached.clear();
    }

    /// The prompt tokens of `messages` rendered with the model's chat template and the
    /// generation prompt: [`GgufTokenizer::render_chat`], then encoded with BOS where the
    /// model adds it.
    ///
    /// # Errors
    /// As [`GgufTokenizer::render_chat`] and [`GgufTokenizer::encode`].
    pub fn chat_tokens(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let text = self.tokenizer.render_chat(messages, true)?;
        self.tokenizer.encode(&text, true)
    }

    /// Generates a reply to `messages` (the whole conversation so far; the tokens of its
    /// earlier turns still in the cache are not run again).
    ///
    /// # Errors
    /// As [`Generator::chat_tokens`] and [`Generator::generate_tokens`].
    pub fn chat(&mut self, messages: &[ChatMessage], opts: &GenerateOptions) -> Result<Generation<'_, S>> {
        let prompt = self.chat_tokens(messages)?;
        self.generate_tokens(&prompt, opts)
    }

    /// Generates a continuation of `text` (encoded with BOS where the model adds it).
    ///
    /// # Errors
    /// As [`Generator::generate_tokens`].
    pub fn generate(&mut self, text: &str, opts: &GenerateOptions) -> Result<Generation<'_, S>> {
        let prompt = self.tokenizer.encode(text, true)?;
        self.generate_tokens(&prompt, opts)
    }

    /// Runs `prompt` (only its tokens after the longest prefix the cache holds, where the
    /// cache can be cut back to it: [`Runner::truncate`]) and returns the generation that
    /// samples from its last logits.
    ///
    /// # Errors
    /// [`Error::Model`] for an empty prompt; [`Error::Context`] when the prompt fills the
    /// context (no room for a token); [`Error::Sampling`] for bad sampling options or stop
    /// texts past [`MAX_STOP_TEXTS`] / [`MAX_STOP_BYTES`]; device errors.
    pub fn generate_tokens(&mut self, prompt: &[u32], opts: &GenerateOptions) -> Result<Generation<'_, S>> {
        let sampler = Sampler::new(opts.sampling)?;
        if opts.stop.len() > MAX_STOP_TEXTS {
            return Err(Error::Sampling(format!("{} stop texts: at most {MAX_STOP_TEXTS}", opts.stop.len())));
        }
        if let Some(s) = opts.stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return Err(Error::Sampling(format!("a stop text of {} bytes: at most {MAX_STOP_BYTES}", s.len())));
        }
        if prompt.is_empty() {
            return Err(crate::error::model_err("the prompt is empty after tokenization"));
        }
        if prompt.len() >= self.context() {
            return Err(Error::Context { tokens: prompt.len() + 1, ctx: self.context() });
        }
        // Reuse the cached prefix, keeping at least one token to run (its logits).
        let common = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        let reused = if self.runner.truncate(common) { common } else { 0 };
        if reused == 0 {
            self.reset();
        }
        self.cached.truncate(reused);
        let t0 = Instant::now();
        let logits = match self.runner.forward(&prompt[reused..], false) {
            Ok(l) => l,
            Err(e) => {
                // The cache holds part of the prompt at best: start afresh next time.
                self.reset();
                return Err(e);
            }
        };
        self.cached.extend_from_slice(&prompt[reused..]);
        let budget = opts.max_tokens.min(self.context() - prompt.len());
        let finish = (budget == 0).then_some(FinishReason::Length);
        let harmony = crate::harmony::Harmony::of(&self.tokenizer);
        Ok(Generation {
            prompt_tokens: prompt.len(),
            reused_tokens: reused,
            prompt_s: t0.elapsed().as_secs_f64(),
            started: Instant::now(),
            g: self,
            device_choice: opts.sampling.device_choice(),
            sampler,
            logits: Some(logits),
            chosen: None,
            history: prompt.to_vec(),
            stream: TokenStream::new(),
            harmony,
            reasoning_stream: TokenStream::new(),
            reasoning: String::new(),
            budget,
            generated: 0,
            held: String::new(),
            stop: opts.stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
            finish,
            stop_at_once: None,
        })
    }
}

/// A generation in progress: an iterator of text pieces (whole characters; stop texts
/// left out), ending at the model's stop token, a stop text, `max_tokens` or the end of
/// the context. Dropping it early stops generating; the tokens run so far stay cached.
pub struct Generation<'g, S: ModelStorage = VulkanStorage> {
    g: &'g mut Generator<S>,
    sampler: Sampler,
    /// Logits to sample the next token from.
    logits: Option<Vec<f32>>,
    /// How the device chooses tokens, where it can ([`SamplingConfig::device_choice`]).
    device_choice: Option<TokenChoice>,
    /// The next token, where the device chose it ([`Runner::forward_choose`]).
    chosen: Option<u32>,
    /// Prompt and generated tokens (for the repeat penalty).
    history: Vec<u32>,
    stream: TokenStream,
    /// gpt-oss's Harmony messages, where the vocabulary has them: only `final` text is the
    /// reply; the rest goes to `reasoning` (its own stream).
    harmony: Option<crate::harmony::Harmony>,
    reasoning_stream: TokenStream,
    reasoning: String,
    budget: usize,
    generated: usize,
    /// Text held back because it may be the start of a stop text.
    held: String,
    stop: Vec<String>,
    finish: Option<FinishReason>,
    stop_at_once: Option<u32>,
    prompt_tokens: usize,
    reused_tokens: usize,
    prompt_s: f64,
    started: Instant,
}

impl<S: ModelStorage> std::fmt::Debug for Generation<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Generation({} of {} tokens, {:?})", self.generated, self.budget, self.finish)
    }
}

impl<S: ModelStorage> Generation<'_, S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Why the generation ended; `None` while it goes on.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Tokens sampled so far (the stop token included).
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// Tokens of the prompt.
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// Tokens of the prompt found in the cache, not run again.
    pub fn reused_tokens(&self) -> usize {
        self.reused_tokens
    }

    /// Seconds the prompt took to run.
    pub fn prompt_seconds(&self) -> f64 {
        self.prompt_s
    }

    /// Seconds since the prompt finished.
    pub fn generation_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The stop token, when it was the first token sampled (the reply is empty).
    pub fn stopped_at_once(&self) -> Option<u32> {
        self.stop_at_once
    }

    /// The tokenizer, to name tokens.
    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.g.tokenizer
    }

    /// What a gpt-oss model wrote outside its `final` messages so far (its `analysis`
    /// reasoning, [`crate::harmony`]); empty for other vocabularies.
    pub fn reasoning(&self) -> &str {
        &self.reasoning
    }

    /// `text` after the held-back text, cut at a stop text (ending the generation), with
    /// the longest tail that may begin a stop text held back again.
    fn release(&mut self, text: &str) -> String {
        let mut all = std::mem::take(&mut self.held);
        all.push_str(text);
        if let Some(at) = self.stop.iter().filter_map(|s| all.find(s.as_str())).min() {
            all.truncate(at);
            self.finish = Some(FinishReason::Stop);
            return all;
        }
        let keep = self
            .stop
            .iter()
            .flat_map(|s| (1..s.len()).filter(|&k| s.is_char_boundary(k)).map(move |k| &s[..k]))
            .filter(|prefix| all.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        self.held = all.split_off(all.len() - keep);
        all
    }

    /// The next piece of text; `Ok(None)` at the end.
    fn step(&mut self) -> Result<Option<String>> {
        loop {
            if self.finish.is_some() {
                return Ok(None);
            }
            let next = match (self.chosen.take(), self.logits.take()) {
                (Some(t), _) => t,
                // The prompt's logits: the device's draw, made on the host (counter: the
                // position of the token whose logits these are).
                (None, Some(logits)) => match &self.device_choice {
                    Some(how) => crate::sampling::choose_host(&logits, how, self.g.runner.position() as u64 - 1, 0)?,
                    None => self.sampler.sample(logits, &self.history)?,
                },
                (None, None) => return Ok(None),
            };
            self.generated += 1;
            if self.g.tokenizer.stop.contains(&next) {
                self.stop_at_once = (self.generated == 1).then_some(next);
                let rest = self.stream.rest(&self.g.tokenizer)?;
                let out = self.release(&rest);
                self.finish = Some(FinishReason::Stop);
                return Ok(Some(out + &std::mem::take(&mut self.held)).filter(|s| !s.is_empty()));
            }
            self.history.push(next);
            let tok = &self.g.tokenizer;
            let route = match self.harmony.as_mut() {
                Some(h) => h.route(next, |ids| tok.decode(ids).unwrap_or_default()),
                None => crate::harmony::Route::Reply,
            };
            let piece = match route {
                crate::harmony::Route::Reply => self.stream.push(tok, next)?,
                crate::harmony::Route::Reasoning => {
                    if let Some(p) = self.reasoning_stream.push(tok, next)? {
                        self.reasoning.push_str(&p);
                    }
                    None
                }
                crate::harmony::Route::Drop => None,
            };
            if self.generated < self.budget {
                // The device chooses the token itself (greedy or a seeded draw) and runs
                // the step after on it while the host reads it; the host samples where a
                // setting needs the history (repeat penalty).
                if let Some(how) = self.device_choice {
                    self.chosen = Some(self.g.runner.forward_choose(next, &how)?);
                } else {
                    self.logits = Some(self.g.runner.forward(&[next], false)?);
                }
                self.g.cached.push(next);
            }
            let mut out = piece.map(|p| self.release(&p)).unwrap_or_default();
            if self.finish.is_none() && self.generated >= self.budget {
                let rest = self.stream.rest(&self.g.tokenizer)?;
                out.push_str(&self.release(&rest));
                if self.finish.is_none() {
                    out.push_str(&std::mem::take(&mut self.held));
                    self.finish = Some(FinishReason::Length);
                }
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }
}

impl<S: ModelStorage> Iterator for Generation<'_, S>
where
    S::Device: BackendDevice<Storage = S>,
{
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        match self.step() {
            Ok(Some(s)) => Some(Ok(s)),
            Ok(None) => None,
            Err(e) => {
                // A failed step leaves the cache in an unknown state.
                self.finish = Some(FinishReason::Stop);
                self.g.reset();
                Some(Err(e))
            }
        }
    }
}
