//! The tokenizer a GGUF file carries (`tokenizer.ggml.*` keys, GGUF spec "Tokenizer"
//! section), rebuilt as a [`tokenizers::Tokenizer`], and its chat template
//! (`tokenizer.chat_template`, Jinja) rendered with minijinja.
//!
//! - `tokenizer.ggml.model = "gpt2"`: byte-level BPE from `tokens` and `merges`; the
//!   pre-tokenizer follows `tokenizer.ggml.pre` as llama.cpp's `llama-vocab.cpp` maps it
//!   (`default`/`gpt2`: GPT-2's split; `smollm`: single digits, then GPT-2's split;
//!   `llama-bpe`/`llama3`: Llama 3's split; `qwen2`: Llama 3's with single digits;
//!   `gpt-4o`: o200k's split, as gpt-oss's vocabulary uses it).
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

use crate::chat_template::{self, ChatMessage};
use crate::error::{Error, Result};

/// Qwen2's pre-tokenizer split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`): Llama 3's with
/// single digits.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// o200k's pre-tokenizer split (the `tokenizer.json` pattern of gpt-4o and gpt-oss;
/// llama.cpp `LLAMA_VOCAB_PRE_TYPE_GPT4O`): words split before capitals (a run of upper
/// case, then lower case), contractions kept with their word, digits in groups of up to 3.
const GPT4O_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// Llama 3's pre-tokenizer split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_LLAMA3`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

/// A BPE model over `vocab` and `merges`, without `tokenizers`' word cache: in tokenizers
/// 0.23 that cache is thread-local and keyed by the BPE instance, and entries of an
/// instance stay after it (or a clone of it) is dropped, so every tokenizer built, cloned
/// or used on a new thread left up to 10 000 cached words behind for the life of the
/// thread (a fuzz run grew by about 650 bytes per load). Uncached, encoding merges every
/// word afresh: it costs nothing measurable next to a model's forward pass.
fn bpe_builder(vocab: &HashMap<String, u32>, merges: Vec<(String, String)>) -> tokenizers::models::bpe::BpeBuilder {
    BPE::builder()
        .vocab_and_merges(
            vocab.iter().map(|(k, v)| (k.clone(), *v)).collect::<tokenizers::models::bpe::Vocab>(),
            merges,
        )
        .cache_capacity(0)
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
    /// `<end_of_turn>`, `<|end|>`, `<|endoftext|>`, `<|return|>` and `<|call|>` where the
    /// vocabulary has them; but not `<|end|>` in a vocabulary with both `<|return|>` and
    /// `<|call|>` (gpt-oss's o200k_harmony, where `<|end|>` closes a channel message and
    /// the final answer follows; llama.cpp's rule).
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

/// The id of token `s` in `tokens` (its first, where it repeats).
fn token_id(tokens: &[String], s: &str) -> Option<u32> {
    tokens.iter().position(|t| t == s).map(|i| i as u32)
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
                let bpe = bpe_builder(&vocab, merges).build().map_err(tok_err)?;
                let mut t = tokenizers::Tokenizer::new(bpe);
                let pre = f.get("tokenizer.ggml.pre").and_then(GgufValue::as_str).unwrap_or("default");
                let byte_level = |regex: bool| PreTokenizerWrapper::from(ByteLevel::new(false, false, regex));
                let pre_tok: PreTokenizerWrapper = match pre {
                    "default" | "gpt2" | "gpt-2" => byte_level(true),
                    "smollm" => PreSequence::new(vec![Digits::new(true).into(), byte_level(true)]).into(),
                    "llama-bpe" | "llama3" | "qwen2" | "gpt-4o" => {
                        let re = match pre {
                            "qwen2" => QWEN2_SPLIT,
                            "gpt-4o" => GPT4O_SPLIT,
                            _ => LLAMA3_SPLIT,
                        };
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
                        "gpt2 pre-tokenizer {other:?} is not supported (supported: default, gpt2, smollm, llama-bpe, qwen2, gpt-4o)"
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
                let mut b = bpe_builder(&vocab, merges).byte_fallback(true).fuse_unk(true);
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
        let find = |s: &str| token_id(tokens, s);
        let harmony = find("<|return|>").is_some() && find("<|call|>").is_some();
        let mut stop: Vec<u32> = eos.into_iter().collect();
        for s in ["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|return|>", "<|call|>"] {
            if let Some(i) = find(s) {
                if !stop.contains(&i) {
                    stop.push(i);
                }
            }
        }
        if harmony {
            let end = find("<|end|>");
            stop.retain(|&i| Some(i) != end);
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

    /// The id of the vocabulary's token `s` (its first, where it repeats).
    pub fn id_of(&self, s: &str) -> Option<u32> {
        token_id(&self.tokens, s)
    }

    /// The token's string as stored in the vocabulary.
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Renders the chat template for one user message (optionally after a system
    /// message) with `add_generation_prompt = true`: [`GgufTokenizer::render_chat`].
    ///
    /// # Errors
    /// As [`GgufTokenizer::render_chat`].
    pub fn apply_chat_template(&self, system: Option<&str>, user: &str) -> Result<String> {
        let mut messages = Vec::with_capacity(2);
        if let Some(s) = system {
            messages.push(ChatMessage::new("system", s));
        }
        messages.push(ChatMessage::new("user", user));
        self.render_chat(&messages, true)
    }

    /// Renders `tokenizer.chat_template` for `messages` with [`chat_template::render`]
    /// (bounded in instructions, output and time), as `transformers`'
    /// `apply_chat_template` does, less a leading BOS text where [`GgufTokenizer::encode`]
    /// adds BOS. A file without a template whose vocabulary has Gemma's
    /// `<start_of_turn>` and `<end_of_turn>` gets llama.cpp's built-in Gemma template
    /// ([`chat_template::render_gemma`]).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] when the model has no chat template, or as
    /// [`chat_template::render`].
    pub fn render_chat(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let has = |t: &str| self.tokens.iter().any(|x| x == t);
        let Some(template) = self.chat_template.as_deref() else {
            if has("<start_of_turn>") && has("<end_of_turn>") {
                return Ok(chat_template::render_gemma(messages, add_generation_prompt));
            }
            return Err(tok_err("the model has no tokenizer.chat_template; run without --chat"));
        };
        let tok = |i: Option<u32>| i.and_then(|i| self.token(i)).unwrap_or("");
        let text = chat_template::render(template, messages, tok(self.bos), tok(self.eos), add_generation_prompt)?;
        // Templates print `bos_token` themselves; where encoding adds BOS, that one goes
        // (as llama.cpp's common_chat_templates_apply strips it), or the prompt gets two.
        let bos = tok(self.bos);
        Ok(match text.strip_prefix(bos) {
            Some(rest) if self.add_bos && !bos.is_empty() => rest.to_string(),
            _ => text,
        })
    }
}

/// Longest piece (in bytes) of a SentencePiece vocabulary that merges are derived for:
/// a longer piece is never produced by merging (it can still be a whole special token).
pub const MAX_MERGED_PIECE: usize = 1024;

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
        let Some(GgufValue::Array(GgufArray::String(tokens))) = src.get("tokenizer.ggml.tokens") else {
            panic!("the synthetic model has a token list")
        };
        let mut tokens = tokens.clone();
        tokens[399] = format!("\u{2581}{}", "a".repeat(2_000_000));
        let mut w = GgufWriter::from_file(&src);
        w.set_kv("tokenizer.ggml.tokens", Some(GgufValue::Array(GgufArray::String(tokens))));
        let f = GgufFile::from_vec(w.to_bytes().unwrap()).unwrap();
        let t0 = std::time::Instant::now();
        let tok = GgufTokenizer::from_gguf(&f).unwrap();
        assert!(t0.elapsed().as_millis() < 1500, "{:?}", t0.elapsed());
        assert_eq!(tok.decode(&tok.encode("ab ab", false).unwrap()).unwrap(), "ab ab");
    }
}

#[cfg(test)]
mod harmony {
    use super::*;
    use vkml_quant::gguf::GgufWriter;

    /// A byte-level vocabulary of letters and digits, merges `o W` and `3 4`, the Harmony
    /// specials, as a GGUF of `gpt2` model with pre-tokenizer `pre`.
    fn vocab(pre: &str) -> GgufTokenizer {
        let mut tokens: Vec<String> = "HelloWrd12345".chars().map(String::from).collect();
        tokens.sort();
        tokens.dedup();
        tokens.extend(["oW", "34", "<|start|>", "<|end|>", "<|return|>", "<|call|>"].map(String::from));
        let types: Vec<i32> = tokens.iter().map(|t| if t.starts_with("<|") { 3 } else { 1 }).collect();
        let mut w = GgufWriter::new();
        w.push_kv("tokenizer.ggml.model", GgufValue::String("gpt2".into()));
        w.push_kv("tokenizer.ggml.pre", GgufValue::String(pre.into()));
        w.push_kv("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(tokens)));
        w.push_kv("tokenizer.ggml.token_type", GgufValue::Array(GgufArray::I32(types)));
        w.push_kv("tokenizer.ggml.merges", GgufValue::Array(GgufArray::String(vec!["o W".into(), "3 4".into()])));
        GgufTokenizer::from_gguf(&GgufFile::from_vec(w.to_bytes().unwrap()).unwrap()).unwrap()
    }

    /// gpt-4o's split keeps a merge from crossing a capital or a group of three digits
    /// (GPT-2's does not split there); `<|return|>` and `<|call|>` stop, `<|end|>` does not.
    #[test]
    fn gpt4o_split_and_harmony_stops() {
        let (o200k, gpt2) = (vocab("gpt-4o"), vocab("gpt2"));
        let id = |t: &GgufTokenizer, s: &str| t.tokens.iter().position(|x| x == s).unwrap() as u32;
        for text in ["HelloWorld", "12345"] {
            let (a, b) = (o200k.encode(text, false).unwrap(), gpt2.encode(text, false).unwrap());
            assert!(!a.contains(&id(&o200k, "oW")) && !a.contains(&id(&o200k, "34")), "{text}: {a:?}");
            assert!(b.contains(&id(&gpt2, "oW")) || b.contains(&id(&gpt2, "34")), "{text}: {b:?}");
            assert_eq!(o200k.decode(&a).unwrap(), text);
        }
        let stops: Vec<u32> = ["<|return|>", "<|call|>"].iter().map(|s| id(&o200k, s)).collect();
        assert_eq!(o200k.stop, stops);
    }
}
