//! Prints `vkml_quant::gguf::inspect::render` for a GGUF file: `cargo run -p vkml-quant --example gguf_inspect FILE`.
fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: gguf_inspect FILE.gguf");
        std::process::exit(2);
    };
    match vkml_quant::gguf::GgufFile::open(&path) {
        Ok(f) => print!("{}", vkml_quant::gguf::inspect::render(&f)),
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    }
}
