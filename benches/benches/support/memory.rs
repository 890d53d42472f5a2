//! What a benchmark reads of its own memory: the resident set, and the
//! bytes held in malloc'd blocks (which tells a leak from fragmentation).

/// The resident set of this process, in bytes (`/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// glibc's `struct mallinfo2`.
#[repr(C)]
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

extern "C" {
    fn mallinfo2() -> MallInfo2;
}

/// Bytes the program holds in malloc'd blocks (all arenas, and blocks
/// mapped on their own): what the resident set would be without the
/// allocator's free memory. Tells a leak (this grows) from fragmentation
/// (only the resident set grows).
// Not every bench that includes this file reads it.
#[allow(dead_code)]
pub fn heap_in_use_bytes() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics (glibc 2.33
    // and later; this machine has 2.36).
    let m = unsafe { mallinfo2() };
    (m.uordblks + m.hblkhd) as u64
}
