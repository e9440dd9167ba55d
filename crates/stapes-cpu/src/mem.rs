//! Large buffers, optionally backed by transparent huge pages.
//!
//! A transcription touches a few hundred MB of fresh memory (weight stores, the embedding
//! table, encoder activations); with 4 KiB pages every first touch is a page fault. Asking for
//! 2 MiB pages (`MADV_HUGEPAGE`, honoured when THP is in `madvise` or `always` mode) cuts the
//! fault count by up to 512×, but on the shared 2-core VM the zeroing of a fresh 2 MiB page
//! measured as costly per byte as the 4 KiB faults it saves, or more (perf, docs/perf-ledger.md),
//! so the advice is opt-in: `STAPES_CPU_HUGEPAGES=1`.

/// Buffers at least this large are advised; smaller ones stay on malloc's reused heap pages.
const HUGE_MIN_BYTES: usize = 4 << 20;

/// `STAPES_CPU_HUGEPAGES=1` turns the advice on.
fn huge_pages_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("STAPES_CPU_HUGEPAGES").is_some_and(|v| v == "1"))
}

/// An empty `Vec` with room for `n` elements (huge-page advised when that is on).
pub fn with_capacity<T>(n: usize) -> Vec<T> {
    let v = Vec::with_capacity(n);
    advise_huge(
        v.as_ptr() as usize,
        n.saturating_mul(std::mem::size_of::<T>()),
    );
    v
}

/// `n` copies of `value` in a [`with_capacity`] buffer.
pub fn filled<T: Clone>(n: usize, value: T) -> Vec<T> {
    let mut v = with_capacity(n);
    v.resize(n, value);
    v
}

/// A copy of `src` in a [`with_capacity`] buffer.
pub fn copied<T: Copy>(src: &[T]) -> Vec<T> {
    let mut v = with_capacity(src.len());
    v.extend_from_slice(src);
    v
}

/// Buffers up to this size come from the heap, where a freed one is reused (see
/// [`keep_freed_buffers`]): the largest activation of a Whisper or Parakeet encoder layer is
/// below it (base's FFN output, 1500×2048 f32, is 12 MB).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HEAP_MAX_BYTES: i32 = 32 << 20;
/// Free memory the heap keeps instead of returning it to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HEAP_KEEP_BYTES: i32 = 256 << 20;

/// Tells glibc's malloc to serve buffers up to [`HEAP_MAX_BYTES`] from the heap and to keep up
/// to [`HEAP_KEEP_BYTES`] of freed memory. With its defaults, an op's multi-megabyte output
/// is a fresh `mmap` (or heap memory trimmed back to the system after the previous op) whose
/// every page faults on first touch; a Whisper tiny.en transcription took ~13k such faults
/// (perf `page-faults`, ~0.03 s of system time) that reuse avoids. Process-wide and once;
/// `STAPES_CPU_MALLOPT=0` leaves malloc as it is.
pub fn keep_freed_buffers() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        if std::env::var_os("STAPES_CPU_MALLOPT").is_some_and(|v| v == "0") {
            return;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes allocator parameters; a rejected value leaves the default.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_MAX_BYTES);
            libc::mallopt(libc::M_TRIM_THRESHOLD, HEAP_KEEP_BYTES);
        }
    });
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
