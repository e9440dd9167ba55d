//! `--verbose` prints where the whole process spent its time (stapes::profile): the load phases,
//! the transcription with its token count, the derived split, in start order; and `bench --json`
//! carries the same record.

mod cli_common;
use cli_common::{cache, repo, stapes, stderr};

fn tiny_en() -> String {
    let p = cache().join("models/whisper-tiny.en");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh all",
        p.display()
    );
    p.display().to_string()
}

/// (start ms, name) of each profile line, in printed order.
fn phase_lines(err: &str) -> Vec<(f64, String)> {
    let start = err
        .find("profile (wall ms")
        .unwrap_or_else(|| panic!("no profile in stderr:\n{err}"));
    err[start..]
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let t: f64 = it.next()?.parse().ok()?;
            let _ms: f64 = it.next()?.parse().ok()?;
            Some((t, it.next()?.to_string()))
        })
        .collect()
}

/// `stapes [--verbose] transcribe` of jfk with tiny.en, greedy, on the CPU.
fn jfk_greedy_on_cpu(verbose: bool) -> std::process::Output {
    let jfk = repo().join("samples/jfk.wav");
    let m = tiny_en();
    let mut args = vec!["transcribe"];
    if verbose {
        args.push("--verbose");
    }
    let jfk = jfk.to_str().unwrap_or_default();
    args.extend(["--device", "cpu", "--beam-size", "1", "-m", &m, jfk]);
    stapes(&args)
}

#[test]
fn verbose_transcribe_prints_the_phase_profile() {
    let o = jfk_greedy_on_cpu(true);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let phases = phase_lines(&err);
    let names: Vec<&str> = phases.iter().map(|(_, n)| n.as_str()).collect();
    for want in [
        "model.read",
        "device.open",
        "model.upload",
        "audio.load",
        "transcribe",
        "output",
        "teardown",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let at = |n: &str| phases.iter().find(|(_, x)| x == n).map(|(t, _)| *t);
    assert!(at("model.read") < at("transcribe") && at("transcribe") < at("teardown"));
    assert!(
        phases.windows(2).all(|w| w[0].0 <= w[1].0),
        "not in start order"
    );
    // jfk greedy on tiny.en: 20-odd text tokens in one segment
    let tokens: usize = err
        .lines()
        .find(|l| l.contains(" transcribe ") && l.contains("tokens="))
        .and_then(|l| l.split("tokens=").nth(1))
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token count:\n{err}"));
    assert!((15..40).contains(&tokens), "{tokens} tokens");
    assert!(err.contains("first transcription:") && err.contains("total "));
}

#[test]
fn quiet_transcribe_prints_no_profile() {
    let o = jfk_greedy_on_cpu(false);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("profile (wall ms"));
}

#[test]
fn bench_json_carries_the_profile() {
    let m = tiny_en();
    let o = stapes(&[
        "bench",
        "--device",
        "cpu",
        "-m",
        &m,
        "--iters",
        "1",
        "--batch",
        "0",
        "--decode-tokens",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("bench --json prints one JSON object");
    let phases = v["profile"]["phases"].as_array().expect("profile.phases");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["name"].as_str()).collect();
    for want in ["model.read", "device.open", "model.upload"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(v["profile"]["elapsed_ms"].as_f64().is_some_and(|t| t > 0.0));
}
