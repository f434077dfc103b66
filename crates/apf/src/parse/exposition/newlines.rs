//! Where a chunk's lines end, found 64 bytes at a time.

/// The newlines of one chunk, one bit per byte (bit `i % 64` of word `i / 64`). Most of a body is lines not read, each
/// needing only its end found: a `memchr` per line (some 140 bytes) spent most of its time setting up its search, where
/// a pass with the CPU's widest compare finds 64 bytes' newlines at once. The parse of 100 MB of the 1.34 capture, each
/// 128 KiB read just copied in as a socket's read leaves it: 18.6-24.0 ms against 21.1-34.2 ms by a `memchr` per line
/// (medians 20.0 and 23.5, eight runs alternately, the copies alone about 8-12 ms; `cargo bench -p apf --bench parse
/// -- 'copied in'`).
#[derive(Default)]
pub(super) struct Newlines {
    /// The words of the chunk's bytes indexed so far: a window at a time, so that a chunk read from memory is indexed
    /// while its lines are handled, not in a pass of its own ahead of them (which cost 100 MB fed from memory in 64 KiB
    /// chunks 23.2 ms against 16.9 by a `memchr` per line; by windows 16.1 ms, five runs alternately).
    words: Vec<u64>,
}

/// Bytes indexed at a time: a few cache lines' worth of lines, still in cache when their lines are handled.
const WINDOW: usize = 2048;

impl Newlines {
    /// Forgets the chunk indexed before: the next [`Self::find`] is in a new chunk.
    pub(super) fn reset(&mut self) {
        self.words.clear();
    }

    /// The position of the first newline at or after `from` in `chunk` (the same chunk since the last reset).
    #[inline]
    pub(super) fn find(&mut self, chunk: &[u8], from: usize) -> Option<usize> {
        // The bytes before `from` in its word are masked off; later words are read whole.
        let (mut word, mut mask) = (from / 64, u64::MAX << (from % 64));
        loop {
            while word >= self.words.len() {
                self.index_window(chunk)?;
            }
            let bits = self.words[word] & mask;
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            (word, mask) = (word + 1, u64::MAX);
        }
    }

    /// Indexes the next window of `chunk`; `None` once all of it is.
    #[cold]
    fn index_window(&mut self, chunk: &[u8]) -> Option<()> {
        let rest = chunk.get(self.words.len() * 64..)?;
        let window = &rest[..rest.len().min(WINDOW)];
        if window.is_empty() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { index_avx2(window, &mut self.words) };
            return Some(());
        }
        index_portable(window, &mut self.words);
        Some(())
    }
}

/// Appends `window`'s words (the last one padded with bytes that are not newlines). Where AVX2 is missing (or on
/// another architecture): as fast as a `memchr` per line, no faster.
fn index_portable(window: &[u8], words: &mut Vec<u64>) {
    let first = words.len();
    words.resize(first + window.len().div_ceil(64), 0);
    for i in memchr::memchr_iter(b'\n', window) {
        words[first + i / 64] |= 1 << (i % 64);
    }
}

/// As [`index_portable`].
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn index_avx2(window: &[u8], words: &mut Vec<u64>) {
    let blocks = window.chunks_exact(64);
    let tail = blocks.remainder();
    for block in blocks {
        // SAFETY: the block has 64 bytes; AVX2 as vouched for.
        words.push(unsafe { newline_bits_avx2(block) });
    }
    if !tail.is_empty() {
        // Padded with bytes that are not newlines.
        let mut last = [0u8; 64];
        last[..tail.len()].copy_from_slice(tail);
        // SAFETY: as above.
        words.push(unsafe { newline_bits_avx2(&last) });
    }
}

/// Bit i set when byte i of the block's first 64 is a newline.
///
/// # Safety
/// The CPU must have AVX2, and `block` at least 64 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn newline_bits_avx2(block: &[u8]) -> u64 {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
    };
    debug_assert!(block.len() >= 64);
    let newline = _mm256_set1_epi8(b'\n' as i8);
    let at = block.as_ptr();
    // SAFETY: two unaligned loads of 32 bytes, both within the block's first 64.
    let (low, high) = unsafe {
        (
            _mm256_loadu_si256(at.cast::<__m256i>()),
            _mm256_loadu_si256(at.add(32).cast::<__m256i>()),
        )
    };
    let low = _mm256_movemask_epi8(_mm256_cmpeq_epi8(low, newline)) as u32 as u64;
    let high = _mm256_movemask_epi8(_mm256_cmpeq_epi8(high, newline)) as u32 as u64;
    low | high << 32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every newline, found from every position, in chunks of every length around the 64-byte blocks and the
    /// windows, the same answer a `memchr` from that position gives; the portable index the same as AVX2's.
    #[test]
    fn finds_what_memchr_finds_from_every_position() {
        let text: Vec<u8> = (0..5000u32)
            .map(|i| match i % 7 {
                0 | 3 if i % 5 != 1 && !(2100..2300).contains(&i) => b'\n',
                _ => b'a' + (i % 26) as u8,
            })
            .collect();
        for len in [
            0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 300, 2047, 2048, 2049, 4096, 5000,
        ] {
            let chunk = &text[..len];
            let mut portable = Vec::new();
            for window in chunk.chunks(WINDOW) {
                index_portable(window, &mut portable);
            }
            let mut newlines = Newlines::default();
            // From one position to the next, as the parser asks; then from anywhere, the window indexed first.
            let mut from = 0;
            while let Some(at) = newlines.find(chunk, from) {
                assert_eq!(
                    memchr::memchr(b'\n', &chunk[from..]),
                    Some(at - from),
                    "len {len}"
                );
                from = at + 1;
            }
            assert_eq!(
                memchr::memchr(b'\n', &chunk[from.min(len)..]),
                None,
                "len {len}"
            );
            assert_eq!(newlines.words, portable, "len {len}");
            for from in 0..=len + 70 {
                let expected = chunk
                    .get(from..)
                    .and_then(|rest| memchr::memchr(b'\n', rest))
                    .map(|i| from + i);
                let mut fresh = Newlines::default();
                assert_eq!(fresh.find(chunk, from), expected, "len {len}, from {from}");
                assert_eq!(
                    newlines.find(chunk, from),
                    expected,
                    "len {len}, from {from}"
                );
            }
        }
    }

    #[test]
    fn a_reset_forgets_the_chunk_before() {
        let mut newlines = Newlines::default();
        let first = [b'\n'; 200];
        assert_eq!(newlines.find(&first, 150), Some(150));
        newlines.reset();
        assert_eq!(newlines.find(b"ab\ncd", 0), Some(2));
        assert_eq!(newlines.find(b"ab\ncd", 3), None);
        assert_eq!(newlines.find(b"ab\ncd", 100), None);
    }
}
