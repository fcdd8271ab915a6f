//! Greedy decoding with the choice made on the device (`Runner::forward_greedy`,
//! `ModelStorage::argmax_ids`): the same tokens as the host's argmax of the logits, with
//! the next step run ahead on the device's choice; steps run ahead and then not wanted
//! (another token, a reset, a prompt) leave no trace; non-finite logits are an error.

mod common;
use common::{argmax, device, test_model};

use vkml_candle::front::Tensor;
use vkml_candle::vulkan::{VulkanDevice, VulkanStorage};
use vkml_models::storage::ModelStorage;
use vkml_models::{LoadOptions, Runner};
use vkml_quant::gguf::GgufFile;

fn vd(i: usize) -> VulkanDevice {
    VulkanDevice::from_device(&device(), i).unwrap()
}

/// `argmax_ids` against candle's CPU argmax (first of equal maxima) and sum, rows with
/// ties, a NaN and an infinity included.
#[test]
fn argmax_ids_is_candles_argmax() {
    let dev = vd(0);
    let (t, n) = (4, 1000);
    let mut v = common::values(t * n, 3);
    v[n + 17] = 9.0; // row 1: a tie at 17 and 801, the first wins
    v[n + 801] = 9.0;
    v[2 * n + 5] = f32::NAN; // row 2: skipped by the argmax, NaN sum
    v[3 * n + 999] = f32::INFINITY; // row 3: the last, infinite sum
    let x = Tensor::<VulkanStorage>::from_slice(&v, (t, n), &dev).unwrap();
    let c = x.storage().argmax_ids(x.layout(), &dev).unwrap();
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
    let split = Runner::<VulkanStorage>::load_split(&[vd(1), vd(2)], None, &file, opts, &mut |_, _| {}).unwrap();
    let single = Runner::<VulkanStorage>::load(&vd(3), &file, opts, &mut |_, _| {}).unwrap();
    for (what, mut r) in [("one device", single), ("two devices", split)] {
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
