//! The decode runner: drives any [`Model`] over a KV cache, one chunk of tokens per
//! submission, recording the next decode step ahead on a deferred device (Vulkan) while
//! the current one runs.

use std::time::Instant;

use candle_core::backend::BackendDevice;
use candle_core::Layout;
use vkml_candle::front::Tensor;
use vkml_candle::vulkan::VulkanStorage;
use vkml_quant::gguf::GgufFile;

use crate::arch::{self, Model};
use crate::config::Hparams;
use crate::device_map::{split_layers, DeviceMap};
use crate::error::{model_err, Error, Result};
use crate::sampling::TokenChoice;
use crate::storage::{DeviceChoice, ModelStorage, WeightFormat};

mod replay;
use replay::Replayed;

/// The longest context vkml loads a model for: 2^20 positions (Qwen's YaRN-extended
/// 1M). Its rope tables alone are then 1 GiB at a head dim of 256.
pub const MAX_CONTEXT: usize = 1 << 20;

/// Bytes a model of `hp` needs on its device for a context of `ctx` positions: the
/// weights as stored in `file`, K and V caches of every layer (f16, whole context; a
/// sliding-window layer's ring needs less) and two rope tables (cos, sin; f32); `None`
/// where the sum overflows.
fn bytes_needed(hp: &Hparams, file: &GgufFile, ctx: usize) -> Option<(u64, u64)> {
    let weights = file.tensors().iter().try_fold(0u64, |a, t| a.checked_add(t.n_bytes))?;
    let (kv_layer, rope) = kv_and_rope_bytes(hp, ctx)?;
    Some((weights, kv_layer.checked_mul(hp.n_layers as u64)?.checked_add(rope)?))
}

/// Bytes of one layer's K and V caches (f16, `ctx` positions) and of the two rope tables
/// (cos, sin; f32) for a context of `ctx` positions; `None` where they overflow.
fn kv_and_rope_bytes(hp: &Hparams, ctx: usize) -> Option<(u64, u64)> {
    let kv = (2 * 2 * hp.n_kv_head as u64).checked_mul(hp.head_dim as u64)?.checked_mul(ctx as u64)?;
    let rope = (ctx as u64).checked_mul(hp.head_dim as u64 / 2 * 4 * 2 * 2)?;
    Some((kv, rope))
}

/// `b` bytes in GiB, for messages.
fn gib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 30)
}

/// The context `opts` asks for (the model's, at most 4096, by default), checked against
/// [`MAX_CONTEXT`].
fn context(hp: &Hparams, opts: LoadOptions) -> Result<usize> {
    let ctx = opts.ctx.unwrap_or(hp.context_length.min(4096)).max(1);
    if ctx > MAX_CONTEXT {
        return Err(model_err(format!(
            "a context of {ctx} positions is past the {MAX_CONTEXT} vkml loads a model for"
        )));
    }
    Ok(ctx)
}

/// Bytes each of `n_dev` devices holds when layer `i` sits on device `layer[i]`: its
/// layers' tensors (`blk.{i}.*`) and KV caches, rope tables on each, the token embedding
/// on the first, every other tensor (output norm and projection) on the last, and there
/// the token embedding again where the head is tied to it. Saturating sums (a size that
/// overflows counts as `u64::MAX`).
fn split_bytes(hp: &Hparams, file: &GgufFile, ctx: usize, layer: &[usize], n_dev: usize) -> Vec<u64> {
    let last = n_dev - 1;
    let (kv, rope) = kv_and_rope_bytes(hp, ctx).unwrap_or((u64::MAX, u64::MAX));
    let mut need = vec![rope; n_dev];
    for &d in layer {
        need[d] = need[d].saturating_add(kv);
    }
    let tied = file.header().tensor("output.weight").is_none();
    for t in file.tensors() {
        let block = t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|i| i.parse::<usize>().ok());
        let d = match block {
            Some(i) => layer.get(i).copied().unwrap_or(last),
            None if t.name == "token_embd.weight" => {
                if tied {
                    need[last] = need[last].saturating_add(t.n_bytes);
                }
                0
            }
            None => last,
        };
        need[d] = need[d].saturating_add(t.n_bytes);
    }
    need
}

/// How to load a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Positions of the KV cache; `None`: the model's context length, at most 4096.
    pub ctx: Option<usize>,
    /// Most tokens one [`Runner::forward`] call processes in one pass; longer inputs run
    /// in chunks of this size.
    pub max_batch: usize,
    /// How weight matrices are kept where the backend offers a choice (candle's CPU):
    /// dequantized (the default, the oracle) or in their GGML blocks.
    pub weights: WeightFormat,
    /// On a layer split over several devices ([`Runner::load_split`]), the tokens of
    /// one micro-batch: a chunk runs as micro-batches submitted in turn, so that the
    /// first device runs batch i + 1 while the next runs batch i (llama.cpp's pipeline
    /// parallelism). `None`: half of `max_batch` (rounded up), at most 256 (on two H200s
    /// a 512-token prompt of llama-8b ran 14 % faster than on one in halves, 6 % in
    /// quarters, 37 % slower in eighths). One device runs whole chunks.
    pub micro_batch: Option<usize>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { ctx: None, max_batch: 512, weights: WeightFormat::Dequantized, micro_batch: None }
    }
}

/// A decode step recorded ahead on a deferred device, waiting for its token id.
struct Pending<S: ModelStorage> {
    pos: usize,
    ids: Tensor<S>,
    logits: Tensor<S>,
    /// [`ModelStorage::submissions`] right after recording: if it moved, the step has
    /// already run (with a stale id) and its logits are not this position's.
    submissions: u64,
}

/// A decode step submitted on the device's own choice ([`Runner::forward_choose`]), whose
/// input the host learns by reading the step before.
struct Greedy<S: ModelStorage> {
    /// Position of the step's token.
    pos: usize,
    /// How the step chooses its next token.
    how: TokenChoice,
    /// The token the step runs (the choice of the step before, once read).
    input: u32,
    /// The step's own choice, its logits' sum, and the choice as the next step's input.
    choice: DeviceChoice<S>,
}

/// The choice of the step at `pos` (`chosen`, `sums` of its [`DeviceChoice`]), after
/// waiting for the step; an error where its logits are not all finite (or so large that
/// their sum overflows f32: a model that broke as surely).
fn read_choice<S: ModelStorage>(chosen: &S, sums: &S, pos: usize) -> Result<u32> {
    let one = Layout::contiguous(1);
    let sum = sums.read_f32(&one)?[0];
    if !sum.is_finite() {
        return Err(Error::Sampling(format!(
            "the logits at position {pos} are not all finite (their sum is {sum}): the model's output overflowed"
        )));
    }
    Ok(chosen.read_u32(&one)?[0])
}

/// Where the host time of the last [`Runner::forward`] chunk went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepProfile {
    /// Recording the step on the host, seconds (0 when it was recorded ahead, while the
    /// previous step ran).
    pub record_s: f64,
    /// Recording the next decode step ahead, while the device runs this one, seconds.
    pub ahead_s: f64,
    /// Submitting, waiting for the device and reading the logits back, seconds (less
    /// `ahead_s`).
    pub wait_s: f64,
}

impl std::ops::AddAssign for StepProfile {
    /// Sums each time (a benchmark's total over many steps).
    fn add_assign(&mut self, o: StepProfile) {
        self.record_s += o.record_s;
        self.ahead_s += o.ahead_s;
        self.wait_s += o.wait_s;
    }
}

/// A model of any architecture ([`arch::load`]) with its KV cache and position, on any
/// [`ModelStorage`] (default: Vulkan).
pub struct Runner<S: ModelStorage = VulkanStorage> {
    devs: DeviceMap<S>,
    model: Box<dyn Model<S>>,
    ctx: usize,
    max_batch: usize,
    /// Tokens per pass: `max_batch` on one device, the micro-batch on a split.
    pass: usize,
    pos: usize,
    pending: Option<Pending<S>>,
    /// The step [`Runner::forward_choose`] submitted ahead.
    greedy: Option<Greedy<S>>,
    /// The decode step [`Runner::forward_choose`] replays, where the device replays.
    replay: Option<Box<Replayed<S>>>,
    profile: StepProfile,
}

impl<S: ModelStorage> std::fmt::Debug for Runner<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runner({:?}, ctx {}, at {})", self.model, self.ctx, self.pos)
    }
}

impl<S: ModelStorage> Runner<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Loads the GGUF model `file` onto `dev` ([`arch::load`] picks the architecture),
    /// calling `progress(done, total)` (in bytes of tensor data) as weights are uploaded.
    ///
    /// # Errors
    /// [`Error::Model`] for unsupported or inconsistent models and missing or misshapen
    /// tensors (see [`arch::load`]), and for a model and context that do not fit the
    /// device's memory budget; [`Error::Candle`] for tensor types without kernels
    /// on the backend, tensors past the device's limits and device errors (out of device
    /// memory names the size).
    pub fn load(
        dev: &S::Device,
        file: &GgufFile,
        opts: LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        let hp = arch::hparams(file)?;
        let ctx = context(&hp, opts)?;
        match (bytes_needed(&hp, file, ctx), S::memory_budget(dev)) {
            (None, _) => return Err(model_err(format!("the memory a context of {ctx} positions needs overflows"))),
            (Some((weights, per_ctx)), Some(budget)) if weights.saturating_add(per_ctx) > budget => {
                return Err(model_err(format!(
                    "{:.2} GiB of weights and {:.2} GiB of KV cache and rope tables for a context of {ctx} positions \
                     exceed the device's {:.2} GiB (a smaller context needs less)",
                    gib(weights),
                    gib(per_ctx),
                    gib(budget)
                )))
            }
            _ => {}
        }
        Self::load_on(DeviceMap::single(dev), file, ctx, opts, progress)
    }

    /// Loads `file` split by layers over `devices` (llama.cpp's `--split-mode layer`): the
    /// embedding on the first device, the output head on the last, layer `i` on the
    /// device [`split_layers`] gives it for `shares` (one per device, any scale;
    /// llama.cpp's `--tensor-split`), or, without shares, for each device's memory budget
    /// ([`ModelStorage::memory_budget`]; equal shares where the backend knows none). The
    /// hidden state crosses between devices once per boundary and pass; on a deferred
    /// backend each device records and submits its own work. One device is
    /// [`Runner::load`].
    ///
    /// # Errors
    /// As [`Runner::load`]; [`Error::Model`] for no devices, a device given twice, shares
    /// that are not one per device, negative, not finite or all zero, and a device whose layers (with their KV caches and rope
    /// tables, and the embedding or the head) exceed its memory budget, naming it. An
    /// error on one device names it; the devices already loaded are released.
    pub fn load_split(
        devices: &[S::Device],
        shares: Option<&[f64]>,
        file: &GgufFile,
        opts: LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        match devices {
            [] => return Err(model_err("a layer split needs at least one device")),
            [one] if shares.is_none_or(|s| s.len() == 1) => {
                if let Some(s) = shares {
                    split_layers(1, s)?;
                }
                return Self::load(one, file, opts, progress);
            }
            _ => {}
        }
        let hp = arch::hparams(file)?;
        let ctx = context(&hp, opts)?;
        let budgets: Vec<Option<u64>> = devices.iter().map(S::memory_budget).collect();
        let shares: Vec<f64> = match shares {
            Some(s) if s.len() != devices.len() => {
                return Err(model_err(format!("{} split shares for {} devices", s.len(), devices.len())))
            }
            Some(s) => s.to_vec(),
            None => budgets.iter().map(|b| b.map_or(1.0, |b| b as f64)).collect(),
        };
        let layer = split_layers(hp.n_layers, &shares)?;
        let need = split_bytes(&hp, file, ctx, &layer, devices.len());
        for (d, (dev, (&need, budget))) in devices.iter().zip(need.iter().zip(&budgets)).enumerate() {
            if let Some(budget) = budget.filter(|&b| need > b) {
                let n = layer.iter().filter(|&&x| x == d).count();
                return Err(model_err(format!(
                    "device {d} ({dev:?}) would hold {:.2} GiB ({n} layers with their KV caches for a context of \
                     {ctx} positions{}{}) but has {:.2} GiB: give it a smaller share, add devices or use a smaller \
                     context",
                    gib(need),
                    if d == 0 { ", the token embedding" } else { "" },
                    if d + 1 == devices.len() { ", the output head" } else { "" },
                    gib(budget),
                )));
            }
        }
        Self::load_on(DeviceMap::new(devices.to_vec(), layer)?, file, ctx, opts, progress)
    }

    /// Loads onto `devs`, budgets already checked.
    fn load_on(
        devs: DeviceMap<S>,
        file: &GgufFile,
        ctx: usize,
        opts: LoadOptions,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Self> {
        let max_batch = opts.max_batch.max(1);
        let model = arch::load(&devs, file, arch::Sizes { ctx, max_batch, weights: opts.weights }, progress)?;
        // Stacking copies are recorded on deferred devices; finish them here, so that the
        // load time includes them.
        for d in devs.devices() {
            d.synchronize()?;
        }
        let pass = if devs.is_split() {
            opts.micro_batch.unwrap_or(max_batch.div_ceil(2).min(256)).clamp(1, max_batch)
        } else {
            max_batch
        };
        Ok(Runner {
            devs,
            model,
            ctx,
            max_batch,
            pass,
            pos: 0,
            pending: None,
            greedy: None,
            replay: None,
            profile: StepProfile::default(),
        })
    }

    /// The shared hyper-parameters.
    pub fn hparams(&self) -> &Hparams {
        self.model.hparams()
    }

    /// The model.
    pub fn model(&self) -> &dyn Model<S> {
        self.model.as_ref()
    }

    /// Positions the KV cache holds.
    pub fn context(&self) -> usize {
        self.ctx
    }

    /// Tokens in the KV cache: the position the next token gets.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The (first) device: where token ids go.
    pub fn device(&self) -> &S::Device {
        self.devs.first()
    }

    /// Every device and the device of each layer.
    pub fn devices(&self) -> &DeviceMap<S> {
        &self.devs
    }

    /// The decode step recorded ahead, where it is this position's and has not run yet
    /// (no submission since it was recorded); dropped otherwise.
    fn take_pending(&mut self) -> Option<Pending<S>> {
        let p = self.pending.take()?;
        (p.pos == self.pos && p.submissions == self.submissions()).then_some(p)
    }

    /// Submissions so far, over every device.
    fn submissions(&self) -> u64 {
        self.devs.devices().iter().map(S::submissions).sum()
    }

    /// Forgets the decode steps [`Runner::forward_choose`] submitted ahead: they run (or
    /// ran), and the positions they wrote are overwritten before any step reads them.
    fn drop_ahead(&mut self) {
        self.greedy = None;
        if let Some(r) = &mut self.replay {
            r.ahead = None;
        }
    }

    /// Submits what each device recorded, in pipeline order (each waits, on the host, for
    /// the values it takes from the one before; see [`ModelStorage::to_device`]).
    fn submit(&self) -> Result<()> {
        for d in self.devs.devices() {
            S::submit(d)?;
        }
        Ok(())
    }

    /// Host timings of the last chunk run.
    pub fn last_step(&self) -> StepProfile {
        self.profile
    }

    /// Empties the KV cache (the next token is at position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.drop_ahead();
    }

    /// Cuts the KV cache back to its first `n` positions (the next token is at `n`), so
    /// that a prompt sharing those tokens with what the cache holds runs only the rest
    /// (a chat's next turn). Returns false, leaving the cache as it is, where it cannot:
    /// `n` past [`Runner::position`], or a sliding-window layer's ring of slots has
    /// already overwritten keys the positions from `n` on would attend to. With a ring of
    /// `r = window + max_batch - 1` slots, cutting from position `p` back to `n` keeps
    /// every key such a position reads when `p < r` or `p - n < max_batch` (the step
    /// recorded ahead at `p`, which still runs, writes the slot of key `p - r`).
    pub fn truncate(&mut self, n: usize) -> bool {
        let p = self.pos;
        let ok = n <= p && self.model.kv_ring().is_none_or(|r| p < r || p - n < self.max_batch);
        if ok {
            self.pos = n;
            self.drop_ahead();
        }
        ok
    }

    /// The input checks of a forward call: at least one token, ids inside the
    /// vocabulary, positions inside the cache.
    fn check_input(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.hparams().vocab;
        if tokens.is_empty() {
            return Err(model_err("forward needs at least one token"));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(model_err(format!("token id {bad} is past the vocabulary of {vocab}")));
        }
        if self.pos + tokens.len() > self.ctx {
            return Err(Error::Context { tokens: self.pos + tokens.len(), ctx: self.ctx });
        }
        Ok(())
    }

    /// Runs `tokens` at positions `position() ..`, appending them to the KV cache, and
    /// returns the logits (f32, `vocab` per token) of the last token, or of every token
    /// with `all_logits`. Inputs longer than the batch run in chunks (on a layer split, in
    /// micro-batches: [`LoadOptions::micro_batch`]), each one submission per device; the
    /// host waits for the logits only. On a deferred device (Vulkan), while the last chunk runs, the
    /// decode step at the next position is recorded ahead, so a following one-token call
    /// only writes its id and submits.
    ///
    /// # Errors
    /// [`Error::Context`] when the cache cannot take the tokens; [`Error::Model`] for an
    /// empty input or a token id past the vocabulary; kernel and device errors.
    pub fn forward(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>> {
        self.run(tokens, all_logits, true)
    }

    /// [`Runner::forward`] of a prompt, returning the last token's logits, without
    /// recording the next decode step ahead: what the prompt alone costs (llama-bench's
    /// `ppN`). A decode step that follows is recorded when it is called.
    ///
    /// # Errors
    /// As [`Runner::forward`].
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        self.run(tokens, false, false)
    }

    /// [`Runner::forward`], recording the next step ahead after the last chunk where
    /// `ahead` holds.
    fn run(&mut self, tokens: &[u32], all_logits: bool, ahead: bool) -> Result<Vec<f32>> {
        self.check_input(tokens)?;
        // A step run ahead on the device's choice has run; its K and V at this position are
        // overwritten by these tokens.
        self.drop_ahead();
        let mut out = Vec::new();
        let n_chunks = tokens.len().div_ceil(self.pass);
        for (i, chunk) in tokens.chunks(self.pass).enumerate() {
            let last = i + 1 == n_chunks;
            if let Some(l) = self.run_chunk(chunk, all_logits, all_logits || last, last && ahead)? {
                out.extend_from_slice(&l);
            }
        }
        Ok(out)
    }

    /// Runs `token` at [`Runner::position`] and returns the index of its largest logit
    /// (the first of equal ones, as candle's `argmax`; greedy decoding), chosen on the
    /// device: [`Runner::forward_choose`] with [`TokenChoice::Greedy`].
    ///
    /// # Errors
    /// As [`Runner::forward_choose`].
    pub fn forward_greedy(&mut self, token: u32) -> Result<u32> {
        self.forward_choose(token, &TokenChoice::Greedy)
    }

    /// Runs `token` at [`Runner::position`] and returns the next token as `how` chooses it
    /// from the logits: on a deferred device (Vulkan) the device chooses it
    /// ([`ModelStorage::choose_ids`], a draw with counter = this position) and only the
    /// index is read back; the step at the next position is submitted before the host
    /// reads it, with the device's choice as its input, so the device does not wait for
    /// the host between tokens; a following call with that token (and the same `how`)
    /// finds its step running. (On a layer split the choice travels back to the first
    /// device through the host, which then waits for each step before submitting the
    /// next: the devices do not overlap in decode.) A call with another token or choice,
    /// or any other call, leaves that step's keys and values at the next position to be
    /// overwritten (as a stale step recorded ahead, [`Runner::forward`]). On one device
    /// that replays ([`ModelStorage::replays`]: Vulkan, except while profiling) the step is
    /// recorded once (again when `how` changes) and replayed at every position: the host
    /// writes the position and submits, no step is recorded per token. On a backend that is not
    /// deferred it is [`Runner::forward`] and [`crate::sampling::choose_host`] (the same draw on the CPU).
    ///
    /// # Errors
    /// As [`Runner::forward`]; [`Error::Sampling`] where the logits are not all finite;
    /// [`Error::Candle`] for sampling settings out of range.
    pub fn forward_choose(&mut self, token: u32, how: &TokenChoice) -> Result<u32> {
        if !S::is_deferred(self.devs.first()) {
            let pos = self.pos;
            let l = self.forward(&[token], false)?;
            return crate::sampling::choose_host(&l, how, pos as u64, 0);
        }
        self.check_input(&[token])?;
        if self.replays() {
            return self.forward_choose_replayed(token, how);
        }
        let t0 = Instant::now();
        let mut record_s = 0.0;
        // This position's step: already submitted by the call before (it ran on the choice
        // this token is), else the step recorded ahead (its id written now), else a new one.
        let current = match self.greedy.take() {
            Some(g) if g.pos == self.pos && g.input == token && g.how == *how => g,
            _ => {
                let logits = match self.take_pending() {
                    Some(p) => {
                        p.ids.storage().write_u32(&[token])?;
                        p.logits
                    }
                    _ => {
                        let ids = Tensor::from_slice(&[token], 1, self.devs.first())?;
                        self.step(&ids, self.pos, false, true)?.expect("logits wanted")
                    }
                };
                let choice =
                    logits.storage().choose_ids(logits.layout(), self.devs.first(), how, self.pos as u64, None)?;
                self.submit()?;
                record_s = t0.elapsed().as_secs_f64();
                Greedy { pos: self.pos, how: *how, input: token, choice }
            }
        };
        self.pending = None;
        self.pos += 1;
        // The next step, on the device's choice, submitted before the host reads it.
        let a = Instant::now();
        let mut next = None;
        let Greedy { pos, choice: DeviceChoice { ids, chosen, sums }, .. } = current;
        if self.pos < self.ctx {
            let ids = Tensor::from_storage(ids, 1);
            let logits = self.step(&ids, self.pos, false, true)?.expect("logits wanted");
            let choice = logits.storage().choose_ids(logits.layout(), self.devs.first(), how, self.pos as u64, None)?;
            self.submit()?;
            next = Some(Greedy { pos: self.pos, how: *how, input: 0, choice });
        }
        let ahead_s = a.elapsed().as_secs_f64();
        let w = Instant::now();
        let chosen = read_choice(&chosen, &sums, pos)?;
        self.greedy = next.map(|g| Greedy { input: chosen, ..g });
        self.profile = StepProfile { record_s, ahead_s, wait_s: w.elapsed().as_secs_f64() };
        Ok(chosen)
    }

    /// Runs one chunk: records it (unless it is the decode step recorded ahead, whose id
    /// is then written), submits; then, with `record_next` on a deferred device, records
    /// the next decode step while the device runs this one; then reads the logits.
    ///
    /// A step recorded ahead that is not used (the caller reset the cache or passed more
    /// than one token) still runs, at the next submission, with a stale id: it writes
    /// K and V at a position that the next step to reach it overwrites before any step
    /// reads it, and its logits are dropped.
    fn run_chunk(
        &mut self,
        tokens: &[u32],
        all_logits: bool,
        want: bool,
        record_next: bool,
    ) -> Result<Option<Vec<f32>>> {
        let t = tokens.len();
        let t0 = Instant::now();
        let reusable = t == 1 && want && !all_logits;
        let mut record_s = 0.0;
        let logits = match self.take_pending() {
            Some(p) if reusable => {
                p.ids.storage().write_u32(tokens)?;
                Some(p.logits)
            }
            _ => {
                let ids = Tensor::from_slice(tokens, t, self.devs.first())?;
                let l = self.step(&ids, self.pos, all_logits, want)?;
                record_s = t0.elapsed().as_secs_f64();
                l
            }
        };
        let w = Instant::now();
        self.submit()?;
        self.pos += t;
        let a = Instant::now();
        if record_next && self.pos < self.ctx && S::is_deferred(self.devs.first()) {
            // Counted before recording: a recording that itself submits (a device's command
            // buffer ended to take a hop) has run part of the step without its id.
            let submissions = self.submissions();
            let ids = Tensor::from_storage(S::host_u32(self.devs.first(), 1)?, 1);
            let logits = self.step(&ids, self.pos, false, true)?.expect("logits wanted");
            self.pending = Some(Pending { pos: self.pos, ids, logits, submissions });
        }
        let ahead_s = a.elapsed().as_secs_f64();
        let out = match logits {
            Some(l) => Some(l.storage().read_f32(l.layout())?),
            None => None,
        };
        self.profile = StepProfile { record_s, ahead_s, wait_s: w.elapsed().as_secs_f64() - ahead_s };
        Ok(out)
    }

    /// Records (on the CPU: runs) one step over `ids: u32[t]` at positions `pos..`: every
    /// layer, then, with `want`, the output head of the last token (every token with
    /// `all_logits`).
    fn step(&mut self, ids: &Tensor<S>, pos: usize, all_logits: bool, want: bool) -> Result<Option<Tensor<S>>> {
        let t = ids.dims()[0];
        let mut x = self.model.forward(ids, pos)?;
        if !want {
            return Ok(None);
        }
        if !all_logits {
            x = x.narrow(0, t - 1, 1)?;
        }
        Ok(Some(self.model.logits(&x)?))
    }
}
