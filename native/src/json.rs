//! A small validating JSON reader over one record's bytes (RFC 8259), for the few shapes an
//! OIP payload has: objects read key by key, strings borrowed unless escaped, numbers as their
//! text (an int and a float told apart, as msgspec tells them), anything else skipped but still
//! checked. It never accepts what is not JSON: whatever it does not take is `Err(Decline)`, and
//! the Python paths judge the record (a general-purpose parser read every key and value twice
//! for the layout's checks; this reads each once).
use std::borrow::Cow;

use crate::oip::{Decline, Res};

/// Nesting past this declines (msgspec has its own limit; the careful path judges).
const MAX_DEPTH: u32 = 64;

pub struct Reader<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    depth: u32,
}

/// A number's text and whether it is an integer (no fraction, no exponent).
pub struct Number<'a> {
    pub text: &'a str,
    pub int: bool,
}

impl<'a> Reader<'a> {
    pub fn new(text: &'a str) -> Self {
        Reader {
            s: text,
            b: text.as_bytes(),
            i: 0,
            depth: 0,
        }
    }

    /// Where the reader is, to come back to with [`Self::reset`].
    pub fn mark(&self) -> (usize, u32) {
        (self.i, self.depth)
    }

    pub fn reset(&mut self, mark: (usize, u32)) {
        (self.i, self.depth) = mark;
    }

    fn ws(&mut self) {
        while let Some(c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.i += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    pub fn peek(&mut self) -> Res<u8> {
        self.ws();
        self.b.get(self.i).copied().ok_or(Decline)
    }

    fn eat(&mut self, c: u8) -> Res<()> {
        if self.peek()? != c {
            return Err(Decline);
        }
        self.i += 1;
        Ok(())
    }

    /// Nothing but whitespace left.
    pub fn end(&mut self) -> Res<()> {
        self.ws();
        if self.i == self.b.len() {
            Ok(())
        } else {
            Err(Decline)
        }
    }

    /// `null` if it comes next (consumed), else false.
    pub fn null(&mut self) -> Res<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    fn literal(&mut self, word: &[u8]) -> Res<()> {
        if self.b.get(self.i..self.i + word.len()) != Some(word) {
            return Err(Decline);
        }
        self.i += word.len();
        Ok(())
    }

    pub fn boolean(&mut self) -> Res<bool> {
        match self.peek()? {
            b't' => self.literal(b"true").map(|()| true),
            b'f' => self.literal(b"false").map(|()| false),
            _ => Err(Decline),
        }
    }

    /// An object's next key (`None` at its end); call after `{` was eaten by [`Self::object`].
    pub fn key(&mut self, first: &mut bool) -> Res<Option<Cow<'a, str>>> {
        if self.peek()? == b'}' {
            self.i += 1;
            self.depth -= 1;
            return Ok(None);
        }
        if !*first {
            self.eat(b',')?;
        }
        *first = false;
        let k = self.string()?;
        self.eat(b':')?;
        Ok(Some(k))
    }

    pub fn object(&mut self) -> Res<()> {
        self.eat(b'{')?;
        self.enter()
    }

    pub fn array(&mut self) -> Res<()> {
        self.eat(b'[')?;
        self.enter()
    }

    fn enter(&mut self) -> Res<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Decline);
        }
        Ok(())
    }

    /// Whether an array has another item (after `[` was eaten by [`Self::array`]).
    pub fn more(&mut self, first: &mut bool) -> Res<bool> {
        if self.peek()? == b']' {
            self.i += 1;
            self.depth -= 1;
            return Ok(false);
        }
        if !*first {
            self.eat(b',')?;
        }
        *first = false;
        Ok(true)
    }

    /// The text between two byte positions (each next to an ASCII byte: a char boundary).
    fn text(&self, from: usize, to: usize) -> Res<&'a str> {
        self.s.get(from..to).ok_or(Decline)
    }

    /// Bytes up to the next `"`, `\\` or control character (or the end).
    fn plain_run(&mut self) {
        let rest = &self.b[self.i..];
        self.i += rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .unwrap_or(rest.len());
    }

    pub fn string(&mut self) -> Res<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        self.plain_run();
        match self.b.get(self.i) {
            Some(b'"') => {
                let s = self.text(start, self.i)?;
                self.i += 1;
                Ok(Cow::Borrowed(s))
            }
            Some(b'\\') => self.escaped(start),
            _ => Err(Decline), // a raw control character, or no end
        }
    }

    /// The rest of a string with escapes, from `start` (its first character).
    fn escaped(&mut self, start: usize) -> Res<Cow<'a, str>> {
        let mut out = String::from(self.text(start, self.i)?);
        loop {
            match self.b.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    let e = *self.b.get(self.i + 1).ok_or(Decline)?;
                    self.i += 2;
                    out.push(match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode()?,
                        _ => return Err(Decline),
                    });
                }
                _ => return Err(Decline),
            }
            let run = self.i;
            self.plain_run();
            out.push_str(self.text(run, self.i)?);
        }
    }

    fn hex4(&mut self) -> Res<u32> {
        let h = self.b.get(self.i..self.i + 4).ok_or(Decline)?;
        if !h.iter().all(u8::is_ascii_hexdigit) {
            return Err(Decline);
        }
        let s = self.text(self.i, self.i + 4)?;
        self.i += 4;
        u32::from_str_radix(s, 16).map_err(|_| Decline)
    }

    /// `\uXXXX` (its `\u` read), a surrogate pair whole; a lone surrogate declines.
    fn unicode(&mut self) -> Res<char> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                return Err(Decline);
            }
            self.i += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(Decline);
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or(Decline)
    }

    /// A number, checked against JSON's grammar: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`.
    pub fn number(&mut self) -> Res<Number<'a>> {
        self.ws();
        let start = self.i;
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Decline),
        }
        let mut int = true;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            self.some_digits()?;
            int = false;
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.some_digits()?;
            int = false;
        }
        Ok(Number {
            text: self.text(start, self.i)?,
            int,
        })
    }

    fn digits(&mut self) {
        while matches!(self.b.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Res<()> {
        let at = self.i;
        self.digits();
        if self.i == at {
            return Err(Decline);
        }
        Ok(())
    }

    /// Any value, checked and passed over.
    pub fn skip(&mut self) -> Res<()> {
        match self.peek()? {
            b'{' => {
                self.object()?;
                let mut first = true;
                while self.key(&mut first)?.is_some() {
                    self.skip()?;
                }
            }
            b'[' => {
                self.array()?;
                let mut first = true;
                while self.more(&mut first)? {
                    self.skip()?;
                }
            }
            b'"' => {
                self.string()?;
            }
            b't' | b'f' => {
                self.boolean()?;
            }
            b'n' => self.literal(b"null")?,
            _ => {
                self.number()?;
            }
        }
        Ok(())
    }
}
