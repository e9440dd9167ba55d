//! Large buffers backed by transparent huge pages where the kernel offers them.
//!
//! A transcription touches a few hundred MB of fresh memory (weight stores, the embedding
//! table, encoder activations). With 4 KiB pages every first touch is a page fault: ~70k faults
//! for whisper-tiny, ~0.3 s of system time on the 2-core box (perf, docs/perf-ledger.md). Asking
//! for 2 MiB pages (`MADV_HUGEPAGE`, honoured when THP is in `madvise` or `always` mode) cuts
//! that by up to 512×.

/// Buffers at least this large are advised; smaller ones stay on malloc's reused heap pages.
const HUGE_MIN_BYTES: usize = 4 << 20;

/// `STAPES_CPU_HUGEPAGES=0` turns the advice off (for A/B timings: on a VM whose free memory
/// is not backed by the host yet, a 2 MiB first touch can cost more than 512 small ones).
fn huge_pages_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("STAPES_CPU_HUGEPAGES").is_none_or(|v| v != "0"))
}

/// An empty `Vec` with room for `n` elements whose pages may be huge pages.
pub fn with_capacity<T>(n: usize) -> Vec<T> {
    let v = Vec::with_capacity(n);
    advise_huge(
        v.as_ptr() as usize,
        n.saturating_mul(std::mem::size_of::<T>()),
    );
    v
}

/// `n` copies of `value` in a huge-page-advised buffer.
pub fn filled<T: Clone>(n: usize, value: T) -> Vec<T> {
    let mut v = with_capacity(n);
    v.resize(n, value);
    v
}

/// A copy of `src` in a huge-page-advised buffer.
pub fn copied<T: Copy>(src: &[T]) -> Vec<T> {
    let mut v = with_capacity(src.len());
    v.extend_from_slice(src);
    v
}

#[cfg(target_os = "linux")]
fn advise_huge(addr: usize, bytes: usize) {
    if bytes < HUGE_MIN_BYTES || !huge_pages_wanted() {
        return;
    }
    // madvise wants a page-aligned start; rounding down may take in the allocator's header
    // page, which the advice cannot harm.
    const PAGE: usize = 4096;
    let start = addr & !(PAGE - 1);
    let len = addr + bytes - start;
    // SAFETY: advice only, on memory this process has mapped (the Vec's allocation and the
    // page it starts in); MADV_HUGEPAGE never changes contents. A failure (THP compiled out,
    // not an anonymous mapping) just leaves 4 KiB pages.
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_addr: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    #[test]
    fn buffers_hold_what_was_asked() {
        let v = super::filled(3 << 20, 1.5f32);
        assert_eq!(v.len(), 3 << 20);
        assert!(v.iter().all(|&x| x == 1.5));
        let c = super::copied(&v[..1000]);
        assert_eq!(c, v[..1000]);
        assert!(super::with_capacity::<u8>(0).is_empty());
    }
}
