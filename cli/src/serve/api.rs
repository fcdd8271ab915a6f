//! OpenAI's chat-completions and completions request and response bodies, as much of
//! them as `vkml serve` implements (field names and values as OpenAI's API reference
//! gives them). Unknown request fields are ignored: clients send extras.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use vkml_models::chat_template::ChatMessage;

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop text.
    One(String),
    /// Several stop texts (OpenAI allows up to 4).
    Many(Vec<String>),
}

impl Stop {
    /// The stop texts.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// The sampling fields both endpoints take (read from the body apart from the
/// endpoint's own fields, so that an error names its field).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    /// Most tokens to generate (`max_completion_tokens` is the chat endpoint's newer name).
    pub max_tokens: Option<u64>,
    /// Newer name of `max_tokens` on `/v1/chat/completions`.
    pub max_completion_tokens: Option<u64>,
    /// 0 to 2 in OpenAI's API; 0 is greedy. Default 1.
    pub temperature: Option<f64>,
    /// Nucleus sampling; default 1.
    pub top_p: Option<f64>,
    /// Top-k (an extension llama.cpp's server also takes); default: all tokens.
    pub top_k: Option<u64>,
    /// Min-p (an extension llama.cpp's server also takes); default 0.
    pub min_p: Option<f64>,
    /// Seed of the sampler; default: from the clock.
    pub seed: Option<u64>,
    /// Stop texts.
    pub stop: Option<Stop>,
    /// Stream the reply as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Completions to generate; only 1 is supported.
    pub n: Option<u64>,
}

/// One message's `content`: a string, or a list of parts of which text parts are used.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content parts (`{"type": "text", "text": ...}`).
    Parts(Vec<Part>),
}

/// A content part.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// `"text"` (others are refused).
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a text part.
    pub text: Option<String>,
}

/// A message of `/v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// `system`, `developer` (OpenAI's newer name for system), `user`, `assistant`, ...
    pub role: String,
    /// The text; `null` for an assistant message that only calls tools.
    pub content: Option<Content>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The model's id (as `GET /v1/models` lists it).
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The model's id.
    pub model: String,
    /// The text to continue (a list of one string is taken too).
    pub prompt: Prompt,
}

/// A completion prompt.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One text.
    One(String),
    /// A batch of texts (only one is supported).
    Many(Vec<String>),
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, with
/// its HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status (400, 404, 500, 503).
    pub status: u16,
    /// What went wrong, for people.
    pub message: String,
    /// `invalid_request_error`, `not_found_error` or `server_error`.
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, `model_not_found`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(message: impl Into<String>, param: Option<&str>, code: Option<&'static str>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code,
        }
    }

    /// A 500 `server_error`.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError { status: 500, message: message.into(), kind: "server_error", param: None, code: None }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// The text of a message's content.
///
/// # Errors
/// A 400 naming the message for a part that is not text.
pub fn message_text(i: usize, m: &Message) -> Result<ChatMessage, ApiError> {
    let content = match &m.content {
        None => String::new(),
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(parts)) => {
            let mut s = String::new();
            for p in parts {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => s.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            format!("content parts of type {kind:?} are not supported (text only)"),
                            Some(&format!("messages[{i}].content")),
                            None,
                        ))
                    }
                }
            }
            s
        }
    };
    let role = if m.role == "developer" { "system" } else { m.role.as_str() };
    Ok(ChatMessage::new(role, content))
}

/// Token counts of a reply (`usage`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
}
