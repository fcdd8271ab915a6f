//! The decode step recorded once and replayed at every position
//! ([`Runner::forward_choose`] on a device where [`ModelStorage::replays`] holds): the host
//! writes one position and one submission per token instead of recording the step.

use std::time::Instant;

use candle_core::backend::BackendDevice;
use candle_core::{DType, Shape};
use vkml_candle::front::Tensor;

use super::{read_choice, Runner, StepProfile};
use crate::error::Result;
use crate::sampling::TokenChoice;
use crate::storage::ModelStorage;

/// A decode step recorded twice, for even and for odd positions, each submitted again at
/// every position of its parity. Its position is word 0 of its own step buffer (written
/// before each submission, read by the decode attention and the draw); its input is the
/// shared `ids`, which its own choice overwrites, so that the next step runs on it; its
/// choice and its logits' sum go to memory of its own, so that the host reads one step's
/// choice while the next one runs and no step waits for the host.
pub(super) struct Replayed<S: ModelStorage> {
    /// First in drop order: each waits for its last submission before the memory below
    /// goes.
    steps: [S::Replay; 2],
    /// How the steps choose their next token (recorded into them).
    how: TokenChoice,
    /// Each step's position, `u32[1]` from [`ModelStorage::host_u32`].
    positions: [S; 2],
    /// Each step's choice and its logits' sum, `(u32[1], f32[1])`, host-readable.
    choices: [(S, S); 2],
    /// The token both steps read and then overwrite with their choice, `u32[1]`.
    ids: Tensor<S>,
    /// The step submitted ahead of the host: its position and its input (the choice of
    /// the step before, once read).
    pub(super) ahead: Option<(usize, u32)>,
}

impl<S: ModelStorage> Runner<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// Whether [`Runner::forward_choose`] replays a recorded step: one device that replays
    /// ([`ModelStorage::replays`]) and whose decode attention reads the position when it
    /// runs (the fused decode attention, [`ModelStorage::attention_fuses_prologue`]).
    pub fn replays(&self) -> bool {
        let (dev, hp) = (self.devs.first(), self.model.hparams());
        !self.devs.is_split()
            && S::replays(dev)
            && S::attention_fuses_prologue(dev, 1, hp.n_head, hp.n_kv_head, hp.head_dim)
    }

    /// Records the two steps of a [`Replayed`] choosing as `how` says (work recorded
    /// before is submitted first).
    fn record_replayed(&mut self, how: &TokenChoice) -> Result<Replayed<S>> {
        let dev = self.devs.first().clone();
        let ids = Tensor::from_storage(dev.zeros_impl(&Shape::from(1), DType::U32)?, 1);
        // Any position the cache holds: the kernels read the step buffer's.
        let pos = self.pos;
        let record = |runner: &mut Self| -> Result<(S::Replay, S, (S, S))> {
            let step = S::host_u32(&dev, 1)?;
            let (choice, replay) = S::record_replay(&dev, &step, || {
                let logits = runner.step(&ids, pos, false, true)?.expect("logits wanted");
                Ok(logits.storage().choose_ids(logits.layout(), &dev, how, pos as u64, Some(ids.storage()))?)
            })?;
            Ok((replay, step, (choice.chosen, choice.sums)))
        };
        let (even, odd) = (record(self)?, record(self)?);
        Ok(Replayed {
            steps: [even.0, odd.0],
            how: *how,
            positions: [even.1, odd.1],
            choices: [even.2, odd.2],
            ids,
            ahead: None,
        })
    }

    /// [`Runner::forward_choose`] on replayed steps: this position's step (already running
    /// where the call before submitted it on this token; else the step recorded ahead by
    /// [`Runner::forward`], its choice written into the replays' input; else the replay
    /// on `token`), then the next position's step submitted before the host reads this
    /// one's choice. The steps are recorded at the first call and again when `how` changes.
    pub(super) fn forward_choose_replayed(&mut self, token: u32, how: &TokenChoice) -> Result<u32> {
        let t0 = Instant::now();
        let p = self.pos;
        let ahead = match &mut self.replay {
            Some(r) if r.how == *how => r.ahead.take() == Some((p, token)),
            _ => false,
        };
        self.greedy = None;
        let mut record_s = 0.0;
        // This position's choice where it is not the replay's own (the step recorded ahead).
        let mut own = None;
        if !ahead {
            let pending = self.take_pending();
            if let Some(pd) = &pending {
                pd.ids.storage().write_u32(&[token])?;
            }
            if self.replay.as_ref().is_none_or(|r| r.how != *how) {
                // Drop the old steps first (they wait for the device).
                self.replay = None;
                self.replay = Some(Box::new(self.record_replayed(how)?));
            }
            let r = self.replay.as_mut().expect("recorded above");
            match pending {
                Some(pd) => {
                    let first = self.devs.first();
                    let c = pd.logits.storage().choose_ids(
                        pd.logits.layout(),
                        first,
                        how,
                        p as u64,
                        Some(r.ids.storage()),
                    )?;
                    S::submit(first)?;
                    own = Some((c.chosen, c.sums));
                }
                None => {
                    r.ids.storage().write_u32(&[token])?;
                    r.positions[p % 2].write_u32(&[p as u32])?;
                    S::submit_replay(&mut r.steps[p % 2])?;
                }
            }
            record_s = t0.elapsed().as_secs_f64();
        }
        self.pending = None;
        self.pos += 1;
        let r = self.replay.as_mut().expect("recorded by the first call");
        // The next step, on the device's choice, submitted before the host reads it.
        let a = Instant::now();
        if self.pos < self.ctx {
            let q = self.pos % 2;
            r.positions[q].write_u32(&[self.pos as u32])?;
            S::submit_replay(&mut r.steps[q])?;
        }
        let ahead_s = a.elapsed().as_secs_f64();
        let w = Instant::now();
        let (chosen, sums) = own.as_ref().unwrap_or(&r.choices[p % 2]);
        let chosen = read_choice(chosen, sums, p)?;
        if self.pos < self.ctx {
            r.ahead = Some((self.pos, chosen));
        }
        self.profile = StepProfile { record_s, ahead_s, wait_s: w.elapsed().as_secs_f64() };
        Ok(chosen)
    }
}
