//! Hyper-parameters from GGUF metadata: typed access to the `{arch}.*` keys of the GGUF
//! spec's "LLM" section ([`Meta`]), and the ones every decoder architecture shares
//! ([`Hparams`]). An architecture's own keys are read in its file under `arch/`.

use vkml_ops::attention;
use vkml_quant::gguf::{GgufFile, GgufValue};

use crate::error::{model_err, Result};

/// The metadata of one GGUF file, read as the keys of its architecture.
#[derive(Debug, Clone, Copy)]
pub struct Meta<'a> {
    /// The file.
    pub file: &'a GgufFile,
    /// `general.architecture`.
    pub arch: &'a str,
}

impl<'a> Meta<'a> {
    /// The file's metadata under its `general.architecture`.
    ///
    /// # Errors
    /// [`crate::Error::Model`] when `general.architecture` is missing or not a string.
    pub fn new(file: &'a GgufFile) -> Result<Meta<'a>> {
        let arch = file
            .get("general.architecture")
            .and_then(GgufValue::as_str)
            .ok_or_else(|| model_err("metadata general.architecture is missing"))?;
        Ok(Meta { file, arch })
    }

    /// `{arch}.{key}`.
    pub fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    /// Whether `{arch}.{key}` is present.
    pub fn has(&self, key: &str) -> bool {
        self.file.get(&self.key(key)).is_some()
    }

    /// `{arch}.{key}` as an unsigned integer, if present.
    ///
    /// # Errors
    /// A value that is not an unsigned integer (or does not fit `usize`).
    pub fn opt_u(&self, key: &str) -> Result<Option<usize>> {
        let k = self.key(key);
        match self.file.get(&k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| model_err(format!("metadata {k} is not an unsigned integer"))),
        }
    }

    /// `{arch}.{key}` as an unsigned integer.
    ///
    /// # Errors
    /// Missing, or not an unsigned integer.
    pub fn req_u(&self, key: &str) -> Result<usize> {
        self.opt_u(key)?.ok_or_else(|| model_err(format!("metadata {} is missing", self.key(key))))
    }

    /// `{arch}.{key}` as a float (f32 or f64 in the file), if present.
    ///
    /// # Errors
    /// A value that is not a float, or is not finite.
    pub fn opt_f(&self, key: &str) -> Result<Option<f32>> {
        let k = self.key(key);
        let v = match self.file.get(&k) {
            None => return Ok(None),
            Some(GgufValue::F32(x)) => *x,
            Some(GgufValue::F64(x)) => *x as f32,
            Some(_) => return Err(model_err(format!("metadata {k} is not a float"))),
        };
        if !v.is_finite() {
            return Err(model_err(format!("metadata {k} is {v}, not a finite number")));
        }
        Ok(Some(v))
    }

    /// `{arch}.{key}` as a float.
    ///
    /// # Errors
    /// Missing, not a float, or not finite.
    pub fn req_f(&self, key: &str) -> Result<f32> {
        self.opt_f(key)?.ok_or_else(|| model_err(format!("metadata {} is missing", self.key(key))))
    }

    /// `{arch}.{key}` as a string, if present.
    ///
    /// # Errors
    /// A value that is not a string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        let k = self.key(key);
        match self.file.get(&k) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| model_err(format!("metadata {k} is not a string"))),
        }
    }

    /// `{arch}.{key}` as a positive float, if present.
    ///
    /// # Errors
    /// Not a float, or not a positive finite number.
    pub fn opt_positive(&self, key: &str) -> Result<Option<f32>> {
        match self.opt_f(key)? {
            Some(x) if x <= 0.0 => Err(model_err(format!("metadata {} is {x}, not a positive number", self.key(key)))),
            v => Ok(v),
        }
    }
}

/// The hyper-parameters every decoder architecture has, from its GGUF keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Hparams {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layers: usize,
    /// `{arch}.embedding_length`.
    pub n_embd: usize,
    /// `{arch}.feed_forward_length`.
    pub n_ff: usize,
    /// `{arch}.attention.head_count`.
    pub n_head: usize,
    /// `{arch}.attention.head_count_kv` (defaults to `n_head`).
    pub n_kv_head: usize,
    /// `{arch}.attention.key_length` (defaults to `n_embd / n_head`).
    pub head_dim: usize,
    /// `{arch}.attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// `{arch}.context_length`: the context the model was trained for.
    pub context_length: usize,
    /// Rows of `token_embd.weight`.
    pub vocab: usize,
}

impl Hparams {
    /// Reads the shared keys and checks them against each other and the token embedding.
    ///
    /// # Errors
    /// [`crate::Error::Model`] for a missing or ill-typed key, heads that do not divide,
    /// a head dim that is odd or past the attention kernels' [`attention::MAX_HEAD_DIM`]
    /// (or a `value_length` other than the key length), a non-positive epsilon, a missing
    /// or misshapen `token_embd.weight`.
    pub fn from_meta(m: &Meta<'_>) -> Result<Hparams> {
        let n_layers = m.req_u("block_count")?;
        let n_embd = m.req_u("embedding_length")?;
        let n_ff = m.req_u("feed_forward_length")?;
        let n_head = m.req_u("attention.head_count")?;
        let n_kv_head = m.opt_u("attention.head_count_kv")?.unwrap_or(n_head);
        if n_layers == 0 || n_embd == 0 || n_ff == 0 {
            return Err(model_err(format!(
                "{} {n_layers}, {} {n_embd}, {} {n_ff}: each must be positive",
                m.key("block_count"),
                m.key("embedding_length"),
                m.key("feed_forward_length")
            )));
        }
        if n_head == 0 || n_kv_head == 0 || !n_head.is_multiple_of(n_kv_head) {
            return Err(model_err(format!(
                "{n_head} heads over {n_kv_head} KV heads: {} must be a positive multiple of {}",
                m.key("attention.head_count"),
                m.key("attention.head_count_kv")
            )));
        }
        let head_dim = match m.opt_u("attention.key_length")? {
            Some(d) => d,
            None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
            None => {
                return Err(model_err(format!(
                    "embedding length {n_embd} is not a multiple of {n_head} heads and {} is missing",
                    m.key("attention.key_length")
                )))
            }
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim > attention::MAX_HEAD_DIM {
            return Err(model_err(format!(
                "head dim {head_dim} ({}): need an even dim of at most {}",
                m.key("attention.key_length"),
                attention::MAX_HEAD_DIM
            )));
        }
        if let Some(v) = m.opt_u("attention.value_length")? {
            if v != head_dim {
                return Err(model_err(format!(
                    "{} {v} differs from the key length {head_dim}: not supported",
                    m.key("attention.value_length")
                )));
            }
        }
        let rms_eps = m.req_f("attention.layer_norm_rms_epsilon")?;
        if rms_eps <= 0.0 {
            return Err(model_err(format!(
                "{} is {rms_eps}, not a positive number",
                m.key("attention.layer_norm_rms_epsilon")
            )));
        }
        let context_length = m.req_u("context_length")?;
        let emb = m
            .file
            .header()
            .tensor("token_embd.weight")
            .ok_or_else(|| model_err("tensor token_embd.weight is missing"))?;
        if emb.row_len() as usize != n_embd {
            return Err(model_err(format!("token_embd.weight rows have {} elements, not {n_embd}", emb.row_len())));
        }
        // The blocks the file has tensors for (`blk.N.*`) must be the blocks it declares.
        let blocks = m
            .file
            .tensors()
            .iter()
            .filter_map(|t| t.name.strip_prefix("blk.")?.split('.').next()?.parse::<usize>().ok())
            .max()
            .map_or(0, |n| n + 1);
        if blocks != n_layers {
            return Err(model_err(format!(
                "{} is {n_layers}, but the file has tensors for {blocks} blocks",
                m.key("block_count")
            )));
        }
        // llama.cpp takes the vocabulary from the token list and requires the embedding
        // rows to match; a shorter list would drop tokens from the output.
        if let Some(vkml_quant::gguf::GgufValue::Array(tokens)) = m.file.get("tokenizer.ggml.tokens") {
            let n = tokens.len();
            if n != emb.n_rows() as usize {
                return Err(model_err(format!(
                    "tokenizer.ggml.tokens lists {n} tokens, token_embd.weight has {} rows",
                    emb.n_rows()
                )));
            }
        }
        Ok(Hparams {
            arch: m.arch.to_string(),
            n_layers,
            n_embd,
            n_ff,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps,
            context_length,
            vocab: emb.n_rows() as usize,
        })
    }
}

/// The mixture-of-experts keys of a MoE architecture (llama.cpp's loader: `n_expert`,
/// `n_expert_used`, `n_ff_exp`, `n_ff_shexp`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeHparams {
    /// `{arch}.expert_count`.
    pub n_expert: usize,
    /// `{arch}.expert_used_count`: experts per token.
    pub n_expert_used: usize,
    /// `{arch}.expert_feed_forward_length` (defaults to `n_ff / n_expert_used`, as llama.cpp).
    pub n_ff_exp: usize,
    /// `{arch}.expert_shared_feed_forward_length`: the shared expert's length where the
    /// file has one (Qwen2-MoE; defaults to `n_ff`, as llama.cpp).
    pub n_ff_shexp: usize,
}

impl MoeHparams {
    /// Reads and checks the keys (`n_ff`: the dense feed-forward length).
    ///
    /// # Errors
    /// [`crate::Error::Model`] naming the key for a missing count, no experts or more than
    /// the routing kernel's [`vkml_ops::moe::MAX_EXPERTS`], experts per token outside 1 ..=
    /// [`vkml_ops::moe::MAX_USED`] or past the experts, a zero expert length.
    pub fn from_meta(m: &Meta<'_>, n_ff: usize) -> Result<MoeHparams> {
        let n_expert = m.req_u("expert_count")?;
        let n_expert_used = m.req_u("expert_used_count")?;
        if n_expert == 0 || n_expert > vkml_ops::moe::MAX_EXPERTS {
            return Err(model_err(format!(
                "{} is {n_expert}: 1 ..= {} experts are supported",
                m.key("expert_count"),
                vkml_ops::moe::MAX_EXPERTS
            )));
        }
        if n_expert_used == 0 || n_expert_used > n_expert.min(vkml_ops::moe::MAX_USED) {
            return Err(model_err(format!(
                "{} is {n_expert_used}: 1 ..= {} of the {n_expert} experts per token are supported",
                m.key("expert_used_count"),
                n_expert.min(vkml_ops::moe::MAX_USED)
            )));
        }
        let n_ff_exp = m.opt_u("expert_feed_forward_length")?.unwrap_or(n_ff / n_expert_used);
        if n_ff_exp == 0 {
            return Err(model_err(format!("{} is 0", m.key("expert_feed_forward_length"))));
        }
        let n_ff_shexp = m.opt_u("expert_shared_feed_forward_length")?.unwrap_or(n_ff);
        if n_ff_shexp == 0 {
            return Err(model_err(format!("{} is 0", m.key("expert_shared_feed_forward_length"))));
        }
        Ok(MoeHparams { n_expert, n_expert_used, n_ff_exp, n_ff_shexp })
    }
}
