//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): the ids of functions (the
//! kfuncs a program calls) and the byte offsets and sizes of struct fields (what a BTF-typed load
//! from the netfilter context reads), so nothing is assumed of the running kernel's layout.

use std::path::Path;

use crate::error::{Error, Result};

/// Where the running kernel publishes its own types.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// A struct's or union's member. Names are offsets into the string section: vmlinux has some
/// 150,000 types, and a `String` each left the resident host's heap some 13 MiB larger for good
/// after one load of the guard's program (freed, but in small pieces the allocator keeps).
#[derive(Debug, Clone, Copy)]
struct Member {
    name: u32,
    type_id: u32,
    bit_offset: u32,
}

#[derive(Debug, Clone, Copy)]
struct Type {
    kind: u32,
    name: u32,
    /// Size for ints, structs, unions, enums; the referenced type for pointers, typedefs,
    /// qualifiers and functions.
    size_or_type: u32,
    /// Its members: `members[first..first + count]` of the reader's one list.
    first: u32,
    count: u32,
    /// For arrays: (element type, element count).
    array: Option<(u32, u32)>,
}

/// One field of a struct as a load reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Byte offset from the start of the struct.
    pub offset: u32,
    /// Byte size of the field.
    pub size: u32,
}

/// The kernel's types, indexed by id (id 0 is `void`), in a few large allocations: the types,
/// every member, and the string section their names point into.
pub struct Btf {
    path: String,
    types: Vec<Type>,
    members: Vec<Member>,
    strs: Vec<u8>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn vmlinux() -> Result<Btf> {
        Btf::read(Path::new(VMLINUX))
    }

    /// Reads a BTF file.
    pub fn read(path: &Path) -> Result<Btf> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::Btf {
            path: shown.clone(),
            reason: format!("cannot read: {e}"),
        })?;
        Btf::parse(&shown, &bytes)
    }

    /// Parses BTF in the machine's (little-endian) byte order.
    pub fn parse(path: &str, b: &[u8]) -> Result<Btf> {
        let bad = |reason: &str| Error::Btf {
            path: path.to_string(),
            reason: reason.to_string(),
        };
        if u16_at(b, 0) != Some(MAGIC) {
            return Err(bad("not little-endian btf (bad magic)"));
        }
        let hdr = u32_at(b, 4).ok_or_else(|| bad("short header"))? as usize;
        let field = |i: usize| u32_at(b, 8 + 4 * i).map(|v| v as usize);
        let (Some(type_off), Some(type_len), Some(str_off), Some(str_len)) =
            (field(0), field(1), field(2), field(3))
        else {
            return Err(bad("short header"));
        };
        let types_at = hdr + type_off;
        let strs_at = hdr + str_off;
        let strs = b
            .get(strs_at..strs_at + str_len)
            .ok_or_else(|| bad("string section out of bounds"))?;
        let mut types = vec![Type {
            kind: 0,
            name: 0,
            size_or_type: 0,
            first: 0,
            count: 0,
            array: None,
        }];
        let mut members = Vec::new();
        let end = types_at + type_len;
        let mut at = types_at;
        while at < end {
            let (Some(name_off), Some(info), Some(sot)) =
                (u32_at(b, at), u32_at(b, at + 4), u32_at(b, at + 8))
            else {
                return Err(bad("type section truncated"));
            };
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kflag = info >> 31 == 1;
            let mut t = Type {
                kind,
                name: name_off,
                size_or_type: sot,
                first: members.len() as u32,
                count: 0,
                array: None,
            };
            match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => at += 4,
                KIND_ARRAY => {
                    let (Some(elem), Some(n)) = (u32_at(b, at), u32_at(b, at + 8)) else {
                        return Err(bad("array truncated"));
                    };
                    t.array = Some((elem, n));
                    at += 12;
                }
                KIND_STRUCT | KIND_UNION => {
                    for _ in 0..vlen {
                        let (Some(mn), Some(mt), Some(mo)) =
                            (u32_at(b, at), u32_at(b, at + 4), u32_at(b, at + 8))
                        else {
                            return Err(bad("struct member truncated"));
                        };
                        members.push(Member {
                            name: mn,
                            type_id: mt,
                            bit_offset: if kflag { mo & 0xff_ffff } else { mo },
                        });
                        at += 12;
                    }
                    t.count = vlen as u32;
                }
                KIND_ENUM | KIND_FUNC_PROTO => at += 8 * vlen,
                KIND_DATASEC | KIND_ENUM64 => at += 12 * vlen,
                _ => {}
            }
            types.push(t);
        }
        Ok(Btf {
            path: path.to_string(),
            types,
            members,
            strs: strs.to_vec(),
        })
    }

    /// The name at `off` in the string section (empty past its end).
    fn name(&self, off: u32) -> &[u8] {
        let s = self.strs.get(off as usize..).unwrap_or(&[]);
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        &s[..end]
    }

    /// The first type of `kind` named `name`: a scan, as a program's load asks a handful.
    fn named(&self, kind: u32, name: &str) -> Option<u32> {
        (1..self.types.len())
            .find(|&id| {
                let t = &self.types[id];
                t.kind == kind && self.name(t.name) == name.as_bytes()
            })
            .map(|id| id as u32)
    }

    fn missing(&self, what: String) -> Error {
        Error::Btf {
            path: self.path.clone(),
            reason: what,
        }
    }

    /// The id of a function (a kfunc's id for a `BPF_PSEUDO_KFUNC_CALL`).
    pub fn func_id(&self, name: &str) -> Result<u32> {
        self.named(KIND_FUNC, name)
            .ok_or_else(|| self.missing(format!("no function {name}")))
    }

    /// The size in bytes of a type, through typedefs and qualifiers; pointers are 8.
    fn size_of(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let t = self.types.get(id as usize)?;
            match t.kind {
                KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 => {
                    return Some(t.size_or_type)
                }
                KIND_PTR => return Some(8),
                KIND_ARRAY => {
                    let (elem, n) = t.array?;
                    return Some(self.size_of(elem)? * n);
                }
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return None,
            }
        }
        None
    }

    /// The size of a struct.
    pub fn struct_size(&self, name: &str) -> Result<u32> {
        let id = self
            .named(KIND_STRUCT, name)
            .ok_or_else(|| self.missing(format!("no struct {name}")))?;
        Ok(self.types[id as usize].size_or_type)
    }

    /// The offset and size of `field` in `struct name`, looking through anonymous unions and
    /// structs as C does.
    pub fn field(&self, name: &str, field: &str) -> Result<Field> {
        let id = self
            .named(KIND_STRUCT, name)
            .ok_or_else(|| self.missing(format!("no struct {name}")))?;
        self.find(id, field, 0, 0)
            .ok_or_else(|| self.missing(format!("struct {name} has no field {field}")))
    }

    fn find(&self, id: u32, field: &str, base_bits: u32, depth: u32) -> Option<Field> {
        if depth > 8 {
            return None;
        }
        let t = self.types.get(id as usize)?;
        let members = self
            .members
            .get(t.first as usize..(t.first + t.count) as usize)
            .unwrap_or(&[]);
        for m in members {
            let bits = base_bits + m.bit_offset;
            let name = self.name(m.name);
            if name == field.as_bytes() {
                if bits % 8 != 0 {
                    return None;
                }
                return Some(Field {
                    offset: bits / 8,
                    size: self.size_of(m.type_id)?,
                });
            }
            if name.is_empty() {
                let inner = self.resolve(m.type_id)?;
                if let Some(f) = self.find(inner, field, bits, depth + 1) {
                    return Some(f);
                }
            }
        }
        None
    }

    fn resolve(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let t = self.types.get(id as usize)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(id),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made BTF: `struct s { int a; union { int b; char c[16]; }; }` and `void f(void)`.
    fn sample() -> Vec<u8> {
        let strs = b"\0s\0a\0b\0c\0int\0f\0char\0";
        let off = |n: &str| {
            let hay = std::str::from_utf8(strs).unwrap();
            hay.find(&format!("\0{n}\0")).unwrap() as u32 + 1
        };
        let mut t: Vec<u32> = Vec::new();
        // 1: int (size 4)
        t.extend([off("int"), KIND_INT << 24, 4, 32]);
        // 2: char (size 1)
        t.extend([off("char"), KIND_INT << 24, 1, 8]);
        // 3: char[16]
        t.extend([0, KIND_ARRAY << 24, 0, 2, 1, 16]);
        // 4: anonymous union { int b; char c[16]; }
        t.extend([
            0,
            (KIND_UNION << 24) | 2,
            16,
            off("b"),
            1,
            0,
            off("c"),
            3,
            0,
        ]);
        // 5: struct s { int a; union; } (size 20; union at byte 4)
        t.extend([
            off("s"),
            (KIND_STRUCT << 24) | 2,
            20,
            off("a"),
            1,
            0,
            0,
            4,
            32,
        ]);
        // 6: func proto void(void); 7: func f
        t.extend([0, KIND_FUNC_PROTO << 24, 0]);
        t.extend([off("f"), KIND_FUNC << 24, 6]);
        let types: Vec<u8> = t.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        out.extend(MAGIC.to_le_bytes());
        out.extend([1u8, 0]);
        out.extend(24u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((types.len() as u32).to_le_bytes());
        out.extend((types.len() as u32).to_le_bytes());
        out.extend((strs.len() as u32).to_le_bytes());
        out.extend(types);
        out.extend(strs);
        out
    }

    #[test]
    fn fields_are_found_through_anonymous_unions_with_their_sizes() {
        let btf = Btf::parse("sample", &sample()).unwrap();
        assert_eq!(btf.field("s", "a").unwrap(), Field { offset: 0, size: 4 });
        assert_eq!(btf.field("s", "b").unwrap(), Field { offset: 4, size: 4 });
        assert_eq!(
            btf.field("s", "c").unwrap(),
            Field {
                offset: 4,
                size: 16
            }
        );
        assert_eq!(btf.struct_size("s").unwrap(), 20);
        assert_eq!(btf.func_id("f").unwrap(), 7);
        let e = btf.field("s", "d").unwrap_err().to_string();
        assert_eq!(e, "kernel btf sample: struct s has no field d");
    }

    #[test]
    fn a_file_that_is_not_btf_is_refused_by_name() {
        let e = Btf::parse("/x", b"nope").err().unwrap().to_string();
        assert_eq!(e, "kernel btf /x: not little-endian btf (bad magic)");
    }
}
