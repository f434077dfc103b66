//! Protobuf's wire format, as far as metrics.proto uses it: varints (whole, or cut by a chunk's end), and the fields
//! of a whole message.

/// Wire types (protobuf encoding): groups (3, 4) are not used by metrics.proto and are not read.
pub(super) const VARINT: u64 = 0;
pub(super) const I64: u64 = 1;
pub(super) const LEN: u64 = 2;
pub(super) const I32: u64 = 5;

/// A varint at the start of `bytes`: its value and length, or too few bytes (`Short`), or more than ten (`Bad`).
pub(super) enum Varint {
    Done(u64, usize),
    Short,
    Bad,
}

pub(super) fn varint(bytes: &[u8]) -> Varint {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        if i == 9 && b > 1 {
            return Varint::Bad;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Varint::Done(value, i + 1);
        }
    }
    if bytes.len() >= 10 {
        Varint::Bad
    } else {
        Varint::Short
    }
}

/// A varint read from `chunk[*pos..end]`, continuing the one in `partial` that a previous chunk cut. `None`: the
/// bytes ran out before its end (they are kept in `partial`).
pub(super) fn stream_varint(
    partial: &mut Vec<u8>,
    chunk: &[u8],
    pos: &mut usize,
    end: usize,
) -> Option<Result<u64, ()>> {
    if partial.is_empty() {
        return match varint(&chunk[*pos..end]) {
            Varint::Done(v, n) => {
                *pos += n;
                Some(Ok(v))
            }
            Varint::Bad => Some(Err(())),
            Varint::Short => {
                partial.extend_from_slice(&chunk[*pos..end]);
                *pos = end;
                None
            }
        };
    }
    while *pos < end {
        partial.push(chunk[*pos]);
        *pos += 1;
        match varint(partial) {
            Varint::Done(v, _) => {
                partial.clear();
                return Some(Ok(v));
            }
            Varint::Bad => {
                partial.clear();
                return Some(Err(()));
            }
            Varint::Short => {}
        }
    }
    None
}

/// One field of a whole message.
#[derive(Clone, Copy)]
pub(super) enum Value<'a> {
    Varint(u64),
    Fixed(u64),
    Bytes(&'a [u8]),
}

/// The fields of a whole message, in order; an error ends them.
pub(super) struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

pub(super) fn fields(bytes: &[u8]) -> Fields<'_> {
    Fields { bytes, pos: 0 }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let item = self.read();
        if item.is_err() {
            self.pos = self.bytes.len();
        }
        Some(item)
    }
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, &'static str> {
        match varint(&self.bytes[self.pos..]) {
            Varint::Done(v, n) => {
                self.pos += n;
                Ok(v)
            }
            Varint::Short => Err("a varint cut by the message's end"),
            Varint::Bad => Err("a varint longer than ten bytes"),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or("a field longer than its message")?;
        let taken = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(taken)
    }

    fn read(&mut self) -> Result<(u64, Value<'a>), &'static str> {
        let tag = self.varint()?;
        let field = tag >> 3;
        if field == 0 {
            return Err("a field numbered 0");
        }
        let value = match tag & 7 {
            VARINT => Value::Varint(self.varint()?),
            I64 => Value::Fixed(u64::from_le_bytes(
                self.take(8)?.try_into().map_err(|_| "a short double")?,
            )),
            I32 => Value::Fixed(u64::from(u32::from_le_bytes(
                self.take(4)?.try_into().map_err(|_| "a short fixed32")?,
            ))),
            LEN => {
                let n = usize::try_from(self.varint()?)
                    .map_err(|_| "a field longer than its message")?;
                Value::Bytes(self.take(n)?)
            }
            _ => return Err("a group or an unknown wire type"),
        };
        Ok((field, value))
    }
}

/// A `double` field: its bits as written (proto2 reads a missing one as 0).
pub(super) fn double(value: Value<'_>) -> Result<f64, &'static str> {
    match value {
        Value::Fixed(bits) => Ok(f64::from_bits(bits)),
        _ => Err("a double field of another wire type"),
    }
}

pub(super) fn bytes(value: Value<'_>) -> Result<&[u8], &'static str> {
    match value {
        Value::Bytes(b) => Ok(b),
        _ => Err("a message or string field of another wire type"),
    }
}

pub(super) fn unsigned(value: Value<'_>) -> Result<u64, &'static str> {
    match value {
        Value::Varint(v) => Ok(v),
        _ => Err("a varint field of another wire type"),
    }
}
