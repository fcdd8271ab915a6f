//! Work recorded once and submitted again (`VulkanDevice::record_replay`, `Replay`): each
//! submission computes from the inputs as they are then; the storages made while
//! recording never serve later ops; what cannot be replayed (a submission or read-back
//! while recording) is an error that leaves the device as it was.

mod common;
use common::vulkan_device;

use vkml_candle::front::Tensor;
use vkml_candle::vulkan::VulkanStorage;
use vkml_hal::MemoryKind;

type VTensor = Tensor<VulkanStorage>;

/// `y = (2 x) + 1` recorded once (its intermediate `2 x` dropped inside the recording),
/// then submitted after each rewrite of `x`: `y` follows `x`; a storage made after the
/// recording, of the intermediate's size, keeps its values through the submissions.
#[test]
fn a_replay_recomputes_from_its_inputs_and_keeps_its_memory() {
    let dev = vulkan_device();
    let x = VTensor::from_slice(&[1f32, 2.0, 3.0, 4.0], 4, &dev).unwrap();
    let step = dev.hal().alloc(4, MemoryKind::Upload).unwrap();
    let (y, mut replay) = dev
        .record_replay(&step, || -> candle_core::Result<VTensor> {
            assert!(dev.step_buffer().is_some());
            let twice = x.affine(2.0, 0.0)?;
            twice.affine(1.0, 1.0)
        })
        .unwrap();
    assert!(dev.step_buffer().is_none());
    assert_eq!(replay.stats().dispatches, 2);
    // Made after the recording, the size of `twice`: must not share its memory.
    let other = VTensor::from_slice(&[7f32; 4], 4, &dev).unwrap().affine(1.0, 0.0).unwrap();
    for round in 0..3u32 {
        let v: Vec<f32> = (0..4).map(|i| (round * 10 + i) as f32).collect();
        x.storage().buffer().write(0, bytemuck::cast_slice(&v)).unwrap();
        replay.submit().unwrap();
        let want: Vec<f32> = v.iter().map(|a| 2.0 * a + 1.0).collect();
        assert_eq!(y.to_vec::<f32>().unwrap(), want, "round {round}");
        assert_eq!(other.to_vec::<f32>().unwrap(), vec![7.0; 4], "round {round}");
    }
}

/// A read-back or a synchronize inside the recording is refused, naming the replay; the
/// device then records and submits as before.
#[test]
fn submitting_while_recording_is_an_error_that_leaves_the_device_usable() {
    let dev = vulkan_device();
    let x = VTensor::from_slice(&[1f32, 2.0], 2, &dev).unwrap();
    let step = dev.hal().alloc(4, MemoryKind::Upload).unwrap();
    let e = dev.record_replay(&step, || x.affine(3.0, 0.0)?.to_vec::<f32>()).unwrap_err().to_string();
    assert!(e.contains("recorded for replay"), "{e}");
    let e = dev
        .record_replay(&step, || {
            use candle_core::backend::BackendDevice;
            dev.synchronize()
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("recorded for replay"), "{e}");
    assert!(dev.step_buffer().is_none());
    assert_eq!(x.affine(3.0, 1.0).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 7.0]);
}
