//! `vkml serve`: an OpenAI-compatible HTTP server for one GGUF model (axum on tokio).
//!
//! - `POST /v1/chat/completions`, `POST /v1/completions`: with `"stream": true` the
//!   reply comes as server-sent events (`data: {chunk}` ... `data: [DONE]`);
//!   `max_tokens` (`max_completion_tokens`), `temperature`, `top_p`, `top_k`, `min_p`,
//!   `seed`, `stop`.
//! - `GET /v1/models`: the one model; `GET /health`.
//!
//! Requests queue on the model's thread ([`worker`]) and run one at a time. Errors have
//! OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`): malformed JSON and
//! fields of the wrong type or range are 400, a prompt past the context is 400
//! `context_length_exceeded`, an unknown model 404 `model_not_found`. Unknown fields are
//! ignored. A client that disconnects stops its generation.

pub mod api;
pub mod worker;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt as _;
use vkml_models::sampling::SamplingConfig;
use vkml_models::GenerateOptions;

use self::api::{ApiError, ChatRequest, CompletionRequest, Prompt, Sampling};
use self::worker::{Event, Input, Job, Worker};
use crate::model_args::ModelArgs;

/// Arguments of `vkml serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port; the one taken is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The model's id in the API (default: the file's name without `.gguf`).
    #[arg(long)]
    alias: Option<String>,
}

struct AppState {
    jobs: std::sync::mpsc::Sender<Job>,
    model: String,
    created: u64,
    next_id: AtomicU64,
}

type Shared = Arc<AppState>;

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}

/// Runs `vkml serve` until Ctrl-C.
pub fn run(a: Args) -> Result<(), String> {
    let model = match &a.alias {
        Some(n) => n.clone(),
        None => {
            let path = match &a.model.model {
                Some(p) => p.clone(),
                None => crate::fetch::default_model()?,
            };
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.strip_suffix(".gguf").unwrap_or(&name).to_string()
        }
    };
    let Worker { jobs, context, device } = worker::start(a.model.clone())?;
    let state = Arc::new(AppState { jobs, model: model.clone(), created: now(), next_id: AtomicU64::new(1) });
    let app = Router::new()
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .fallback(|| async {
            ApiError { status: 404, message: "no such route".into(), kind: "not_found_error", param: None, code: None }
        })
        .with_state(state);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the server's runtime: {e}"))?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener =
            tokio::net::TcpListener::bind(&addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!("vkml serve: model {model} on {device} (context {context} tokens), listening on http://{local}");
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| format!("server: {e}"))
    })
}

async fn models(State(s): State<Shared>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": s.model, "object": "model", "created": s.created, "owned_by": "vkml"}],
    }))
}

/// `body` as `T`, or a 400 naming the field at fault.
fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let param = (path != "." && !inner.is_syntax() && !inner.is_eof()).then_some(path);
        let message = if inner.is_syntax() || inner.is_eof() {
            format!("the request body is not valid JSON: {inner}")
        } else {
            format!("invalid request: {inner}")
        };
        ApiError::invalid(message, param.as_deref(), None)
    })
}

/// The generation options of a request's sampling fields (OpenAI's defaults: temperature
/// 1, top-p 1; no `max_tokens`: `default_max_tokens`, `usize::MAX` for to the end of the
/// context), each range checked.
fn options(s: &Sampling, default_max_tokens: usize) -> Result<GenerateOptions, ApiError> {
    let bad = |param: &str, need: &str| ApiError::invalid(format!("{param}: {need}"), Some(param), None);
    if s.n.is_some_and(|n| n != 1) {
        return Err(bad("n", "only n = 1 is supported"));
    }
    let temperature = s.temperature.unwrap_or(1.0);
    if !(temperature.is_finite() && temperature >= 0.0) {
        return Err(bad("temperature", "must be a number >= 0"));
    }
    if s.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
        return Err(bad("top_p", "must be a number in (0, 1]"));
    }
    if s.min_p.is_some_and(|p| !(0.0..=1.0).contains(&p)) {
        return Err(bad("min_p", "must be a number in [0, 1]"));
    }
    let max_tokens = s.max_completion_tokens.or(s.max_tokens);
    if max_tokens == Some(0) {
        return Err(bad("max_tokens", "must be at least 1"));
    }
    let stop = s.stop.clone().map(api::Stop::into_vec).unwrap_or_default();
    let sampling = SamplingConfig {
        temperature,
        top_k: s.top_k.map(|k| k as usize),
        top_p: s.top_p,
        min_p: s.min_p,
        repeat_penalty: 1.0,
        repeat_last_n: 64,
        seed: s.seed.unwrap_or_else(crate::model_args::clock_seed),
    };
    let max_tokens = max_tokens.map_or(default_max_tokens, |m| usize::try_from(m).unwrap_or(usize::MAX));
    Ok(GenerateOptions { max_tokens, sampling, stop })
}

fn check_model(s: &AppState, model: &str) -> Result<(), ApiError> {
    if model == s.model {
        return Ok(());
    }
    Err(ApiError {
        status: 404,
        message: format!("The model `{model}` does not exist (this server has `{}`)", s.model),
        kind: "invalid_request_error",
        param: Some("model".into()),
        code: Some("model_not_found"),
    })
}

/// Queues `input` and waits for the prompt to run: the events after `Started`, or the
/// request's error.
async fn submit(s: &AppState, input: Input, opts: GenerateOptions) -> Result<UnboundedReceiver<Event>, ApiError> {
    let (tx, mut rx) = unbounded_channel();
    s.jobs.send(Job { input, opts, events: tx }).map_err(|_| ApiError::server("the model's thread has ended"))?;
    match rx.recv().await {
        Some(Event::Started) => Ok(rx),
        Some(Event::Failed(e)) => Err(e),
        Some(_) | None => Err(ApiError::server("the model's thread ended the request")),
    }
}

/// What a request's reply is: its text, why it ended, token counts and the reasoning
/// (gpt-oss's, else empty); or its error.
async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<(String, &'static str, api::Usage, String), ApiError> {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Piece(p) => text.push_str(&p),
            Event::Done(finish, usage, reasoning) => return Ok((text, finish.as_str(), usage, reasoning)),
            Event::Failed(e) => return Err(e),
            Event::Started | Event::Reasoning(_) => {}
        }
    }
    Err(ApiError::server("the model's thread ended the request"))
}

/// Server-sent events: `first` (if any), `chunk(piece)` for each piece (`reason(piece)`
/// for each piece of reasoning, where it gives a chunk), `last(finish)` at the end (an
/// error body instead, if the model fails midway), then `[DONE]`.
fn stream(
    rx: UnboundedReceiver<Event>,
    first: Option<Value>,
    chunk: impl Fn(&str) -> Value + Send + 'static,
    reason: impl Fn(&str) -> Option<Value> + Send + 'static,
    last: impl Fn(&str) -> Value + Send + 'static,
) -> Response {
    let event = |v: Value| Ok::<_, Infallible>(SseEvent::default().data(v.to_string()));
    let head = tokio_stream::iter(first.map(event));
    let body = UnboundedReceiverStream::new(rx).filter_map(move |ev| match ev {
        Event::Piece(p) => Some(event(chunk(&p))),
        Event::Reasoning(p) => reason(&p).map(event),
        Event::Done(finish, ..) => Some(event(last(finish.as_str()))),
        Event::Failed(e) => Some(event(e.body())),
        Event::Started => None,
    });
    let done = tokio_stream::once(Ok::<_, Infallible>(SseEvent::default().data("[DONE]")));
    Sse::new(head.chain(body).chain(done)).keep_alive(KeepAlive::default()).into_response()
}

/// A streamed chat completion: chunks `base` (id, object, created, model) with one choice
/// whose `delta` is the assistant's role first, then each piece as `content` and each piece
/// of reasoning as `reasoning_content` (gpt-oss's analysis text, as llama.cpp's server
/// streams it), in the order the model made them; the last chunk has an empty delta and the
/// `finish_reason`.
fn chat_stream(rx: UnboundedReceiver<Event>, base: Value) -> Response {
    let with = |base: &Value, delta: Value, finish: Value| {
        let mut v = base.clone();
        v["choices"] = json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
        v
    };
    let first = with(&base, json!({"role": "assistant", "content": ""}), Value::Null);
    let (b1, b2, b3) = (base.clone(), base.clone(), base);
    stream(
        rx,
        Some(first),
        move |p| with(&b1, json!({"content": p}), Value::Null),
        move |p| Some(with(&b3, json!({"reasoning_content": p}), Value::Null)),
        move |f| with(&b2, json!({}), json!(f)),
    )
}

async fn chat_completions(State(s): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(&body)?;
    let sampling: Sampling = parse(&body)?;
    check_model(&s, &req.model)?;
    let opts = options(&sampling, usize::MAX)?;
    let messages =
        req.messages.iter().enumerate().map(|(i, m)| api::message_text(i, m)).collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::invalid("messages: at least one message is needed", Some("messages"), None));
    }
    let rx = submit(&s, Input::Chat(messages), opts).await?;
    let id = format!("chatcmpl-{}", s.next_id.fetch_add(1, Ordering::Relaxed));
    let created = now();
    let model = s.model.clone();
    if sampling.stream {
        return Ok(chat_stream(
            rx,
            json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model}),
        ));
    }
    let (text, finish, usage, reasoning) = collect(rx).await?;
    let mut message = json!({"role": "assistant", "content": text});
    if !reasoning.is_empty() {
        // (gpt-oss's analysis messages, as llama.cpp's server and DeepSeek's API name them)
        message["reasoning_content"] = json!(reasoning);
    }
    Ok(Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }))
    .into_response())
}

async fn completions(State(s): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(&body)?;
    let sampling: Sampling = parse(&body)?;
    check_model(&s, &req.model)?;
    // OpenAI's completions default to 16 tokens.
    let opts = options(&sampling, 16)?;
    let prompt = match req.prompt {
        Prompt::One(p) => p,
        Prompt::Many(mut v) if v.len() == 1 => v.remove(0),
        Prompt::Many(_) => return Err(ApiError::invalid("prompt: only one prompt per request", Some("prompt"), None)),
    };
    let rx = submit(&s, Input::Text(prompt), opts).await?;
    let id = format!("cmpl-{}", s.next_id.fetch_add(1, Ordering::Relaxed));
    let created = now();
    let model = s.model.clone();
    let base = json!({"id": id, "object": "text_completion", "created": created, "model": model});
    let with = |base: &Value, text: &str, finish: Value| {
        let mut v = base.clone();
        v["choices"] = json!([{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]);
        v
    };
    if sampling.stream {
        let (b1, b2) = (base.clone(), base);
        return Ok(stream(rx, None, move |p| with(&b1, p, Value::Null), |_| None, move |f| with(&b2, "", json!(f))));
    }
    let (text, finish, usage, _) = collect(rx).await?;
    let mut v = with(&base, &text, json!(finish));
    v["usage"] = json!(usage);
    Ok(Json(v).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkml_models::FinishReason;

    /// The `data:` payloads of a server-sent-events body.
    fn sse_data(body: &[u8]) -> Vec<String> {
        String::from_utf8(body.to_vec())
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .map(str::to_string)
            .collect()
    }

    /// gpt-oss's reasoning reaches a streaming client as `delta.reasoning_content` chunks,
    /// in order with the reply's `delta.content` chunks (the events a Harmony generation
    /// sends: reasoning first, then the final message).
    #[test]
    fn chat_stream_sends_reasoning_as_reasoning_content_deltas() {
        let (tx, rx) = unbounded_channel();
        let usage = api::Usage { prompt_tokens: 5, completion_tokens: 4, total_tokens: 9 };
        for ev in [
            Event::Started,
            Event::Reasoning("The user greets; ".into()),
            Event::Reasoning("answer briefly.".into()),
            Event::Piece("Hello".into()),
            Event::Piece("!".into()),
            Event::Done(FinishReason::Stop, usage, "The user greets; answer briefly.".into()),
        ] {
            tx.send(ev).unwrap();
        }
        drop(tx);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let base = json!({"id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1, "model": "m"});
        // (The keep-alive timer needs the runtime when the response is made.)
        let body =
            rt.block_on(async { axum::body::to_bytes(chat_stream(rx, base).into_body(), usize::MAX).await }).unwrap();
        let data = sse_data(&body);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
        let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
        let deltas: Vec<(String, String)> = chunks
            .iter()
            .map(|c| {
                assert_eq!(c["id"], "chatcmpl-7");
                assert_eq!(c["object"], "chat.completion.chunk");
                let d = c["choices"][0]["delta"].as_object().unwrap();
                match d.iter().find(|(k, _)| *k != "role") {
                    Some((k, v)) => (k.clone(), v.as_str().unwrap().to_string()),
                    None => (String::new(), String::new()),
                }
            })
            .collect();
        let want = [
            ("content", ""),
            ("reasoning_content", "The user greets; "),
            ("reasoning_content", "answer briefly."),
            ("content", "Hello"),
            ("content", "!"),
            ("", ""),
        ];
        assert_eq!(deltas.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>(), want);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert!(chunks[..5].iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
        assert_eq!(chunks[5]["choices"][0]["finish_reason"], "stop");
    }
}
