//! Device creation, capability probing, selection and error reporting.

mod common;

use vkml_hal::{DeviceSelector, Error};

#[test]
fn probe_reports_a_usable_device() {
    let inst = common::instance();
    let adapters = inst.adapters().unwrap();
    assert!(!adapters.is_empty(), "no Vulkan device visible");
    for a in &adapters {
        let c = &a.caps;
        if c.unusable.is_some() {
            continue;
        }
        assert!(c.api_version_raw >= ash::vk::API_VERSION_1_2);
        assert!(
            c.subgroup.size.is_power_of_two()
                && c.subgroup.min_size <= c.subgroup.size
                && c.subgroup.size <= c.subgroup.max_size
        );
        assert!(c.limits.max_storage_buffer_range >= 1 << 27);
        assert!(c.limits.max_workgroup_invocations >= 128);
        assert!(c.limits.max_push_constants_size >= 128);
        assert!(!c.memory.heaps.is_empty());
        assert!(c.memory.device_local_bytes > 0);
        assert!(c.timeline_semaphore);
        assert_eq!(c.device_uuid.len(), 32);
        assert_eq!(c.pipeline_cache_uuid.len(), 32);
        // Cross-check against what the driver's own vulkaninfo says of lavapipe
        // (Mesa llvmpipe): 8-wide subgroups, integer dot product without hardware
        // acceleration, no cooperative matrices, 128 MiB bindings, CPU = UMA.
        if c.driver_id == "MESA_LLVMPIPE" {
            assert_eq!((c.subgroup.size, c.subgroup.min_size, c.subgroup.max_size), (8, 8, 8));
            assert!(c.integer_dot.supported);
            assert!(!c.integer_dot.packed_4x8_signed_accelerated);
            assert!(c.cooperative_matrix.is_empty() && c.nv_cooperative_matrix2.is_none());
            assert_eq!(c.limits.max_storage_buffer_range, 128 << 20);
            assert!(c.memory.uma);
            assert_eq!(c.arch, vkml_hal::caps::ArchClass::Cpu);
            assert!(c.types.float16 && c.types.int8 && c.types.storage_buffer_16bit && c.types.storage_buffer_8bit);
            assert!(c.push_descriptor);
        }
    }
}

#[test]
fn device_by_ordinal_best_and_name() {
    let inst = common::instance();
    let adapters = inst.adapters().unwrap();
    let best = inst.select(&DeviceSelector::Best).unwrap();
    // Best is a usable adapter with the highest type preference.
    let top =
        adapters.iter().filter(|a| a.caps.unusable.is_none()).map(|a| a.caps.device_type.preference()).max().unwrap();
    assert_eq!(best.caps.device_type.preference(), top);
    let dev = inst.create_device(&DeviceSelector::Ordinal(best.ordinal), Default::default()).unwrap();
    assert_eq!(dev.ordinal(), best.ordinal);
    assert_eq!(dev.caps().name, best.caps.name);
    let word = best.caps.name.split_whitespace().next().unwrap().to_uppercase();
    let by_name = inst.select(&DeviceSelector::Name(word)).unwrap();
    assert_eq!(by_name.caps.name.split_whitespace().next(), best.caps.name.split_whitespace().next());
    assert!(inst.take_validation_errors().is_empty());
}

#[test]
fn selector_parses_env_style_values() {
    assert_eq!(DeviceSelector::parse("1"), DeviceSelector::Ordinal(1));
    assert_eq!(DeviceSelector::parse("H100"), DeviceSelector::Name("H100".into()));
}

#[test]
fn bad_ordinal_is_a_clear_error() {
    let inst = common::instance();
    let count = inst.adapters().unwrap().len();
    let err = inst.create_device(&DeviceSelector::Ordinal(count + 7), Default::default()).unwrap_err();
    match &err {
        Error::BadOrdinal { ordinal, count: c } => assert_eq!((*ordinal, *c), (count + 7, count)),
        other => panic!("expected BadOrdinal, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("out of range") && msg.contains("vkml info"), "{msg}");
}

#[test]
fn unknown_device_name_lists_devices() {
    let inst = common::instance();
    let err = inst.select(&DeviceSelector::Name("no such gpu 9000".into())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::DeviceNotFound { .. }), "{msg}");
    assert!(msg.contains("no such gpu 9000") && msg.contains("0: "), "{msg}");
}

#[test]
fn oversize_allocation_is_a_clear_error() {
    let dev = common::device();
    let huge = 1u64 << 50;
    for kind in [vkml_hal::MemoryKind::DeviceLocal, vkml_hal::MemoryKind::Upload, vkml_hal::MemoryKind::Readback] {
        let err = dev.alloc(huge, kind).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::OutOfMemory { requested, .. } if requested >= huge), "{msg}");
        assert!(msg.contains(&huge.to_string()) && msg.contains("budget"), "{msg}");
    }
    // The device still works afterwards.
    let b = dev.upload(&[1u32, 2, 3]).unwrap();
    assert_eq!(b.to_vec::<u32>().unwrap(), vec![1, 2, 3]);
}
