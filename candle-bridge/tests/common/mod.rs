//! Helpers shared by the model and tokenizer tests: the device and the real test models.

#![allow(dead_code)]

use std::path::PathBuf;

use vkml_hal::{Device, DeviceSelector, Instance, InstanceOptions};

/// The device the tests run on (`VKML_DEVICE`, else the best), with the validation layer
/// unless `VKML_VALIDATION=0`.
pub fn device() -> Device {
    let validation = std::env::var("VKML_VALIDATION").map_or(true, |v| v != "0");
    let inst = Instance::new(&InstanceOptions { validation }).unwrap();
    let adapter = inst.select(&DeviceSelector::from_env()).unwrap();
    Device::from_adapter(&inst, &adapter, Default::default()).unwrap()
}

/// [`device`] as a candle backend device.
pub fn vulkan_device() -> vkml_candle::vulkan::VulkanDevice {
    vkml_candle::vulkan::VulkanDevice::from_device(&device(), 0).unwrap()
}

/// [`vulkan_device`] with quantized products on mat-mats from `n` activation rows on
/// (lavapipe's own choice never uses them).
pub fn vulkan_device_mat_mat_from(n: usize) -> vkml_candle::vulkan::VulkanDevice {
    let d = vulkan_device();
    d.set_mat_mat_min_tokens(Some(n));
    d
}

/// A real test model by file name, from `$VKML_TEST_MODELS` (default
/// `~/.cache/vkml/test-models`). Panics, naming the fetch script, when it is missing.
pub fn test_model(name: &str) -> PathBuf {
    let dir = std::env::var_os("VKML_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vkml/test-models"));
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "test model {} is missing: run quant/scripts/fetch_test_models.sh (downloads ~331 MB into \
         $VKML_TEST_MODELS, default ~/.cache/vkml/test-models)",
        p.display()
    );
    p
}
