//! The JSON of an answer, read over a buffer that may end anywhere: each read says whether its value was whole
//! ([`Stop::More`] when the buffer ends inside it), so the reader can take it again with more bytes.

/// A string of the answer: a place in the buffer (UTF-8, no escapes), or an unescaped copy.
#[derive(Debug, Clone, Copy)]
pub(super) enum Text {
    Span(usize, usize),
    Unescaped(usize),
}

/// Why an item could not be read now.
pub(super) enum Stop {
    /// The buffer ends inside it.
    More,
    /// It is malformed: the message, and the offset in the buffer.
    Bad(String, usize),
}

pub(super) type Step<T> = Result<T, Stop>;

/// The bytes of a little-endian word a string's scan must look at, each as its high bit: a quote, a backslash, a
/// control character, or a byte past ASCII. The lowest one flagged is exact (a flag above it may be a borrow's).
pub(super) fn stops_in(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    zero(word ^ (ONES * u64::from(b'"')))
        | zero(word ^ (ONES * u64::from(b'\\')))
        | control
        | (word & HIGH)
}

/// A place in the buffer being read.
pub(super) struct Cursor<'b> {
    pub(super) b: &'b [u8],
    pub(super) i: usize,
}

impl Cursor<'_> {
    pub(super) fn bad(&self, message: &str) -> Stop {
        Stop::Bad(message.to_string(), self.i)
    }

    /// After an item of a list or object: `true` past its closing `close`, `false` past the comma before the next
    /// item; anything else is `message`.
    pub(super) fn at_end(&mut self, close: u8, message: &str) -> Step<bool> {
        match self.peek()? {
            b',' => {
                self.i += 1;
                Ok(false)
            }
            b if b == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(self.bad(message)),
        }
    }

    pub(super) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    pub(super) fn peek(&mut self) -> Step<u8> {
        self.ws();
        self.b.get(self.i).copied().ok_or(Stop::More)
    }

    /// Whether the next byte that is not whitespace is `byte`; it is read past if so.
    pub(super) fn eat(&mut self, byte: u8) -> Step<bool> {
        let next = self.peek()? == byte;
        if next {
            self.i += 1;
        }
        Ok(next)
    }

    pub(super) fn expect(&mut self, byte: u8, what: &str) -> Step<()> {
        if self.eat(byte)? {
            Ok(())
        } else {
            Err(Stop::Bad(format!("expected {what}"), self.i))
        }
    }

    /// An object's key and its colon, after the comma unless it is the `first`.
    pub(super) fn key(&mut self, first: bool, unescaped: &mut Vec<String>) -> Step<Text> {
        if !first {
            self.expect(b',', "',' or the object's end")?;
        }
        let key = self.string(unescaped)?;
        self.expect(b':', "':'")?;
        Ok(key)
    }

    /// A string (the cursor at its quote, whitespace before it skipped).
    pub(super) fn string(&mut self, unescaped: &mut Vec<String>) -> Step<Text> {
        if self.peek()? != b'"' {
            return Err(self.bad("expected a string"));
        }
        let start = self.i + 1;
        // Eight bytes at a time to the first that needs a look: UTF-8 is checked only where a byte is not ASCII.
        let mut end = start;
        let mut ascii = true;
        loop {
            while let Some(word) = self.b.get(end..end + 8) {
                let Ok(word) = <[u8; 8]>::try_from(word) else {
                    break;
                };
                let stops = stops_in(u64::from_le_bytes(word));
                if stops != 0 {
                    end += stops.trailing_zeros() as usize / 8;
                    break;
                }
                end += 8;
            }
            let Some(&b) = self.b.get(end) else {
                return Err(Stop::More);
            };
            match b {
                b'"' | b'\\' => break,
                0..=0x1f => return Err(Stop::Bad("a control character in a string".into(), end)),
                0x80.. => ascii = false,
                _ => {}
            }
            end += 1;
        }
        if self.b[end] == b'"' {
            if !ascii && std::str::from_utf8(&self.b[start..end]).is_err() {
                return Err(Stop::Bad("a string that is not UTF-8".into(), start));
            }
            self.i = end + 1;
            return Ok(Text::Span(start, end));
        }
        // An escape: the string is copied with its escapes undone.
        let mut i = end;
        let mut out = Vec::with_capacity(i - start + 16);
        out.extend_from_slice(&self.b[start..i]);
        loop {
            let Some(&b) = self.b.get(i) else {
                return Err(Stop::More);
            };
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.b.get(i + 1) else {
                        return Err(Stop::More);
                    };
                    i += 2;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let c = self.unicode_escape(&mut i)?;
                            let mut utf8 = [0; 4];
                            out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                        }
                        _ => return Err(Stop::Bad("an invalid escape".into(), i - 2)),
                    }
                }
                b if b < 0x20 => {
                    return Err(Stop::Bad("a control character in a string".into(), i))
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        let Ok(text) = String::from_utf8(out) else {
            return Err(Stop::Bad("a string that is not UTF-8".into(), start));
        };
        self.i = i + 1;
        unescaped.push(text);
        Ok(Text::Unescaped(unescaped.len() - 1))
    }

    /// The character of a `\uXXXX` escape (`i` just past the `u`), with its low surrogate's escape if it needs one.
    pub(super) fn unicode_escape(&self, i: &mut usize) -> Step<char> {
        let hex = |at: usize| -> Step<u32> {
            let digits = self.b.get(at..at + 4).ok_or(Stop::More)?;
            let digits = std::str::from_utf8(digits).ok();
            digits
                .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|d| u32::from_str_radix(d, 16).ok())
                .ok_or_else(|| Stop::Bad("an invalid \\u escape".into(), at))
        };
        let high = hex(*i)?;
        *i += 4;
        if !(0xD800..0xDC00).contains(&high) {
            return char::from_u32(high)
                .ok_or_else(|| Stop::Bad("a lone low surrogate".into(), *i - 6));
        }
        match self.b.get(*i..*i + 2) {
            None if self.b.len() < *i + 2 => return Err(Stop::More),
            Some(b"\\u") => {}
            _ => return Err(Stop::Bad("a lone high surrogate".into(), *i - 6)),
        }
        let low = hex(*i + 2)?;
        if !(0xDC00..0xE000).contains(&low) {
            return Err(Stop::Bad("a lone high surrogate".into(), *i - 6));
        }
        *i += 6;
        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
            .ok_or_else(|| Stop::Bad("an invalid surrogate pair".into(), *i - 12))
    }

    pub(super) fn owned_string(&mut self, unescaped: &mut Vec<String>) -> Step<String> {
        let t = self.string(unescaped)?;
        Ok(self.resolve(t, unescaped))
    }

    pub(super) fn resolve(&self, t: Text, unescaped: &[String]) -> String {
        match t {
            Text::Span(a, b) => String::from_utf8_lossy(&self.b[a..b]).into_owned(),
            Text::Unescaped(i) => unescaped.get(i).cloned().unwrap_or_default(),
        }
    }

    pub(super) fn string_or_null(&mut self, unescaped: &mut Vec<String>) -> Step<Option<String>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Ok(None);
        }
        self.owned_string(unescaped).map(Some)
    }

    /// A list of strings, or null (none).
    pub(super) fn strings_or_null(&mut self, unescaped: &mut Vec<String>) -> Step<Vec<String>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Ok(Vec::new());
        }
        self.expect(b'[', "a list of strings")?;
        let mut out = Vec::new();
        if self.eat(b']')? {
            return Ok(out);
        }
        loop {
            out.push(self.owned_string(unescaped)?);
            if self.at_end(b']', "expected ',' or ']'")? {
                return Ok(out);
            }
        }
    }

    pub(super) fn literal(&mut self, word: &[u8]) -> Step<()> {
        self.ws();
        let have = &self.b[self.i..self.b.len().min(self.i + word.len())];
        if !word.starts_with(have) {
            return Err(self.bad("expected a value"));
        }
        if have.len() < word.len() {
            return Err(Stop::More);
        }
        self.i += word.len();
        Ok(())
    }

    /// A JSON number, as f64.
    pub(super) fn number(&mut self) -> Step<f64> {
        let (start, end) = self.number_text()?;
        let text = std::str::from_utf8(&self.b[start..end]).unwrap_or_default();
        match crate::parse::exposition::parse_float(text) {
            Some(value) if value.is_finite() => Ok(value),
            _ => Err(Stop::Bad("a number out of range".into(), start)),
        }
    }

    /// A JSON number's place (RFC 8259's grammar), read past.
    pub(super) fn number_text(&mut self) -> Step<(usize, usize)> {
        self.ws();
        let b = self.b;
        let start = self.i;
        let mut i = start;
        let digits = |i: &mut usize| -> usize {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - from
        };
        // Where a part must have digits and has none: the number goes on in the next chunk, or is no number.
        let cut_or_bad = |i: usize| {
            if i == b.len() {
                Stop::More
            } else {
                Stop::Bad("expected a number".into(), start)
            }
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let whole = digits(&mut i);
        if whole == 0 {
            return Err(cut_or_bad(i));
        }
        if whole > 1 && b[i - whole] == b'0' {
            return Err(Stop::Bad("a number with a leading zero".into(), start));
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            if digits(&mut i) == 0 {
                return Err(cut_or_bad(i));
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return Err(cut_or_bad(i));
            }
        }
        // Its digits may go on in the next chunk.
        if i == b.len() {
            return Err(Stop::More);
        }
        self.i = i;
        Ok((start, i))
    }

    /// Any value, read for its syntax and dropped.
    pub(super) fn skip_value(&mut self, depth: usize) -> Step<()> {
        let (open, close) = match self.peek()? {
            b'"' => {
                // Its copy, if it had escapes, is dropped with the item's.
                let mut unescaped = Vec::new();
                return self.string(&mut unescaped).map(drop);
            }
            b't' => return self.literal(b"true"),
            b'f' => return self.literal(b"false"),
            b'n' => return self.literal(b"null"),
            b'-' | b'0'..=b'9' => return self.number_text().map(drop),
            b'{' => (b'{', b'}'),
            b'[' => (b'[', b']'),
            _ => return Err(self.bad("expected a value")),
        };
        if depth == 0 {
            return Err(self.bad("nested too deep"));
        }
        self.i += 1;
        if self.eat(close)? {
            return Ok(());
        }
        loop {
            if open == b'{' {
                let mut unescaped = Vec::new();
                self.string(&mut unescaped)?;
                self.expect(b':', "':'")?;
            }
            self.skip_value(depth - 1)?;
            if self.at_end(close, "expected ',' or the end of a list or object")? {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_scan_stops_at_the_first_byte_to_look_at() {
        let stop = |b: u8| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b);
        for b in 0..=255u8 {
            for at in 0..8 {
                // Any byte may follow the first: a borrow may flag bytes above it, never below.
                for after in [b'a', 0, b'"', 0xff] {
                    let mut word = [b'a'; 8];
                    word[at] = b;
                    word[at + 1..].fill(after);
                    let flags = stops_in(u64::from_le_bytes(word));
                    let first = (flags != 0).then(|| flags.trailing_zeros() as usize / 8);
                    let expected = (0..8).find(|&i| stop(word[i]));
                    assert_eq!(first, expected, "{word:?}");
                }
            }
        }
    }
}
