//! Decoding with the choice made on the device (`Runner::forward_choose`,
//! `ModelStorage::choose_ids`): greedy, the same tokens as the host's argmax of the
//! logits; sampled, the distribution of the host's sampler (`Sampler`, a chi-square test
//! over many draws) and the draws of the CPU reference `choose_host`; the next step run ahead on the device's choice; steps run
//! ahead and then not wanted (another token, a reset, a prompt) leave no trace;
//! non-finite logits are an error; on one device the step is recorded once and replayed
//! at every position, with the tokens of steps recorded one by one, for every
//! architecture.

mod common;
use common::{argmax, device, test_model};

use vkml_candle::front::Tensor;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_models::sampling::{choose_host, SampleParams, Sampler, SamplingConfig, TokenChoice};
use vkml_models::storage::ModelStorage;
use vkml_models::synth::{synthetic_model, SynthShape};
use vkml_models::{LoadOptions, Runner};
use vkml_quant::gguf::GgufFile;

fn vd(i: usize) -> VulkanDevice {
    VulkanDevice::from_device(&device(), i).unwrap()
}

/// A runner on one device and one split over two, labelled.
fn one_and_split(file: &GgufFile, opts: LoadOptions) -> [(&'static str, Runner<VulkanStorage>); 2] {
    let split = Runner::<VulkanStorage>::load_split(&[vd(1), vd(2)], None, file, opts, &mut |_, _| {}).unwrap();
    let single = Runner::<VulkanStorage>::load(&vd(3), file, opts, &mut |_, _| {}).unwrap();
    [("one device", single), ("two devices", split)]
}

/// `choose_ids` (greedy) against candle's CPU argmax (first of equal maxima) and sum, rows with
/// ties, a NaN and an infinity included.
#[test]
fn greedy_ids_are_candles_argmax() {
    let dev = vd(0);
    let (t, n) = (4, 1000);
    let mut v = common::values(t * n, 3);
    v[n + 17] = 9.0; // row 1: a tie at 17 and 801, the first wins
    v[n + 801] = 9.0;
    v[2 * n + 5] = f32::NAN; // row 2: skipped by the argmax, NaN sum
    v[3 * n + 999] = f32::INFINITY; // row 3: the last, infinite sum
    let x = Tensor::<VulkanStorage>::from_slice(&v, (t, n), &dev).unwrap();
    let c = x.storage().choose_ids(x.layout(), &dev, &TokenChoice::Greedy, 0, None).unwrap();
    let one = candle_core::Layout::contiguous(t);
    dev.flush().unwrap();
    let (chosen, sums, ids) = (c.chosen.read_u32(&one), c.sums.read_f32(&one), c.ids.read_u32(&one));
    let cpu = candle_core::Tensor::from_vec(v.clone(), (t, n), &candle_core::Device::Cpu).unwrap();
    let want: Vec<u32> = cpu.argmax(1).unwrap().to_vec1().unwrap();
    assert_eq!(want[1], 17);
    let (chosen, sums) = (chosen.unwrap(), sums.unwrap());
    assert_eq!(chosen, want);
    assert_eq!(ids.unwrap(), want);
    let want_sums: Vec<f32> = cpu.sum(1).unwrap().to_vec1().unwrap();
    assert!(sums[2].is_nan() && sums[3] == f32::INFINITY, "{sums:?}");
    for r in [0, 1] {
        assert!((sums[r] - want_sums[r]).abs() <= 1e-3 * want_sums[r].abs().max(1.0), "{sums:?} {want_sums:?}");
    }
}

/// The greedy tokens of `forward_greedy` are those of the host's argmax over
/// `forward`'s logits, on one device and split over two (SmolLM2-135M-Instruct Q4_1); a
/// step run ahead and then not taken (another token fed, a reset, a prompt) changes
/// nothing after it.
#[test]
fn forward_greedy_matches_host_argmax() {
    let file = GgufFile::open(test_model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let vocab = vkml_models::arch::hparams(&file).unwrap().vocab as u32;
    let opts = LoadOptions { ctx: Some(64), max_batch: 8, ..LoadOptions::default() };
    // "The three primary colours are"
    let prompt = [504u32, 1907, 3391, 23646, 359];
    // The host's greedy tokens, and logits to compare the detour against.
    let mut host = Runner::<VulkanStorage>::load(&vd(0), &file, opts, &mut |_, _| {}).unwrap();
    let mut tok = argmax(&host.forward(&prompt, false).unwrap());
    let mut want = vec![tok];
    for _ in 0..12 {
        tok = argmax(&host.forward(&[tok], false).unwrap());
        want.push(tok);
    }
    // A model whose greedy text moves (a tiny random one repeats one token, which a wrong
    // input would not change).
    let distinct: std::collections::HashSet<_> = want.iter().collect();
    assert!(distinct.len() >= 6, "{want:?}");
    for (what, mut r) in one_and_split(&file, opts) {
        let mut tok = argmax(&r.forward(&prompt, false).unwrap());
        let mut got = vec![tok];
        for i in 0..12 {
            if i == 5 {
                // Feed another token than the device ran ahead with, then the right one
                // again: the step at that position runs twice, the second time correctly.
                let other = (tok + 1) % vocab;
                let p = r.position();
                r.forward_greedy(other).unwrap();
                assert!(r.truncate(p));
            }
            tok = r.forward_greedy(tok).unwrap();
            got.push(tok);
        }
        assert_eq!(got, want, "{what}");
        // A reset with a step run ahead, then the same prompt: the same tokens again.
        r.reset();
        let mut tok = argmax(&r.forward(&prompt, false).unwrap());
        let mut again = vec![tok];
        for _ in 0..12 {
            tok = r.forward_greedy(tok).unwrap();
            again.push(tok);
        }
        assert_eq!(again, want, "{what}, after a reset");
        assert_eq!(r.position(), prompt.len() + 12);
    }
}

/// Pearson's chi-square of two equal-sized samples' counts (bins where both are empty
/// left out), its degrees of freedom, and the value a sample pair from one distribution
/// exceeds with probability 1e-6 (Wilson-Hilferty).
fn two_sample_chi_square(a: &[usize], b: &[usize]) -> (f64, f64) {
    let (mut chi, mut bins) = (0.0, 0usize);
    for (&x, &y) in a.iter().zip(b).filter(|(&x, &y)| x + y > 0) {
        chi += (x as f64 - y as f64).powi(2) / (x + y) as f64;
        bins += 1;
    }
    let d = bins.saturating_sub(1).max(1) as f64;
    let bound = d * (1.0 - 2.0 / (9.0 * d) + 4.753 * (2.0 / (9.0 * d)).sqrt()).powi(3);
    (chi, bound)
}

/// Sampled on the device, 20 000 draws over a 40-token row come from the distribution
/// the host's `Sampler` draws from (its own Philox stream through `choose_host`:
/// two-sample chi-square below its 1e-6 quantile, for several settings), and a sampler
/// with a 30 % hotter temperature fails the same test; each draw is the CPU reference's
/// (`choose_host` with the same counter) but at rounding boundaries (at most 0.1 %).
#[test]
fn sampled_ids_follow_the_host_samplers_distribution() {
    let dev = vd(0);
    let n = 40;
    let row: Vec<f32> = (0..n).map(|i| ((i * 17) % 40) as f32 * 0.15 - 2.0 + (i % 3) as f32 * 0.01).collect();
    let rows = 20_000;
    let all: Vec<f32> = (0..rows).flat_map(|_| row.iter().copied()).collect();
    let x = Tensor::<VulkanStorage>::from_slice(&all, (rows, n), &dev).unwrap();
    let configs = [
        SamplingConfig { temperature: 0.8, ..SamplingConfig::default() },
        SamplingConfig { temperature: 1.2, top_k: Some(9), ..SamplingConfig::default() },
        SamplingConfig { temperature: 1.0, top_p: Some(0.7), ..SamplingConfig::default() },
        SamplingConfig {
            temperature: 0.9,
            top_k: Some(15),
            top_p: Some(0.85),
            min_p: Some(0.1),
            ..SamplingConfig::default()
        },
    ];
    for cfg in configs {
        let how = cfg.device_choice().unwrap();
        let c = x.storage().choose_ids(x.layout(), &dev, &how, 77, None).unwrap();
        dev.flush().unwrap();
        let ids = c.chosen.read_u32(&candle_core::Layout::contiguous(rows)).unwrap();
        let mut device = vec![0usize; n];
        ids.iter().for_each(|&i| device[i as usize] += 1);
        let mut host = Sampler::new(cfg).unwrap();
        let mut hot = Sampler::new(SamplingConfig { temperature: cfg.temperature * 1.3, ..cfg }).unwrap();
        let (mut want, mut hotter) = (vec![0usize; n], vec![0usize; n]);
        for _ in 0..rows {
            want[host.sample(row.clone(), &[]).unwrap() as usize] += 1;
            hotter[hot.sample(row.clone(), &[]).unwrap() as usize] += 1;
        }
        let (chi, bound) = two_sample_chi_square(&device, &want);
        assert!(chi < bound, "{cfg:?}: chi-square {chi} >= {bound}: device {device:?}, host {want:?}");
        let (chi, bound) = two_sample_chi_square(&device, &hotter);
        assert!(chi > bound, "{cfg:?}: a 30 % hotter host sampler passes ({chi} < {bound})");
        let differ = (0..rows).filter(|&r| choose_host(&row, &how, 77, r as u32).unwrap() != ids[r]).count();
        assert!(differ * 1000 <= rows, "{cfg:?}: {differ} of {rows} draws differ from choose_host");
    }
}

/// Sampled decoding through `forward_choose` on SmolLM2-135M-Instruct Q4_1, on one device
/// and split over two: each token is the CPU reference's draw (`choose_host`) from the
/// logits `forward` gives for the same tokens; a reset and the same prompt give the same
/// tokens again (a seed reproduces a generation); a step run ahead with other settings
/// is not taken.
#[test]
fn forward_choose_samples_as_the_host_draws() {
    let file = GgufFile::open(test_model("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let opts = LoadOptions { ctx: Some(64), max_batch: 8, ..LoadOptions::default() };
    let prompt = [504u32, 1907, 3391, 23646, 359];
    let how = TokenChoice::Sample(SampleParams { temperature: 1.1, top_k: 50, top_p: 0.95, min_p: 0.0, seed: 5 });
    let other = TokenChoice::Sample(SampleParams { temperature: 0.7, top_k: 0, top_p: 1.0, min_p: 0.05, seed: 6 });
    let mut host = Runner::<VulkanStorage>::load(&vd(0), &file, opts, &mut |_, _| {}).unwrap();
    let l = host.forward(&prompt, false).unwrap();
    let mut tok = choose_host(&l, &how, prompt.len() as u64 - 1, 0).unwrap();
    let mut want = vec![tok];
    for i in 0..12 {
        let c = if i == 6 { other } else { how };
        let pos = host.position() as u64;
        tok = choose_host(&host.forward(&[tok], false).unwrap(), &c, pos, 0).unwrap();
        want.push(tok);
    }
    let distinct: std::collections::HashSet<_> = want.iter().collect();
    assert!(distinct.len() >= 6, "{want:?}");
    for (what, mut r) in one_and_split(&file, opts) {
        for round in 0..2 {
            r.reset();
            let l = r.forward(&prompt, false).unwrap();
            let mut tok = choose_host(&l, &how, prompt.len() as u64 - 1, 0).unwrap();
            let mut got = vec![tok];
            for i in 0..12 {
                tok = r.forward_choose(tok, if i == 6 { &other } else { &how }).unwrap();
                got.push(tok);
            }
            assert_eq!(got, want, "{what}, round {round}");
        }
    }
}

/// Decoding on a replayed step (`Runner::forward_choose` on one device: the step recorded
/// once, its position written before each submission) gives, for every architecture, the
/// tokens of steps recorded one by one (`forward`, then the host's argmax or
/// `choose_host` on its logits): 40 positions past a 12-token prompt, across the decode
/// attention's split counts (one per 8 keys) and, for Gemma and gpt-oss, a window of 5
/// over ring caches (gpt-oss: sinks and experts too); greedy and sampled, settings changed
/// mid-way (the step recorded again).
#[test]
fn replayed_steps_decode_as_steps_recorded_one_by_one() {
    let dev = vd(4);
    let shape = common::tiny_shape(2);
    let gemma3 = SynthShape { arch: "gemma3", head_dim: Some(64), sliding_window: Some(5), n_layers: 7, ..shape };
    let sample = TokenChoice::Sample(SampleParams { temperature: 1.3, top_k: 40, top_p: 0.95, min_p: 0.0, seed: 9 });
    // The prompt in chunks of 4: sliding-window caches are rings of window + 3 slots.
    let opts = LoadOptions { ctx: Some(64), max_batch: 4, ..LoadOptions::default() };
    for (arch, shape) in [
        ("llama", shape),
        ("qwen2", shape),
        ("qwen3", SynthShape { arch: "qwen3", head_dim: Some(64), ..shape }),
        ("gemma3", gemma3),
        ("gemma2", SynthShape { arch: "gemma2", n_layers: 3, ..gemma3 }),
        ("phi3", SynthShape { arch: "phi3", tied: false, ..shape }),
        (
            "gpt-oss",
            SynthShape {
                arch: "gpt-oss",
                head_dim: Some(64),
                sliding_window: Some(5),
                n_layers: 3,
                experts: Some(vkml_models::synth::SynthExperts { n_expert: 8, n_used: 2, n_ff_exp: 64 }),
                ..shape
            },
        ),
    ] {
        let file = synthetic_model(arch, &shape, vkml_quant::GgmlType::Q4_0, 11).unwrap();
        let prompt: Vec<u32> = (0..12u32).map(|i| (i * 37 + 5) % shape.vocab as u32).collect();
        let mut steps = Runner::<VulkanStorage>::load(&dev, &file, opts, &mut |_, _| {}).unwrap();
        let mut replayed = Runner::<VulkanStorage>::load(&dev, &file, opts, &mut |_, _| {}).unwrap();
        assert!(replayed.replays(), "{arch}: the decode step is not replayed on {dev:?}");
        let how = |i: usize| if (10..25).contains(&i) { sample } else { TokenChoice::Greedy };
        let mut tok = argmax(&steps.forward(&prompt, false).unwrap());
        let mut want = vec![tok];
        for i in 0..40 {
            let pos = steps.position() as u64;
            tok = choose_host(&steps.forward(&[tok], false).unwrap(), &how(i), pos, 0).unwrap();
            want.push(tok);
        }
        let distinct: std::collections::HashSet<_> = want.iter().collect();
        assert!(distinct.len() >= 8, "{arch}: {want:?}");
        let mut tok = argmax(&replayed.forward(&prompt, false).unwrap());
        let mut got = vec![tok];
        for i in 0..40 {
            tok = replayed.forward_choose(tok, &how(i)).unwrap();
            got.push(tok);
        }
        assert_eq!(got, want, "{arch}");
    }
}
