//! Helpers shared by vkml-candle's tests and vkml-models' (which include this file by
//! path): the devices the tests run on, deterministic values, comparisons.

#![allow(dead_code)]

use vkml_hal::{Device, DeviceSelector, Instance, InstanceOptions};

/// The device the tests run on (`VKML_DEVICE`, else the best), with the validation layer
/// unless `VKML_VALIDATION=0`.
pub fn device() -> Device {
    device_with(|_| {})
}

/// [`device`] with its probed capabilities edited first (kernel choice reads only them):
/// runs the paths a device would take without some feature.
pub fn device_with(edit: impl FnOnce(&mut vkml_hal::Capabilities)) -> Device {
    let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
    let inst = Instance::new(&InstanceOptions { validation }).unwrap();
    let mut adapter = inst.select(&DeviceSelector::from_env()).unwrap();
    edit(&mut adapter.caps);
    Device::from_adapter(&inst, &adapter, Default::default()).unwrap()
}

/// [`device`] as a candle backend device.
pub fn vulkan_device() -> vkml_candle::vulkan::VulkanDevice {
    vkml_candle::vulkan::VulkanDevice::from_device(&device(), 0).unwrap()
}

/// [`vulkan_device`] with quantized products on mat-mats from `n` activation rows on
/// (lavapipe's own choice never uses them).
pub fn vulkan_device_mat_mat_from(n: usize) -> vkml_candle::vulkan::VulkanDevice {
    vulkan_device_mat_mat_from_with(n, |_| {})
}

/// [`vulkan_device_mat_mat_from`] on [`device_with`]`(edit)`.
pub fn vulkan_device_mat_mat_from_with(
    n: usize,
    edit: impl FnOnce(&mut vkml_hal::Capabilities),
) -> vkml_candle::vulkan::VulkanDevice {
    let d = vkml_candle::vulkan::VulkanDevice::from_device(&device_with(edit), 0).unwrap();
    d.set_mat_mat_min_tokens(Some(n));
    d
}

/// Deterministic values in [-2, 2).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

/// Largest |a - b| (same lengths).
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// A candle CPU tensor's values, flattened.
pub fn flat(t: &candle_core::Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}
