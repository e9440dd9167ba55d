//! Compiles every kernel file to machine code for one architecture into the disk cache
//! (`$STAPES_CACHE/cuda`), on a machine without a GPU: a device run that carries this cache
//! loads every module at once instead of compiling each at first use.
//! Usage: `STAPES_CACHE=DIR cargo run --release -p stapes-cuda --example precompile [compute_90]`
use std::process::ExitCode;

fn main() -> ExitCode {
    let arch: &'static str = match std::env::args().nth(1).as_deref() {
        None | Some("compute_90") => "compute_90",
        Some("compute_80") => "compute_80",
        Some("compute_89") => "compute_89",
        Some(other) => {
            eprintln!(
                "precompile: unknown architecture {other:?} (compute_80, compute_89, compute_90)"
            );
            return ExitCode::from(2);
        }
    };
    for f in stapes_cuda::kernels::FILES {
        match stapes_cuda::kernels::compile_cubin(f, arch) {
            Ok(bin) => println!(
                "{}.cu -> {} bytes of {arch} machine code",
                f.name,
                bin.len()
            ),
            Err(e) => {
                eprintln!("precompile: {}.cu: {e}", f.name);
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
