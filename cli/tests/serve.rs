//! `vkml serve` on 127.0.0.1 with SmolLM2-135M on lavapipe, driven by OpenAI's Python
//! client (`tests/openai_client.py`): a streamed and a non-streamed chat completion, a
//! completion with a stop text, a field of the wrong type, an unknown model, a prompt
//! past the context, a stop text past the bound, malformed JSON, and a stream dropped mid-way (the next request is
//! served at once).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SETUP: &str = "run scripts/setup.sh --test (it installs OpenAI's Python client into $VKML_PY_OPENAI, \
                     default ~/.cache/vkml/py-openai)";

/// The server, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn openai_client_against_vkml_serve() {
    let py = std::env::var_os("VKML_PY_OPENAI").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache/vkml/py-openai")
    });
    assert!(py.join("openai").is_dir(), "OpenAI's client is not installed in {}: {SETUP}", py.display());
    let dir = std::env::var_os("VKML_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/vkml/test-models"));
    let model = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.is_file(), "{} is missing: run quant/scripts/fetch_test_models.sh", model.display());
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_vkml"))
            .args(["serve", "-m", model.to_str().unwrap(), "--port", "0", "--ctx", "512"])
            .env("VKML_VALIDATION", "1")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // "vkml serve: model M on D (context N tokens), listening on http://127.0.0.1:PORT"
    let mut lines = BufReader::new(server.0.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("vkml serve ended before listening").unwrap();
        if let Some(at) = line.find("listening on ") {
            break line[at + "listening on ".len()..].to_string();
        }
    };
    assert!(url.starts_with("http://127.0.0.1:"), "binds 127.0.0.1 by default: {url}");
    // Keep reading stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let out = Command::new("python3")
        .arg("-s")
        .arg(&script)
        .args([url.as_str(), "SmolLM2-135M-Instruct.Q4_1"])
        .env("PYTHONPATH", &py)
        .output()
        .unwrap_or_else(|e| panic!("python3 could not be started ({e}): {SETUP}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for check in
        ["chat:", "stream:", "completion:", "wrong type: 400", "unknown model: 404", "too long: 400", "long stop: 400"]
    {
        assert!(stdout.contains(check), "{check} missing from:\n{stdout}");
    }
    assert!(stdout.contains("malformed JSON: 400") && stdout.contains("after a dropped stream"), "{stdout}");
    assert!(server.0.try_wait().unwrap().is_none(), "the server is still up after every request");
}
