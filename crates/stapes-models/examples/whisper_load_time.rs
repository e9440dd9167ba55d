//! Times `load_checkpoint` (what every transcription pays before the first frame), and for a
//! CTranslate2 directory its parts (tokenizer, model.bin parse, f16 → f32):
//! `cargo run --release -p stapes-models --example whisper_load_time -- MODEL [N]`

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: whisper_load_time MODEL [N]");
        std::process::exit(2);
    };
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let dir = std::path::Path::new(path);
    if dir.is_dir() {
        let t = Instant::now();
        // The vocabulary size only pads missing timestamp tokens; the part timed is the parse.
        let tok = stapes_models::whisper::tokenizer::WhisperTokenizer::from_dir(dir, 0);
        println!(
            "tokenizer alone: {:.1} ms ({})",
            t.elapsed().as_secs_f64() * 1e3,
            tok.is_ok()
        );
        let t = Instant::now();
        let f = stapes_formats::ct2::read(&dir.join("model.bin"));
        println!(
            "model.bin parse: {:.1} ms ({})",
            t.elapsed().as_secs_f64() * 1e3,
            f.is_ok()
        );
        if let Ok(f) = f {
            for _ in 0..3 {
                let t = Instant::now();
                let n: usize = f.tensors().map(|(_, t)| t.to_f32().len()).sum();
                println!(
                    "to_f32 of {n} values: {:.1} ms",
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
        }
    }
    for _ in 0..n {
        let t = Instant::now();
        match stapes_models::whisper::weights::load_checkpoint(std::path::Path::new(path)) {
            Ok(ck) => println!(
                "{} ({}): {:.1} ms",
                path,
                ck.format,
                t.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(3);
            }
        }
    }
}
