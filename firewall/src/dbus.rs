//! A small D-Bus client over the system bus's unix socket, for firewalld: method calls with
//! string, integer, string-array, `a(ssss)` and dictionary arguments, replies decoded by their
//! signature, and signals received after a match rule. Written over `std` alone, so the one
//! static binary needs no libdbus and no async runtime; it speaks only what the host asks of
//! firewalld.
//!
//! The bus is found as every D-Bus client finds it: `DBUS_SYSTEM_BUS_ADDRESS` (a
//! `unix:path=…` address), else `/run/dbus/system_bus_socket`.

use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Where the system bus listens when the environment names no other.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// How long one call may wait for its reply (firewalld's reload answers in a few seconds).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

std::thread_local! {
    /// A system bus address this thread uses instead of the environment's (see
    /// [`with_system_bus`]).
    static SYSTEM_BUS_HERE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's system bus at `address` (a `unix:path=…` address), whatever the
/// environment says: a process that serves several machines' buses (the lab's tests) cannot
/// change its environment under its other threads.
pub fn with_system_bus<T>(address: &str, f: impl FnOnce() -> T) -> T {
    let before = SYSTEM_BUS_HERE.with(|a| a.replace(Some(address.to_string())));
    let out = f();
    SYSTEM_BUS_HERE.with(|a| *a.borrow_mut() = before);
    out
}

/// A decoded D-Bus value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I16(i16),
    U16(u16),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    Double(f64),
    /// A string, an object path or a signature.
    Str(String),
    Array(Vec<Value>),
    /// A struct or a dictionary entry.
    Struct(Vec<Value>),
    Variant(Box<Value>),
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::Variant(v) => v.as_str(),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Variant(v) => v.as_bool(),
            _ => None,
        }
    }

    /// An array of strings (`as`), or `None` for anything else.
    pub fn as_strs(&self) -> Option<Vec<String>> {
        match self {
            Value::Array(items) => items.iter().map(|v| v.as_str().map(String::from)).collect(),
            Value::Variant(v) => v.as_strs(),
            _ => None,
        }
    }

    /// A dictionary's value under `key`, for `a{s…}`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Array(items) => items.iter().find_map(|e| match e {
                Value::Struct(kv) if kv.len() == 2 && kv[0].as_str() == Some(key) => Some(&kv[1]),
                _ => None,
            }),
            Value::Variant(v) => v.get(key),
            _ => None,
        }
    }
}

/// An argument of a call.
#[derive(Debug, Clone)]
pub enum Arg<'a> {
    Str(&'a str),
    I32(i32),
    /// `a{sv}` whose values are strings, integers, string arrays or `a(ssss)`.
    Dict(Vec<(&'a str, Arg<'a>)>),
    /// `as`.
    Strs(Vec<&'a str>),
    /// `a(ssss)`: firewalld's forward ports (port, protocol, to-port, to-address).
    StrQuads(Vec<[&'a str; 4]>),
}

impl Arg<'_> {
    fn signature(&self) -> String {
        match self {
            Arg::Str(_) => "s".into(),
            Arg::I32(_) => "i".into(),
            Arg::Dict(_) => "a{sv}".into(),
            Arg::Strs(_) => "as".into(),
            Arg::StrQuads(_) => "a(ssss)".into(),
        }
    }
}

/// A message read from the bus.
#[derive(Debug, Clone)]
pub struct Message {
    pub kind: u8,
    pub serial: u32,
    pub reply_to: Option<u32>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error: Option<String>,
    pub body: Vec<Value>,
}

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;
const SIGNAL: u8 = 4;

/// One connection to the system bus.
pub struct Bus {
    sock: UnixStream,
    serial: u32,
    /// Signals that arrived while a reply was awaited.
    signals: VecDeque<Message>,
    address: String,
}

fn bus_error(address: &str, reason: impl std::fmt::Display) -> Error {
    Error::Dbus {
        what: format!("the system bus at {address}"),
        reason: reason.to_string(),
    }
}

impl Bus {
    /// Connects to the system bus, authenticates as this process's user and says hello.
    pub fn system() -> Result<Bus> {
        let address = SYSTEM_BUS_HERE
            .with(|a| a.borrow().clone())
            .or_else(|| std::env::var("DBUS_SYSTEM_BUS_ADDRESS").ok())
            .and_then(|a| {
                a.split(';').find_map(|one| {
                    let rest = one.strip_prefix("unix:")?;
                    rest.split(',')
                        .find_map(|kv| kv.strip_prefix("path="))
                        .map(String::from)
                })
            })
            .unwrap_or_else(|| SYSTEM_BUS.to_string());
        let mut sock = UnixStream::connect(&address).map_err(|e| bus_error(&address, e))?;
        sock.set_read_timeout(Some(CALL_DEADLINE))
            .map_err(|e| bus_error(&address, e))?;
        let uid = nix::unistd::getuid().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        sock.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())
            .map_err(|e| bus_error(&address, e))?;
        let line = read_line(&mut sock).map_err(|e| bus_error(&address, e))?;
        if !line.starts_with("OK ") {
            return Err(bus_error(
                &address,
                format!("authentication refused: {line}"),
            ));
        }
        sock.write_all(b"BEGIN\r\n")
            .map_err(|e| bus_error(&address, e))?;
        let mut bus = Bus {
            sock,
            serial: 0,
            signals: VecDeque::new(),
            address,
        };
        bus.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Hello",
            &[],
        )?;
        Ok(bus)
    }

    /// The socket, for a caller that polls it for signals.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.sock.as_raw_fd()
    }

    /// Calls `interface.member` on `path` of `dest` and waits for its reply; an error reply is
    /// an error naming the method and firewalld's message.
    pub fn call(
        &mut self,
        dest: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<Value>> {
        self.serial += 1;
        let serial = self.serial;
        let msg = encode_call(serial, dest, path, interface, member, args);
        self.sock
            .write_all(&msg)
            .map_err(|e| bus_error(&self.address, e))?;
        let deadline = Instant::now() + CALL_DEADLINE;
        loop {
            if Instant::now() > deadline {
                return Err(Error::Dbus {
                    what: format!("{interface}.{member}"),
                    reason: format!("no reply within {} s", CALL_DEADLINE.as_secs()),
                });
            }
            let m = self.read_message()?;
            match m.kind {
                SIGNAL => self.signals.push_back(m),
                METHOD_RETURN if m.reply_to == Some(serial) => return Ok(m.body),
                ERROR if m.reply_to == Some(serial) => {
                    return Err(Error::DbusReply {
                        what: format!("{interface}.{member}"),
                        name: m.error.unwrap_or_default(),
                        message: m
                            .body
                            .first()
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    })
                }
                _ => {}
            }
        }
    }

    /// Makes reads wait without a deadline: for a listener that does nothing but wait for
    /// signals (a call still fails when the bus goes away).
    pub fn wait_forever(&mut self) -> Result<()> {
        self.sock
            .set_read_timeout(None)
            .map_err(|e| bus_error(&self.address, e))
    }

    /// Asks the bus to deliver signals matching `rule` (a D-Bus match rule).
    pub fn add_match(&mut self, rule: &str) -> Result<()> {
        self.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "AddMatch",
            &[Arg::Str(rule)],
        )
        .map(|_| ())
    }

    /// The next signal: one that arrived during a call, else one read now (blocking up to the
    /// socket's timeout).
    pub fn next_signal(&mut self) -> Result<Message> {
        if let Some(m) = self.signals.pop_front() {
            return Ok(m);
        }
        loop {
            let m = self.read_message()?;
            if m.kind == SIGNAL {
                return Ok(m);
            }
        }
    }

    /// Signals already received and not yet taken.
    pub fn queued(&self) -> usize {
        self.signals.len()
    }

    fn read_message(&mut self) -> Result<Message> {
        let mut fixed = [0u8; 16];
        self.sock
            .read_exact(&mut fixed)
            .map_err(|e| bus_error(&self.address, e))?;
        let total = message_len(&fixed).map_err(|e| bus_error(&self.address, e))?;
        // Read as the bytes arrive: the lengths in the header size nothing before they are there.
        let mut whole = fixed.to_vec();
        (&mut self.sock)
            .take((total - fixed.len()) as u64)
            .read_to_end(&mut whole)
            .map_err(|e| bus_error(&self.address, e))?;
        if whole.len() != total {
            return Err(bus_error(
                &self.address,
                "the bus closed in the middle of a message",
            ));
        }
        decode_message(&whole)
    }
}

/// The most values nest inside each other, as the D-Bus specification limits them (32 arrays
/// and 32 structs); a variant holding a variant holding … would otherwise recurse until the
/// stack ran out.
const MAX_DEPTH: usize = 64;

/// The length of the whole message whose first 16 bytes are `fixed`, from the body's and the
/// header fields' lengths.
fn message_len(fixed: &[u8]) -> std::result::Result<usize, &'static str> {
    if fixed.len() < 16 {
        return Err("a message shorter than its fixed header");
    }
    if fixed[0] != b'l' {
        return Err("a big-endian message");
    }
    let body_len = u32::from_le_bytes(fixed[4..8].try_into().expect("4 bytes")) as usize;
    let fields_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes")) as usize;
    let body_start = (16 + fields_len).div_ceil(8) * 8;
    if body_start + body_len > 128 * 1024 * 1024 {
        return Err("a message over 128 MiB");
    }
    Ok(body_start + body_len)
}

/// Decodes one whole message: its header fields, then its body by the signature they carry.
fn decode_message(whole: &[u8]) -> Result<Message> {
    let total = message_len(whole).map_err(malformed)?;
    let whole = whole
        .get(..total)
        .ok_or_else(|| malformed("a message shorter than its header says"))?;
    let fixed = &whole[..16];
    let fields_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes")) as usize;
    let body_start = (16 + fields_len).div_ceil(8) * 8;
    let mut r = Reader {
        buf: whole,
        pos: 12,
        depth: 0,
    };
    let fields = r.value(&mut "a(yv)".as_bytes())?;
    let mut m = Message {
        kind: fixed[1],
        serial: u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes")),
        reply_to: None,
        interface: None,
        member: None,
        error: None,
        body: Vec::new(),
    };
    let mut signature = String::new();
    if let Value::Array(fields) = fields {
        for f in fields {
            let Value::Struct(kv) = f else { continue };
            let (Some(Value::Byte(code)), Some(Value::Variant(v))) = (kv.first(), kv.get(1)) else {
                continue;
            };
            match (code, v.as_ref()) {
                (2, Value::Str(s)) => m.interface = Some(s.clone()),
                (3, Value::Str(s)) => m.member = Some(s.clone()),
                (4, Value::Str(s)) => m.error = Some(s.clone()),
                (5, Value::U32(n)) => m.reply_to = Some(*n),
                (8, Value::Str(s)) => signature = s.clone(),
                _ => {}
            }
        }
    }
    let mut body = Reader {
        buf: &whole[body_start..],
        pos: 0,
        depth: 0,
    };
    let mut sig = signature.as_bytes();
    while !sig.is_empty() {
        m.body.push(body.value(&mut sig)?);
    }
    Ok(m)
}

fn read_line(sock: &mut UnixStream) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if sock.read(&mut b)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        line.push(b[0]);
        if line.len() > 4096 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
    Ok(String::from_utf8_lossy(&line).trim_end().to_string())
}

/// Builds a message in D-Bus's little-endian wire format.
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while self.buf.len() % align != 0 {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, n: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&n.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    fn sig(&mut self, s: &str) {
        self.buf.push(s.len() as u8);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    /// An array: its length, padding to the element's alignment, then the elements.
    fn array(&mut self, align: usize, f: impl FnOnce(&mut Writer)) {
        self.pad(4);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.pad(align);
        let start = self.buf.len();
        f(self);
        let len = (self.buf.len() - start) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    fn arg(&mut self, a: &Arg<'_>) {
        match a {
            Arg::Str(s) => self.str(s),
            Arg::I32(n) => self.u32(*n as u32),
            Arg::Strs(items) => self.array(4, |w| items.iter().for_each(|s| w.str(s))),
            // A struct is aligned to 8, each of its strings to 4.
            Arg::StrQuads(items) => self.array(8, |w| {
                for quad in items {
                    w.pad(8);
                    quad.iter().for_each(|s| w.str(s));
                }
            }),
            Arg::Dict(entries) => self.array(8, |w| {
                for (k, v) in entries {
                    w.pad(8);
                    w.str(k);
                    w.sig(&v.signature());
                    w.arg(v);
                }
            }),
        }
    }
}

fn encode_call(
    serial: u32,
    dest: &str,
    path: &str,
    interface: &str,
    member: &str,
    args: &[Arg<'_>],
) -> Vec<u8> {
    let mut body = Writer { buf: Vec::new() };
    for a in args {
        body.arg(a);
    }
    let signature: String = args.iter().map(Arg::signature).collect();
    let mut w = Writer {
        buf: vec![b'l', METHOD_CALL, 0, 1],
    };
    w.u32(body.buf.len() as u32);
    w.u32(serial);
    w.array(8, |w| {
        let field = |w: &mut Writer, code: u8, sig: &str, value: &str| {
            w.pad(8);
            w.buf.push(code);
            w.sig(sig);
            if sig == "g" {
                w.sig(value)
            } else {
                w.str(value)
            }
        };
        field(w, 1, "o", path);
        field(w, 2, "s", interface);
        field(w, 3, "s", member);
        field(w, 6, "s", dest);
        if !signature.is_empty() {
            field(w, 8, "g", &signature);
        }
    });
    w.pad(8);
    w.buf.extend_from_slice(&body.buf);
    w.buf
}

/// Reads values by their signature from a buffer whose offset 0 is 8-aligned.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// How many containers (arrays, structs, variants) the value being read is inside.
    depth: usize,
}

fn malformed(reason: &str) -> Error {
    Error::Dbus {
        what: "a message from the bus".into(),
        reason: reason.into(),
    }
}

fn alignment(code: u8) -> usize {
    match code {
        b'n' | b'q' => 2,
        b'b' | b'i' | b'u' | b's' | b'o' | b'a' | b'h' => 4,
        b'x' | b't' | b'd' | b'(' | b'{' => 8,
        _ => 1,
    }
}

/// The end of the single complete type that starts `sig`.
fn one_type(sig: &[u8]) -> Result<usize> {
    match sig.first() {
        None => Err(malformed("a signature ended early")),
        Some(b'a') => Ok(1 + one_type(&sig[1..])?),
        Some(open @ (b'(' | b'{')) => {
            let close = if *open == b'(' { b')' } else { b'}' };
            let mut i = 1;
            while sig.get(i) != Some(&close) {
                if i >= sig.len() {
                    return Err(malformed("an unclosed struct in a signature"));
                }
                i += one_type(&sig[i..])?;
            }
            Ok(i + 1)
        }
        Some(_) => Ok(1),
    }
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos + n;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| malformed("a value past the end of the message"))?;
        self.pos = end;
        Ok(s)
    }

    fn align(&mut self, a: usize) {
        self.pos = self.pos.div_ceil(a) * a;
    }

    fn u32(&mut self) -> Result<u32> {
        self.align(4);
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn string(&mut self, len: usize) -> Result<String> {
        let s = String::from_utf8_lossy(self.take(len)?).into_owned();
        self.take(1)?;
        Ok(s)
    }

    /// Reads one value of the type at the start of `sig`, and moves `sig` past it.
    fn value(&mut self, sig: &mut &[u8]) -> Result<Value> {
        let n = one_type(sig)?;
        let (this, rest) = sig.split_at(n);
        *sig = rest;
        if self.depth > MAX_DEPTH {
            return Err(malformed("values nested more than 64 deep"));
        }
        self.align(alignment(this[0]));
        self.depth += 1;
        let value = self.one_value(this);
        self.depth -= 1;
        value
    }

    /// Reads one value of the complete type `this`, aligned already.
    fn one_value(&mut self, this: &[u8]) -> Result<Value> {
        Ok(match this[0] {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => Value::Bool(self.u32()? != 0),
            b'n' => Value::I16(i16::from_le_bytes(self.take(2)?.try_into().expect("2"))),
            b'q' => Value::U16(u16::from_le_bytes(self.take(2)?.try_into().expect("2"))),
            b'i' => Value::I32(self.u32()? as i32),
            b'u' | b'h' => Value::U32(self.u32()?),
            b'x' => Value::I64(i64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            b't' => Value::U64(u64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            b'd' => Value::Double(f64::from_le_bytes(self.take(8)?.try_into().expect("8"))),
            b's' | b'o' => {
                let len = self.u32()? as usize;
                Value::Str(self.string(len)?)
            }
            b'g' => {
                let len = self.take(1)?[0] as usize;
                Value::Str(self.string(len)?)
            }
            b'v' => {
                let len = self.take(1)?[0] as usize;
                let inner = self.string(len)?;
                let mut s = inner.as_bytes();
                Value::Variant(Box::new(self.value(&mut s)?))
            }
            b'a' => {
                let len = self.u32()? as usize;
                let elem = &this[1..];
                self.align(alignment(elem[0]));
                let end = self.pos + len;
                let mut items = Vec::new();
                while self.pos < end {
                    let mut s = elem;
                    let at = self.pos;
                    items.push(self.value(&mut s)?);
                    // An element of no bytes (an empty struct) would repeat for ever.
                    if self.pos == at {
                        return Err(malformed("an array of elements with no bytes"));
                    }
                }
                Value::Array(items)
            }
            b'(' | b'{' => {
                let mut inner = &this[1..this.len() - 1];
                let mut items = Vec::new();
                while !inner.is_empty() {
                    items.push(self.value(&mut inner)?);
                }
                Value::Struct(items)
            }
            other => {
                return Err(malformed(&format!(
                    "type code {:?} is not read by this client",
                    other as char
                )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call's body read back by the reader is what was written: strings, integers, string
    /// arrays and a dictionary of variants, with D-Bus's alignment.
    #[test]
    fn arguments_round_trip() {
        let args = [
            Arg::Str("mesh-host"),
            Arg::I32(-5),
            Arg::Strs(vec!["ANY", "HOST"]),
            Arg::Dict(vec![
                ("priority", Arg::I32(32767)),
                ("ingress_zones", Arg::Strs(vec!["ANY"])),
                ("target", Arg::Str("CONTINUE")),
                (
                    "forward_ports",
                    Arg::StrQuads(vec![
                        ["8085", "tcp", "80", "172.17.0.2"],
                        ["53", "udp", "5353", "fd00::2"],
                    ]),
                ),
            ]),
        ];
        let mut w = Writer { buf: Vec::new() };
        for a in &args {
            w.arg(a);
        }
        let mut r = Reader {
            buf: &w.buf,
            pos: 0,
            depth: 0,
        };
        let mut sig: &[u8] = b"siasa{sv}";
        let mut got = Vec::new();
        while !sig.is_empty() {
            got.push(r.value(&mut sig).unwrap());
        }
        assert_eq!(got[0].as_str(), Some("mesh-host"));
        assert_eq!(got[1], Value::I32(-5));
        assert_eq!(got[2].as_strs().unwrap(), vec!["ANY", "HOST"]);
        assert_eq!(
            got[3].get("priority"),
            Some(&Value::Variant(Box::new(Value::I32(32767))))
        );
        assert_eq!(
            got[3]
                .get("ingress_zones")
                .and_then(Value::as_strs)
                .unwrap(),
            vec!["ANY"]
        );
        assert_eq!(
            got[3].get("target").and_then(Value::as_str),
            Some("CONTINUE")
        );
        let quads = |v: &Value| -> Vec<Vec<String>> {
            let Some(Value::Variant(f)) = v.get("forward_ports") else {
                panic!("forward_ports: {v:?}")
            };
            let Value::Array(items) = &**f else {
                panic!("an array: {f:?}")
            };
            items
                .iter()
                .map(|q| match q {
                    Value::Struct(f) => f.iter().map(|s| s.as_str().unwrap().into()).collect(),
                    _ => panic!("a struct: {q:?}"),
                })
                .collect()
        };
        assert_eq!(
            quads(&got[3]),
            [
                ["8085", "tcp", "80", "172.17.0.2"],
                ["53", "udp", "5353", "fd00::2"]
            ]
        );
        assert_eq!(r.pos, w.buf.len());
    }

    /// A call's header carries path, interface, member, destination and signature, padded to 8.
    #[test]
    fn call_header_reads_back() {
        let m = encode_call(7, "org.x", "/org/x", "org.x.I", "Do", &[Arg::Str("a")]);
        let mut r = Reader {
            buf: &m,
            pos: 12,
            depth: 0,
        };
        let Value::Array(fields) = r.value(&mut "a(yv)".as_bytes()).unwrap() else {
            panic!("fields")
        };
        let codes: Vec<_> = fields
            .iter()
            .map(|f| match f {
                Value::Struct(kv) => kv[0].clone(),
                _ => panic!("field"),
            })
            .collect();
        assert_eq!(
            codes,
            [1, 2, 3, 6, 8].map(Value::Byte).to_vec(),
            "path, interface, member, destination, signature"
        );
        assert_eq!(u32::from_le_bytes(m[8..12].try_into().unwrap()), 7);
        let body_len = u32::from_le_bytes(m[4..8].try_into().unwrap()) as usize;
        assert_eq!(m.len() % 8, (body_len) % 8);
    }
}

#[cfg(test)]
#[path = "dbus_fuzz.rs"]
mod fuzz;
