//! Wall time and peak memory of `load_file` on the files given.
//! `cargo run --release -p stapes-audio --example decode_time FILE…`
fn main() {
    for p in std::env::args().skip(1) {
        let t = std::time::Instant::now();
        match stapes_audio::load_file(std::path::Path::new(&p)) {
            Ok(x) => println!(
                "{p}: {:.1} s of audio in {:.0} ms",
                x.len() as f64 / 16_000.0,
                t.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => println!("{p}: {e}"),
        }
    }
}
