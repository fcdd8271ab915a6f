//! The model's thread: it owns the [`vkml_models::Generator`] (the device and KV cache) and runs the
//! queued requests one at a time, in arrival order, streaming each one's events back.
//! A request whose client went away (its event receiver dropped) is skipped if still
//! queued and stopped at its next piece if running.

use std::sync::mpsc;

use candle_core::backend::BackendDevice;
use tokio::sync::mpsc::UnboundedSender;
use vkml_models::chat_template::ChatMessage;
use vkml_models::storage::ModelStorage;
use vkml_models::{Error, FinishReason, GenerateOptions, Generator};

use super::api::{ApiError, Usage};
use crate::model_args::{self, ModelArgs};

/// What a request asks the model for.
#[derive(Debug)]
pub enum Input {
    /// A reply to a conversation (`/v1/chat/completions`).
    Chat(Vec<ChatMessage>),
    /// A continuation of a text (`/v1/completions`).
    Text(String),
}

/// One request on the queue.
#[derive(Debug)]
pub struct Job {
    /// The prompt.
    pub input: Input,
    /// Sampling, stop texts, `max_tokens` (`usize::MAX`: to the end of the context).
    pub opts: GenerateOptions,
    /// Where the events go.
    pub events: UnboundedSender<Event>,
}

/// What the model's thread reports about a job.
#[derive(Debug)]
pub enum Event {
    /// The prompt ran; pieces follow.
    Started,
    /// Generated text.
    Piece(String),
    /// Generated reasoning (gpt-oss's text outside its final messages), as it is made.
    Reasoning(String),
    /// The end, with why, the token counts and the reasoning (gpt-oss's text outside its
    /// final messages, `Generation::reasoning`; empty for other models).
    Done(FinishReason, Usage, String),
    /// The request failed before any piece (or a device error after some).
    Failed(ApiError),
}

/// The handle requests are queued on.
pub struct Worker {
    /// The queue.
    pub jobs: mpsc::Sender<Job>,
    /// The context of the loaded model, in tokens.
    pub context: usize,
    /// The device's name.
    pub device: String,
}

/// Loads the model `args` names on a thread of its own and starts serving jobs there.
///
/// # Errors
/// The load's errors, one line.
pub fn start(args: ModelArgs) -> Result<Worker, String> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let (jobs, queue) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("vkml-model".into())
        .spawn(move || {
            let loaded = model_args::open_model(&args)
                .and_then(|(path, file)| model_args::load(&args, &path, &file, |_| Ok(())));
            let mut m = match loaded {
                Ok(m) => {
                    let _ = ready_tx.send(Ok((m.generator.context(), m.device.clone())));
                    m
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            for job in queue {
                if job.events.is_closed() {
                    continue;
                }
                crate::with_generator!(&mut m.generator, g => run(g, job));
            }
        })
        .map_err(|e| format!("cannot start the model's thread: {e}"))?;
    let (context, device) = ready_rx.recv().map_err(|_| "the model's thread ended while loading".to_string())??;
    Ok(Worker { jobs, context, device })
}

/// Runs one job to its end, or until its client goes away.
fn run<S: ModelStorage>(g: &mut Generator<S>, job: Job)
where
    S::Device: BackendDevice<Storage = S>,
{
    let fail = |e: ApiError| {
        let _ = job.events.send(Event::Failed(e));
    };
    let prompt = match &job.input {
        Input::Chat(messages) => g.chat_tokens(messages),
        Input::Text(text) => g.tokenizer().encode(text, true),
    };
    let prompt = match prompt {
        Ok(p) => p,
        // The template refused the conversation (`raise_exception`: roles that do not
        // alternate, ...), or rendering passed a bound.
        Err(e) => return fail(ApiError::invalid(e.to_string(), Some("messages"), None)),
    };
    // `generate_tokens` bounds max_tokens by the context left.
    let mut generation = match g.generate_tokens(&prompt, &job.opts) {
        Ok(gen) => gen,
        Err(Error::Context { ctx, .. }) => {
            return fail(ApiError::invalid(
                format!(
                    "This model's maximum context length is {ctx} tokens. However, your prompt resulted in {} tokens.",
                    prompt.len()
                ),
                Some(if matches!(job.input, Input::Chat(_)) { "messages" } else { "prompt" }),
                Some("context_length_exceeded"),
            ))
        }
        Err(Error::Sampling(e)) => return fail(ApiError::invalid(e, None, None)),
        Err(e) => return fail(ApiError::server(e.to_string())),
    };
    if job.events.send(Event::Started).is_err() {
        return;
    }
    // (bytes of the reasoning sent so far)
    let mut said = 0;
    while let Some(piece) = generation.next() {
        match piece {
            Ok(p) => {
                let reasoning = generation.reasoning();
                if reasoning.len() > said {
                    let delta = reasoning[said..].to_string();
                    said = reasoning.len();
                    if job.events.send(Event::Reasoning(delta)).is_err() {
                        return;
                    }
                }
                if !p.is_empty() && job.events.send(Event::Piece(p)).is_err() {
                    return; // the client went away: stop generating
                }
            }
            Err(e) => return fail(ApiError::server(e.to_string())),
        }
    }
    let completion_tokens = generation.generated();
    let usage =
        Usage { prompt_tokens: prompt.len(), completion_tokens, total_tokens: prompt.len() + completion_tokens };
    let reasoning = generation.reasoning().to_string();
    let finish = generation.finish_reason().unwrap_or(FinishReason::Stop);
    let _ = job.events.send(Event::Done(finish, usage, reasoning));
}
