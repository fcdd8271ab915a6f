//! The tokenizer a GGUF file carries (`tokenizer.ggml.*` keys, GGUF spec "Tokenizer"
//! section), rebuilt as a [`tokenizers::Tokenizer`], and its chat template
//! (`tokenizer.chat_template`, Jinja) rendered with minijinja.
//!
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE from `tokens` and `merges`; the
//!   pre-tokenizer follows `tokenizer.ggml.pre` as llama.cpp's `llama-vocab.cpp` maps it
//!   (`default`/`gpt2`: GPT-2's split; `smollm`: single digits, then GPT-2's split;
//!   `llama-bpe`/`llama3`: Llama 3's split; `qwen2`: Llama 3's with single digits).
//! - `tokenizer.ggml.model = "llama"`: SentencePiece BPE with byte fallback, from
//!   `tokens` and `scores`; merges are derived from the scores as HF's
//!   `SentencePieceExtractor` does (a merge for every split of a piece into two pieces,
//!   ranked by the merged piece's score).
//!
//! Tokens of type control (3) or user-defined (4) in `tokenizer.ggml.token_type` are
//! special: matched whole in the input, before the model sees it.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};
use vkml_quant::gguf::{GgufArray, GgufFile, GgufValue};

use crate::error::{Error, Result};

/// Qwen2's pre-tokenizer split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`): Llama 3's with
/// single digits.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's pre-tokenizer split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_LLAMA3`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

/// A GGUF model's tokenizer, special tokens and chat template.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    inner: tokenizers::Tokenizer,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// Token ids that end generation: EOS, plus `<|im_end|>`, `<|eot_id|>`,
    /// `<end_of_turn>` and `<|end|>` where the vocabulary has them.
    pub stop: Vec<u32>,
    /// `tokenizer.ggml.add_bos_token` (default: true for `llama`, false for `gpt2`).
    pub add_bos: bool,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
    tokens: Vec<String>,
}

fn strings<'a>(f: &'a GgufFile, key: &str) -> Result<&'a [String]> {
    match f.get(key) {
        Some(GgufValue::Array(GgufArray::String(v))) => Ok(v),
        Some(_) => Err(tok_err(format!("metadata {key} is not an array of strings"))),
        None => Err(tok_err(format!("metadata {key} is missing"))),
    }
}

fn id(f: &GgufFile, key: &str, n: usize) -> Result<Option<u32>> {
    match f.get(key).map(GgufValue::as_u64) {
        None => Ok(None),
        Some(Some(v)) if (v as usize) < n => Ok(Some(v as u32)),
        Some(_) => Err(tok_err(format!("metadata {key} is not a token id below {n}"))),
    }
}

impl GgufTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] for a missing or ill-typed `tokenizer.ggml.*` key, a
    /// tokenizer model other than `gpt2` or `llama`, or a `gpt2` pre-tokenizer
    /// (`tokenizer.ggml.pre`) this code does not know.
    ///
    /// Loading is linear in the metadata: SentencePiece merges are derived only for pieces
    /// of at most [`MAX_MERGED_PIECE`] bytes.
    pub fn from_gguf(f: &GgufFile) -> Result<GgufTokenizer> {
        let model = f
            .get("tokenizer.ggml.model")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| tok_err("metadata tokenizer.ggml.model is missing"))?;
        let tokens = strings(f, "tokenizer.ggml.tokens")?;
        let n = tokens.len();
        let types: Vec<i32> = match f.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(GgufArray::I32(v))) if v.len() == n => v.clone(),
            Some(_) => return Err(tok_err("metadata tokenizer.ggml.token_type is not one i32 per token")),
            None => vec![1; n],
        };
        let vocab: HashMap<String, u32> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let mut inner = match model {
            "gpt2" => {
                let merges: Vec<(String, String)> = strings(f, "tokenizer.ggml.merges")?
                    .iter()
                    .map(|m| {
                        m.split_once(' ')
                            .map(|(a, b)| (a.to_string(), b.to_string()))
                            .ok_or_else(|| tok_err(format!("merge {m:?} is not two tokens separated by a space")))
                    })
                    .collect::<Result<_>>()?;
                let bpe = BPE::builder()
                    .vocab_and_merges(
                        vocab.iter().map(|(k, v)| (k.clone(), *v)).collect::<tokenizers::models::bpe::Vocab>(),
                        merges,
                    )
                    .build()
                    .map_err(tok_err)?;
                let mut t = tokenizers::Tokenizer::new(bpe);
                let pre = f.get("tokenizer.ggml.pre").and_then(GgufValue::as_str).unwrap_or("default");
                let byte_level = |regex: bool| PreTokenizerWrapper::from(ByteLevel::new(false, false, regex));
                let pre_tok: PreTokenizerWrapper = match pre {
                    "default" | "gpt2" | "gpt-2" => byte_level(true),
                    "smollm" => PreSequence::new(vec![Digits::new(true).into(), byte_level(true)]).into(),
                    "llama-bpe" | "llama3" | "qwen2" => {
                        let re = if pre == "qwen2" { QWEN2_SPLIT } else { LLAMA3_SPLIT };
                        let split = Split::new(
                            SplitPattern::Regex(re.into()),
                            SplitDelimiterBehavior::Isolated,
                            false,
                        )
                        .map_err(tok_err)?;
                        PreSequence::new(vec![split.into(), byte_level(false)]).into()
                    }
                    other => {
                        return Err(tok_err(format!(
                        "gpt2 pre-tokenizer {other:?} is not supported (supported: default, gpt2, smollm, llama-bpe, qwen2)"
                    )))
                    }
                };
                t.with_pre_tokenizer(Some(pre_tok));
                t.with_decoder(Some(ByteLevelDecoder::default()));
                t
            }
            "llama" => {
                let scores: Vec<f32> = match f.get("tokenizer.ggml.scores") {
                    Some(GgufValue::Array(GgufArray::F32(v))) if v.len() == n => v.clone(),
                    _ => return Err(tok_err("metadata tokenizer.ggml.scores is missing or not one f32 per token")),
                };
                // Merges from scores: every way a piece splits into two pieces, ranked by
                // the piece's score (higher first), then by the pieces' ids. Splitting a
                // piece costs its length squared (each cut hashes both halves): pieces
                // past MAX_MERGED_PIECE bytes get no merges (no real vocabulary has one;
                // Gemma 3's longest is 48 bytes), which keeps a hostile token list linear.
                let mut merges: Vec<(f32, u32, u32, u32)> = Vec::new();
                for (i, piece) in tokens.iter().enumerate() {
                    if types[i] != 1 || piece.len() > MAX_MERGED_PIECE {
                        continue;
                    }
                    for (cut, _) in piece.char_indices().skip(1) {
                        let (a, b) = piece.split_at(cut);
                        if let (Some(&ia), Some(&ib)) = (vocab.get(a), vocab.get(b)) {
                            merges.push((scores[i], i as u32, ia, ib));
                        }
                    }
                }
                merges.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.2.cmp(&y.2)).then(x.3.cmp(&y.3)));
                let merges = merges
                    .into_iter()
                    .map(|(_, _, a, b)| (tokens[a as usize].clone(), tokens[b as usize].clone()))
                    .collect();
                let unk = id(f, "tokenizer.ggml.unknown_token_id", n)?.map(|u| tokens[u as usize].clone());
                let mut b = BPE::builder()
                    .vocab_and_merges(
                        vocab.iter().map(|(k, v)| (k.clone(), *v)).collect::<tokenizers::models::bpe::Vocab>(),
                        merges,
                    )
                    .byte_fallback(true)
                    .fuse_unk(true);
                if let Some(u) = unk {
                    b = b.unk_token(u);
                }
                let mut t = tokenizers::Tokenizer::new(b.build().map_err(tok_err)?);
                let add_space = matches!(f.get("tokenizer.ggml.add_space_prefix"), Some(GgufValue::Bool(true)) | None);
                let mut norms: Vec<NormalizerWrapper> = Vec::new();
                if add_space {
                    norms.push(Prepend::new("▁".into()).into());
                }
                norms.push(Replace::new(" ", "▁").map_err(tok_err)?.into());
                t.with_normalizer(Some(tokenizers::normalizers::Sequence::new(norms))).map_err(tok_err)?;
                let mut decs: Vec<DecoderWrapper> = vec![
                    tokenizers::normalizers::Replace::new("▁", " ").map_err(tok_err)?.into(),
                    ByteFallback::new().into(),
                    Fuse::new().into(),
                ];
                if add_space {
                    decs.push(Strip::new(' ', 1, 0).into());
                }
                t.with_decoder(Some(DecoderSequence::new(decs)));
                t
            }
            other => {
                return Err(tok_err(format!("tokenizer model {other:?} is not supported (supported: gpt2, llama)")))
            }
        };
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &ty)| ty == 3 || ty == 4)
            .map(|(t, _)| AddedToken::from(t.clone(), true))
            .collect();
        inner.add_special_tokens(special).map_err(tok_err)?;
        let bos = id(f, "tokenizer.ggml.bos_token_id", n)?;
        let eos = id(f, "tokenizer.ggml.eos_token_id", n)?;
        let add_bos = match f.get("tokenizer.ggml.add_bos_token") {
            Some(GgufValue::Bool(b)) => *b,
            _ => model == "llama",
        };
        let mut stop: Vec<u32> = eos.into_iter().collect();
        for s in ["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>"] {
            if let Some(i) = tokens.iter().position(|t| t == s) {
                if !stop.contains(&(i as u32)) {
                    stop.push(i as u32);
                }
            }
        }
        let chat_template = f.get("tokenizer.chat_template").and_then(GgufValue::as_str).map(str::to_string);
        Ok(GgufTokenizer { inner, bos, eos, stop, add_bos, chat_template, tokens: tokens.to_vec() })
    }

    /// Token ids of `text`, with BOS first where the model adds it and `add_bos` asks
    /// for it. Special-token text (`<|im_start|>`) becomes its one id.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] from the tokenizer.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(tok_err)?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_bos && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids` (special tokens included as their text).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] from the tokenizer.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(tok_err)
    }

    /// The token's string as stored in the vocabulary.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Renders the chat template for one user message (`messages = [{role: "user",
    /// content}]`, optionally preceded by a system message) with
    /// `add_generation_prompt = true`, as `transformers`' `apply_chat_template` does.
    /// A file without `tokenizer.chat_template` whose vocabulary has Gemma's
    /// `<start_of_turn>` gets llama.cpp's built-in Gemma template (`llm_chat_apply_template`,
    /// `LLM_CHAT_TEMPLATE_GEMMA`: the system message opens the user turn).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the model has no chat template or it fails to render
    /// (including the template's own `raise_exception`), or passes a bound: its fuel
    /// ([`TEMPLATE_FUEL`]), output ([`TEMPLATE_MAX_OUTPUT`]), format widths
    /// ([`TEMPLATE_MAX_WIDTH`]) or time ([`TEMPLATE_MAX_TIME`]).
    pub fn apply_chat_template(&self, system: Option<&str>, user: &str) -> Result<String> {
        let has = |t: &str| self.tokens.iter().any(|x| x == t);
        let tpl = match self.chat_template.as_deref() {
            Some(t) => t,
            None if has("<start_of_turn>") && has("<end_of_turn>") => {
                let sys = system.map_or_else(String::new, |s| format!("{s}\n\n"));
                return Ok(format!("<start_of_turn>user\n{sys}{user}<end_of_turn>\n<start_of_turn>model\n"));
            }
            None => return Err(tok_err("the model has no tokenizer.chat_template; run without --chat")),
        };
        let tok = |i: Option<u32>| i.and_then(|i| self.token(i)).unwrap_or("").to_string();
        let job = (tpl.to_string(), system.map(str::to_string), user.to_string(), tok(self.bos), tok(self.eos));
        // On a thread of its own, waited for at most TEMPLATE_MAX_TIME: printing a huge
        // lazily repeated sequence (`{{ messages * 999999999 }}`) walks every item without
        // fuel or output bounds stopping it. Past the deadline the call returns an error;
        // the thread finishes its walk (bounded, but possibly long) in the background.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("chat-template".into())
            .spawn(move || {
                let (tpl, system, user, bos, eos) = job;
                let _ = tx.send(render_template(&tpl, system.as_deref(), &user, &bos, &eos));
            })
            .map_err(|e| tok_err(format!("chat template: cannot start its thread: {e}")))?;
        match rx.recv_timeout(TEMPLATE_MAX_TIME) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(tok_err("chat template: the template engine failed (it panicked)"))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(tok_err(format!(
                "chat template: rendering ran past {} s (a runaway template)",
                TEMPLATE_MAX_TIME.as_secs()
            ))),
        }
    }
}

/// Renders chat template `tpl` for one user message (after an optional system message),
/// under the bounds of [`GgufTokenizer::apply_chat_template`].
fn render_template(tpl: &str, system: Option<&str>, user: &str, bos: &str, eos: &str) -> Result<String> {
    let mut env = minijinja::Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    // Bounded: an instruction budget (nested loops end), format widths (a huge one
    // aborted the process allocating it) and the rendered length (below).
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_unknown_method_callback(|state, value, method, args| {
        if method == "format" {
            if let Some(s) = value.as_str() {
                check_format_widths(s)?;
            }
        }
        contained(|| minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args))
    });
    env.add_filter(
        "format",
        |state: &minijinja::State<'_, '_>, f: minijinja::Value, args: minijinja::value::Rest<minijinja::Value>| {
            if let Some(s) = f.as_str() {
                check_format_widths(s)?;
            }
            contained(|| minijinja::filters::format(state, &f, args))
        },
    );
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", tpl).map_err(|e| tok_err(format!("chat template: {e}")))?;
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(minijinja::context! { role => "system", content => s });
    }
    messages.push(minijinja::context! { role => "user", content => user });
    let mut out = Bounded { bytes: Vec::new(), limit: TEMPLATE_MAX_OUTPUT };
    let rendered = env.get_template("chat").and_then(|t| {
        t.render_captured_to(
            minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => bos,
                eos_token => eos,
            },
            &mut out,
        )
    });
    match rendered {
        Err(_) if out.bytes.len() > TEMPLATE_MAX_OUTPUT => {
            Err(tok_err(format!("chat template: the rendered prompt is past {} MiB", TEMPLATE_MAX_OUTPUT >> 20)))
        }
        Err(e) => Err(tok_err(format!("chat template: {e}"))),
        Ok(_) => String::from_utf8(out.bytes).map_err(|e| tok_err(format!("chat template: {e}"))),
    }
}

/// Longest piece (in bytes) of a SentencePiece vocabulary that merges are derived for:
/// a longer piece is never produced by merging (it can still be a whole special token).
pub const MAX_MERGED_PIECE: usize = 1024;

/// The instruction budget of one chat-template rendering (minijinja's fuel): real
/// templates render a conversation in thousands; a template that loops past this ends in
/// an error.
pub const TEMPLATE_FUEL: u64 = 5_000_000;

/// Longest one chat-template rendering may take (wall clock).
pub const TEMPLATE_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Most bytes a rendered chat template may hold (a prompt past any context vkml loads).
pub const TEMPLATE_MAX_OUTPUT: usize = 16 << 20;

/// Widest field a template's `format` (Python's `str.format`, or the printf-style
/// filter) may ask for.
pub const TEMPLATE_MAX_WIDTH: u64 = 4096;

/// `f()`, with a panic inside the template engine turned into an error: minijinja 2.24's
/// printf-style `format` slices a `%(key)` inside a multi-byte character and panics (a
/// fuzz finding), which must not end the process.
fn contained(
    f: impl FnOnce() -> std::result::Result<minijinja::Value, minijinja::Error>,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, "format string the engine cannot parse"))
    })
}

/// An error if format string `f` asks for a field width or precision past
/// [`TEMPLATE_MAX_WIDTH`] (`{:>1000000000000000}` or `%1000000000s` allocate that much),
/// or has a printf-style `%(key)` with characters outside ASCII after it (which minijinja
/// 2.24's parser slices inside a character, and panics).
fn check_format_widths(f: &str) -> std::result::Result<(), minijinja::Error> {
    if let Some(at) = f.find("%(") {
        if !f[at..].is_ascii() {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                "a printf-style %(key) format with characters outside ASCII",
            ));
        }
    }
    let mut digits = 0u64;
    let mut in_spec = false;
    for c in f.chars() {
        match c {
            '{' | '%' | ':' => {
                in_spec = true;
                digits = 0;
            }
            '}' | ' ' => in_spec = false,
            d if d.is_ascii_digit() && in_spec => {
                digits = digits.saturating_mul(10).saturating_add(u64::from(d) - u64::from('0'));
                if digits > TEMPLATE_MAX_WIDTH {
                    return Err(minijinja::Error::new(
                        minijinja::ErrorKind::InvalidOperation,
                        format!("format width past {TEMPLATE_MAX_WIDTH} in {f:.40?}"),
                    ));
                }
            }
            _ => digits = 0,
        }
    }
    Ok(())
}

/// A writer that refuses to grow past `limit` bytes.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.limit {
            self.bytes.resize(self.limit + 1, 0);
            return Err(std::io::Error::other("rendered output past its limit"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Turns generated ids into text as they arrive: emits only whole characters (a token
/// may end inside a multi-byte UTF-8 character, which byte-level BPE decodes as U+FFFD
/// until the next token completes it). Each step decodes a short window, from the token
/// before the last emission on, rather than the whole history: the text of a window that
/// starts one emission back carries the same leading-space handling as the full text
/// (SentencePiece decoders strip a first token's leading space), so the difference of two
/// windows is the new text (the scheme of candle-examples' `TokenOutputStream`).
#[derive(Debug, Clone, Default)]
pub struct TokenStream {
    ids: Vec<u32>,
    /// Start of the decode window.
    prev: usize,
    /// End of what has been emitted.
    cur: usize,
}

impl TokenStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The text of the window's tokens after what has been emitted, if it ends on a whole
    /// character.
    fn pending(&self, tok: &GgufTokenizer) -> Result<Option<String>> {
        let before = tok.decode(&self.ids[self.prev..self.cur])?;
        let text = tok.decode(&self.ids[self.prev..])?;
        Ok(match text.get(before.len()..) {
            Some(new) if !new.is_empty() && !text.ends_with('\u{fffd}') => Some(new.to_string()),
            _ => None,
        })
    }

    /// Adds a token; returns the text that is now complete, if any.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] from decoding.
    pub fn push(&mut self, tok: &GgufTokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let new = self.pending(tok)?;
        if new.is_some() {
            self.prev = self.cur;
            self.cur = self.ids.len();
        }
        Ok(new)
    }

    /// The text not emitted yet (at the end of generation), whole characters or not.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] from decoding.
    pub fn rest(&mut self, tok: &GgufTokenizer) -> Result<String> {
        let before = tok.decode(&self.ids[self.prev..self.cur])?;
        let text = tok.decode(&self.ids[self.prev..])?;
        let rest = text.get(before.len()..).unwrap_or("").to_string();
        self.prev = self.cur;
        self.cur = self.ids.len();
        Ok(rest)
    }
}

#[cfg(test)]
mod template_bounds {
    use super::*;
    use crate::synth::{synthetic_model, SHAPES};

    fn with_template(t: &str) -> GgufTokenizer {
        let sh = crate::synth::SynthShape { n_layers: 1, vocab: 400, ..SHAPES[0] };
        let f = synthetic_model("llama", &sh, vkml_quant::GgmlType::F32, 1).unwrap();
        let mut tok = GgufTokenizer::from_gguf(&f).unwrap();
        tok.chat_template = Some(t.to_string());
        tok
    }

    /// Hostile templates end in an error naming the bound, within a second or two: nested
    /// loops (fuel), a huge rendering (length), huge format widths (which aborted the
    /// process allocating them).
    #[test]
    fn hostile_templates_are_bounded() {
        for (t, needle) in [
            ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "fuel"),
            ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "past 16 MiB"),
            ("{{ \"{:>1000000000000000}\".format(1) }}", "format width past 4096"),
            ("{{ \"%1000000000000s\"|format(1) }}", "format width past 4096"),
            // A lazily repeated sequence, printed: no fuel or output bound stops the walk
            // (a fuzz finding); the deadline does.
            ("{{ messages * 949749999 }}", "rendering ran past 2 s"),
            // minijinja 2.24's printf parser panics on this (a fuzz finding).
            ("{{ \"1%(000.04fose###\u{6d6}m%%%\"|format(2) }}", "outside ASCII"),
        ] {
            let t0 = std::time::Instant::now();
            let e = with_template(t).apply_chat_template(None, "hi").unwrap_err().to_string();
            assert!(e.contains(needle), "{t}: {e}");
            assert!(t0.elapsed().as_secs() < 3, "{t}: {:?}", t0.elapsed());
        }
        // Ordinary formatting still works.
        let ok = with_template("{{ \"{:>8}|\".format('ab') }}{{ \"%5d|\"|format(42) }}{{ messages[0].content }}");
        assert_eq!(ok.apply_chat_template(None, "hi").unwrap(), "      ab|   42|hi");
    }
}

#[cfg(test)]
mod hostile_vocabulary {
    use super::*;
    use crate::synth::{synthetic_model, SHAPES};
    use vkml_quant::gguf::GgufWriter;

    /// One 2 MB piece in `tokenizer.ggml.tokens` (deriving its merges was quadratic and
    /// took hours) loads in well under a second; the other pieces still merge.
    #[test]
    fn a_huge_piece_loads_in_linear_time() {
        let sh = crate::synth::SynthShape { n_layers: 1, vocab: 400, ..SHAPES[0] };
        let src = synthetic_model("llama", &sh, vkml_quant::GgmlType::F32, 1).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in src.metadata() {
            let v = match (k.as_str(), v) {
                ("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(t))) => {
                    let mut t = t.clone();
                    t[399] = format!("\u{2581}{}", "a".repeat(2_000_000));
                    GgufValue::Array(GgufArray::String(t))
                }
                _ => v.clone(),
            };
            w.push_kv(k.clone(), v);
        }
        for t in src.tensors() {
            w.push_tensor(t.name.clone(), t.ty, t.dims.clone(), src.tensor_data(t).to_vec());
        }
        let f = GgufFile::from_vec(w.to_bytes().unwrap()).unwrap();
        let t0 = std::time::Instant::now();
        let tok = GgufTokenizer::from_gguf(&f).unwrap();
        assert!(t0.elapsed().as_millis() < 1500, "{:?}", t0.elapsed());
        assert_eq!(tok.decode(&tok.encode("ab ab", false).unwrap()).unwrap(), "ab ab");
    }
}
