//! A model's layers split over several devices (`Runner::load_split`, llama.cpp's
//! `--split-mode layer`), on logical devices opened on the one physical device (lavapipe in
//! CI): every architecture must give the tokens and the bit-identical logits of one device,
//! the hidden state crossing between the devices through host staging. The split runs
//! prompts in micro-batches, compared against one device fed the same pieces. A device
//! that cannot hold its share is refused by name.

mod common;
use common::{argmax, device, tiny_shape, vulkan_device_mat_mat_from};

use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_models::synth::{synthetic_model, SynthShape};
use vkml_models::{LoadOptions, Runner};
use vkml_quant::gguf::GgufFile;
use vkml_quant::GgmlType;

/// `n` fresh logical devices, each with its own stream (and instance).
fn devices(n: usize, mat_mat: bool) -> Vec<VulkanDevice> {
    (0..n)
        .map(|i| if mat_mat { vulkan_device_mat_mat_from(2) } else { VulkanDevice::from_device(&device(), i).unwrap() })
        .collect()
}

/// Every logit of a run (each forward call's) and its greedy tokens.
type Run = (Vec<Vec<f32>>, Vec<u32>);

/// Logits of the prompt (every token) then of `steps` greedy steps, and the tokens: the
/// prompt in pieces of `piece` tokens (one forward call each, as the split's micro-batches).
fn run(r: &mut Runner<VulkanStorage>, prompt: &[u32], piece: usize, steps: usize) -> Run {
    let mut logits = Vec::new();
    for p in prompt.chunks(piece) {
        logits.push(r.forward(p, true).unwrap());
    }
    let mut tokens = Vec::new();
    let mut tok = argmax(&logits.last().unwrap()[logits.last().unwrap().len() - r.hparams().vocab..]);
    for _ in 0..steps {
        tokens.push(tok);
        let l = r.forward(&[tok], false).unwrap();
        tok = argmax(&l);
        logits.push(l);
    }
    (logits, tokens)
}

/// One device against splits over two devices (even shares; the prompt in one pass and in
/// micro-batches of 4), over three (one holding only the output head) and over two
/// mat-mat devices (prompts on the mat-mat kernels).
fn check(arch: &str, file: &GgufFile, n_layers: usize) {
    let prompt: Vec<u32> = (0..12u32).map(|i| (i * 37 + 5) % 512).collect();
    let opts = LoadOptions { ctx: Some(64), max_batch: 12, ..LoadOptions::default() };
    let one = &devices(1, false)[0];
    let mut single = Runner::<VulkanStorage>::load(one, file, opts, &mut |_, _| {}).unwrap();
    let whole = run(&mut single, &prompt, 12, 6);
    single.reset();
    let pieces = run(&mut single, &prompt, 4, 6);
    let mm = vulkan_device_mat_mat_from(2);
    let mut single_mm = Runner::<VulkanStorage>::load(&mm, file, opts, &mut |_, _| {}).unwrap();
    let whole_mm = run(&mut single_mm, &prompt, 12, 6);
    /// One split: devices, shares, micro-batch, mat-mat kernels, and the one-device run it
    /// must equal.
    struct Case<'a>(&'a str, usize, Option<&'a [f64]>, Option<usize>, bool, &'a Run);
    let cases = [
        Case("two devices, one pass", 2, None, Some(12), false, &whole),
        Case("two devices, micro-batches of 4", 2, Some(&[1.0, 3.0]), Some(4), false, &pieces),
        Case("three devices", 3, Some(&[1.0, 1.0, 1.0]), Some(12), false, &whole),
        Case("two mat-mat devices", 2, None, Some(12), true, &whole_mm),
    ];
    for Case(what, n, shares, micro, mat_mat, want) in cases {
        let devs = devices(n, mat_mat);
        let o = LoadOptions { micro_batch: micro, ..opts };
        let mut split = Runner::<VulkanStorage>::load_split(&devs, shares, file, o, &mut |_, _| {}).unwrap();
        assert!(split.devices().is_split(), "{arch}, {what}");
        let ranges = split.devices().ranges();
        assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), n_layers, "{arch}, {what}: {ranges:?}");
        // The prompt in one call: the runner cuts it into micro-batches itself.
        let got = run(&mut split, &prompt, 12, 6);
        // Every prompt token's logits, in order, however the prompt was cut.
        let got_logits: Vec<f32> = got.0.concat();
        let want_logits: Vec<f32> = want.0.concat();
        assert_eq!(got.1, want.1, "{arch}, {what}: other tokens than one device");
        assert!(got_logits.len() == want_logits.len(), "{arch}, {what}");
        let diff = got_logits.iter().zip(&want_logits).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(diff, 0, "{arch}, {what} ({ranges:?}): {diff} logits differ from one device's");
        // The prompt again after a reset: the recorded-ahead step went stale.
        split.reset();
        let again = run(&mut split, &prompt, 12, 1);
        assert_eq!(again.0[0].to_vec(), got.0[0], "{arch}, {what}: after a reset");
    }
}

/// Every architecture of the model layer, on the small shapes the oracle uses (gemma with a
/// window of 5 that the prompt runs past).
#[test]
fn split_over_devices_matches_one_device() {
    let shape = tiny_shape(4);
    let qwen3 = SynthShape { arch: "qwen3", head_dim: Some(64), ..shape };
    let gemma3 = SynthShape { arch: "gemma3", head_dim: Some(64), sliding_window: Some(5), n_layers: 7, ..shape };
    for (arch, shape, ty) in [
        ("llama", shape, GgmlType::Q4_0),
        ("mistral", SynthShape { arch: "mistral", tied: false, ..shape }, GgmlType::Q4_1),
        ("qwen2", SynthShape { arch: "qwen2", ..shape }, GgmlType::Q8_0),
        ("qwen3", qwen3, GgmlType::Q4_0),
        ("gemma3", gemma3, GgmlType::Q8_0),
        ("gemma2", SynthShape { arch: "gemma2", n_layers: 3, ..gemma3 }, GgmlType::Q4_0),
        ("phi3", SynthShape { arch: "phi3", tied: false, ..shape }, GgmlType::Q4_0),
    ] {
        let file = synthetic_model(arch, &shape, ty, 11).unwrap();
        check(arch, &file, shape.n_layers);
    }
}

/// A device whose share does not fit its memory budget is named, before anything loads;
/// shares that are not one per device, negative or all zero, and a device given twice,
/// are refused.
#[test]
fn split_refuses_a_device_without_room() {
    // 32 KV heads of 256 dims: 32 KiB of KV cache per position and layer, 32 GiB per layer
    // for a context of 2^20, past any device lavapipe reports.
    let shape = SynthShape {
        experts: None,
        name: "wide-kv",
        arch: "qwen3",
        head_dim: Some(256),
        sliding_window: None,
        n_layers: 2,
        n_embd: 128,
        n_ff: 256,
        n_head: 32,
        n_kv_head: 32,
        vocab: 512,
        tied: true,
    };
    let file = synthetic_model("qwen3", &shape, GgmlType::Q8_0, 3).unwrap();
    let devs = devices(2, false);
    let opts = LoadOptions { ctx: Some(1 << 20), ..LoadOptions::default() };
    let e = Runner::<VulkanStorage>::load_split(&devs, None, &file, opts, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.starts_with("model: device 0 (VulkanDevice(0: "), "{e}");
    assert!(e.contains("2 layers") && e.contains("token embedding") && e.contains("GiB"), "{e}");
    // Every layer on the second device (8 GiB at 2^17 positions): it is the one named; the
    // first holds the embedding and 256 MiB of rope tables.
    let opts = LoadOptions { ctx: Some(1 << 17), ..LoadOptions::default() };
    let e = Runner::<VulkanStorage>::load_split(&devs, Some(&[0.0, 1.0]), &file, opts, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("model: device 1 (VulkanDevice(1: ") && e.contains("output head"), "{e}");
    let opts = LoadOptions { ctx: Some(16), ..LoadOptions::default() };
    let e =
        Runner::<VulkanStorage>::load_split(&devs, Some(&[1.0]), &file, opts, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("1 split shares for 2 devices"), "{e}");
    let e = Runner::<VulkanStorage>::load_split(&devs, Some(&[0.0, 0.0]), &file, opts, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one share above 0"), "{e}");
    let e = Runner::<VulkanStorage>::load_split(&devs[..1], Some(&[-1.0]), &file, opts, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("finite shares >= 0"), "{e}");
    // One device twice would put two stages on one stream: refused (open it twice).
    let twice = [devs[0].clone(), devs[0].clone()];
    let e = Runner::<VulkanStorage>::load_split(&twice, None, &file, opts, &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("devices 0 and 1 of a layer split are the same device"), "{e}");
}

/// Out of memory on one device of a split, at allocation (its memory budget passed the
/// check first): the error names that device; the other device is left working, and
/// nothing leaks once all is dropped.
#[test]
fn out_of_memory_on_one_device_names_it() {
    use std::sync::atomic::Ordering;
    use vkml_hal::{Device, DeviceOptions, DeviceSelector, Instance, InstanceOptions};
    let leaked = vkml_hal::LEAKED_DEVICES.load(Ordering::Relaxed);
    let shape = tiny_shape(4);
    let file = synthetic_model("llama", &shape, GgmlType::Q8_0, 5).unwrap();
    let opts = LoadOptions { ctx: Some(32), ..LoadOptions::default() };
    {
        let good = VulkanDevice::from_device(&device(), 0).unwrap();
        // The second device refuses allocations past 64 KiB of each heap.
        let inst = Instance::new(&InstanceOptions::from_env()).unwrap();
        let adapter = inst.select(&DeviceSelector::from_env()).unwrap();
        let small = Device::from_adapter(
            &inst,
            &adapter,
            DeviceOptions { heap_size_limit: Some(64 << 10), ..DeviceOptions::default() },
        )
        .unwrap();
        let small = VulkanDevice::from_device(&small, 1).unwrap();
        let devs = [good.clone(), small];
        let e = Runner::<VulkanStorage>::load_split(&devs, None, &file, opts, &mut |_, _| {}).unwrap_err().to_string();
        assert!(e.contains("Vulkan device 1 (") && e.contains("out of"), "{e}");
        drop(devs);
        // The first device still runs the model on its own.
        let mut alone = Runner::<VulkanStorage>::load(&good, &file, opts, &mut |_, _| {}).unwrap();
        let l = alone.forward(&[1, 2, 3], false).unwrap();
        assert!(l.len() == 512 && l.iter().all(|x| x.is_finite()));
    }
    assert_eq!(vkml_hal::LEAKED_DEVICES.load(Ordering::Relaxed), leaked, "a device was dropped with live allocations");
}
