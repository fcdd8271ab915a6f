//! The `vkml` binary: `info` as table and JSON agrees with the HAL's own probe.

use std::process::Command;

fn vkml(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vkml")).args(args).env("VKML_VALIDATION", "1").output().expect("run vkml")
}

#[test]
fn info_json_matches_the_probe() {
    let out = vkml(&["info", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let inst = vkml_hal::Instance::new(&Default::default()).unwrap();
    let adapters = inst.adapters().unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), adapters.len());
    for (j, a) in list.iter().zip(&adapters) {
        assert_eq!(j["name"], a.caps.name.as_str());
        assert_eq!(j["ordinal"], a.ordinal);
        assert_eq!(j["subgroup"]["size"], a.caps.subgroup.size);
        assert_eq!(j["limits"]["max_storage_buffer_range"], a.caps.limits.max_storage_buffer_range);
        assert_eq!(j["cooperative_matrix"].as_array().unwrap().len(), a.caps.cooperative_matrix.len());
        assert_eq!(j["integer_dot"]["supported"], a.caps.integer_dot.supported);
    }
    assert_eq!(list.iter().filter(|d| d["best"] == true).count(), 1);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("validation error"));
}

#[test]
fn info_table_lists_each_device() {
    let out = vkml(&["info"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let inst = vkml_hal::Instance::new(&Default::default()).unwrap();
    for a in inst.adapters().unwrap() {
        assert!(text.contains(&format!("Device {}: {}", a.ordinal, a.caps.name)), "{text}");
    }
    for key in ["subgroup", "integer dot", "cooperative matrix", "limits", "memory", "queues"] {
        assert!(text.contains(key), "missing {key}: {text}");
    }
}

#[test]
fn missing_gguf_file_is_a_one_line_error() {
    let out = vkml(&["gguf", "inspect", "/nonexistent/model.gguf"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: ") && err.contains("/nonexistent/model.gguf"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
