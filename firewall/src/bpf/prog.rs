//! The guard's netfilter program, assembled for the running kernel's layout: it drops every
//! packet to a guarded TCP/UDP port on INPUT, and on FORWARD towards a runtime bridge to a guarded
//! container port, unless it arrived on an exempt interface; every other packet is accepted.
//!
//! It reads the packet through an skb dynptr (`bpf_dynptr_from_skb` kfunc, then the
//! `bpf_dynptr_read` helper) and the hook's interfaces through BTF-typed loads of the context
//! (`ctx->state->in->name`), never through `bpf_probe_read_kernel`, which lockdown refuses.

use super::asm::{Alu, Asm, Cond, Label, Reg, Size};
use super::btf::Btf;
use crate::error::{Error, Result};

/// `NF_DROP` and `NF_ACCEPT`, the only verdicts a netfilter program may return.
pub const NF_DROP: i32 = 0;
pub const NF_ACCEPT: i32 = 1;
/// Netfilter hooks and families (`NF_INET_*`, `NFPROTO_*`).
pub const HOOK_LOCAL_IN: u32 = 1;
pub const HOOK_FORWARD: u32 = 2;
pub const NFPROTO_IPV4: u32 = 2;
pub const NFPROTO_IPV6: u32 = 10;

/// An interface's flags in the interfaces map: its packets are not refused; it is a runtime's
/// bridge, so forwarded packets towards it are refused at the guarded container ports.
pub const IFACE_EXEMPT: u32 = 1;
pub const IFACE_RUNTIME: u32 = 2;
/// The private network's interface: its packets are not refused when their source is in the
/// nets map (the private ranges).
pub const IFACE_PRIVATE: u32 = 4;

/// A nets map key's family word (its first data byte): IPv4 or IPv6.
pub const NET_V4: u8 = 4;
pub const NET_V6: u8 = 6;
/// The nets map's key: the prefix length (host order), then 20 bytes of data: the family byte
/// and three zero bytes, then the address (an IPv4 address in its first four bytes).
pub const NET_KEY_SIZE: usize = 24;

/// A port key's kind: a host port (INPUT) or a container port (FORWARD towards a bridge).
pub const KIND_HOST: u8 = 0;
pub const KIND_CONTAINER: u8 = 1;

/// How many IPv6 extension headers are walked before the packet counts as unreadable.
pub const MAX_EXT_HEADERS: usize = 8;

const HELPER_MAP_LOOKUP: i32 = 1;
const HELPER_DYNPTR_READ: i32 = 201;

/// The kernel's layout the program depends on, read from its BTF.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub ctx_state: i16,
    pub ctx_skb: i16,
    pub state_hook: i16,
    pub state_pf: i16,
    pub state_in: i16,
    pub state_out: i16,
    pub dev_name: i16,
    /// `sizeof(struct nf_hook_state)`, the context a test run takes.
    pub state_size: u32,
    /// The BTF id of the `bpf_dynptr_from_skb` kfunc.
    pub dynptr_from_skb: u32,
}

impl Layout {
    /// Reads the layout from the kernel's BTF; names what is missing.
    pub fn from_btf(btf: &Btf) -> Result<Layout> {
        let off = |s: &str, f: &str, size: u32| -> Result<i16> {
            let field = btf.field(s, f)?;
            if field.size != size {
                return Err(Error::Btf {
                    path: super::btf::VMLINUX.into(),
                    reason: format!("struct {s} field {f} is {} bytes, not {size}", field.size),
                });
            }
            Ok(field.offset as i16)
        };
        Ok(Layout {
            ctx_state: off("bpf_nf_ctx", "state", 8)?,
            ctx_skb: off("bpf_nf_ctx", "skb", 8)?,
            state_hook: off("nf_hook_state", "hook", 1)?,
            state_pf: off("nf_hook_state", "pf", 1)?,
            state_in: off("nf_hook_state", "in", 8)?,
            state_out: off("nf_hook_state", "out", 8)?,
            dev_name: off("net_device", "name", 16)?,
            state_size: btf.struct_size("nf_hook_state")?,
            dynptr_from_skb: btf.func_id("bpf_dynptr_from_skb")?,
        })
    }
}

// The frame: the dynptr (16 bytes, 8-aligned), the interface key (16), the port key (4, in an
// 8-byte slot), the port kind, a buffer the packet's headers are read into, the source's key.
const FP_DYNPTR: i16 = -16;
const FP_IFKEY: i16 = -32;
const FP_PORTKEY: i16 = -40;
const FP_KIND: i16 = -48;
const FP_BUF: i16 = -80;
// The nets map key of the packet's source (24 bytes), and whether it arrived on the private
// network's interface.
const FP_NETKEY: i16 = -104;
const FP_PRIV: i16 = -112;

/// Emits: look up the name of the device `state` (in `r8`) points at, at field `dev`, in the
/// interfaces map; leaves the map value pointer (or 0) in `r0`. The name is compared as the kernel
/// compares names, up to its NUL: a device renamed through a longer name and back keeps the old
/// name's tail after the NUL in its 16 bytes, so every byte from the first NUL on is zeroed in
/// the key (`r3` is 1 until a NUL is seen, then 0; each byte is multiplied by it), without a
/// branch. No device (a test run's input) reads as 16 zero bytes.
fn lookup_iface(a: &mut Asm, l: &Layout, ifaces: i32, dev: i16) {
    a.load(Size::DW, Reg::R1, Reg::R8, dev).mov_imm(Reg::R3, 1);
    for i in 0..16i16 {
        a.load(Size::B, Reg::R2, Reg::R1, l.dev_name + i)
            .mov(Reg::R4, Reg::R2)
            .alu_imm(Alu::Add, Reg::R4, 255)
            .alu_imm(Alu::Rsh, Reg::R4, 8)
            .alu_reg(Alu::And, Reg::R3, Reg::R4)
            .alu_reg(Alu::Mul, Reg::R2, Reg::R3)
            .store(Size::B, Reg::R10, FP_IFKEY + i, Reg::R2);
    }
    a.load_map(Reg::R1, ifaces)
        .mov(Reg::R2, Reg::R10)
        .alu_imm(Alu::Add, Reg::R2, FP_IFKEY as i32)
        .call(HELPER_MAP_LOOKUP);
}

/// Emits: read `len` bytes of the packet at offset `r9` (plus `plus`) into the buffer; jumps to
/// `fail` if the packet is shorter.
fn read(a: &mut Asm, len: i32, plus: i32, fail: super::asm::Label) {
    a.mov(Reg::R1, Reg::R10)
        .alu_imm(Alu::Add, Reg::R1, FP_BUF as i32)
        .mov_imm(Reg::R2, len)
        .mov(Reg::R3, Reg::R10)
        .alu_imm(Alu::Add, Reg::R3, FP_DYNPTR as i32)
        .mov(Reg::R4, Reg::R9);
    if plus != 0 {
        a.alu_imm(Alu::Add, Reg::R4, plus);
    }
    a.mov_imm(Reg::R5, 0)
        .call(HELPER_DYNPTR_READ)
        .jmp_imm(Cond::Ne, Reg::R0, 0, fail);
}

/// Emits: when the packet arrived on the private network's interface, look up its source (in
/// the buffer: an IPv4 header at 0, or an IPv6 header's first 24 bytes) in the nets map, and
/// accept it when it is there.
fn private_source(a: &mut Asm, nets: i32, v6: bool, accept: super::asm::Label) {
    let skip = a.label();
    let (family, prefix) = if v6 { (NET_V6, 160) } else { (NET_V4, 64) };
    a.load(Size::DW, Reg::R1, Reg::R10, FP_PRIV)
        .jmp_imm(Cond::Eq, Reg::R1, 0, skip)
        .mov_imm(Reg::R1, prefix)
        .store(Size::W, Reg::R10, FP_NETKEY, Reg::R1)
        .mov_imm(Reg::R1, u32::from_ne_bytes([family, 0, 0, 0]) as i32)
        .store(Size::W, Reg::R10, FP_NETKEY + 4, Reg::R1);
    if v6 {
        a.load(Size::DW, Reg::R1, Reg::R10, FP_BUF + 8)
            .store(Size::DW, Reg::R10, FP_NETKEY + 8, Reg::R1)
            .load(Size::DW, Reg::R1, Reg::R10, FP_BUF + 16)
            .store(Size::DW, Reg::R10, FP_NETKEY + 16, Reg::R1);
    } else {
        a.mov_imm(Reg::R1, 0)
            .store(Size::DW, Reg::R10, FP_NETKEY + 8, Reg::R1)
            .store(Size::DW, Reg::R10, FP_NETKEY + 16, Reg::R1)
            .load(Size::W, Reg::R1, Reg::R10, FP_BUF + 12)
            .store(Size::W, Reg::R10, FP_NETKEY + 8, Reg::R1);
    }
    a.load_map(Reg::R1, nets)
        .mov(Reg::R2, Reg::R10)
        .alu_imm(Alu::Add, Reg::R2, FP_NETKEY as i32)
        .call(HELPER_MAP_LOOKUP)
        .jmp_imm(Cond::Ne, Reg::R0, 0, accept)
        .bind(skip);
}

/// Assembles the program for this layout and these maps (by file descriptor), marked with the
/// cookie of the network namespace it is for: a constant the program loads and never uses, so
/// its tag (a digest of its instructions, map references left out) differs from one namespace to
/// another, and the host knows its own links among every namespace's by name and tag.
pub fn build(l: &Layout, ports: i32, ifaces: i32, nets: i32, netns: u64) -> Vec<u64> {
    let mut a = Asm::new();
    let accept = a.label();
    let drop = a.label();
    let v6 = a.label();
    let l4 = a.label();

    // The namespace's mark, overwritten by the first call. r6 = ctx, r8 = ctx->state.
    a.ld_imm64(Reg::R0, netns);
    a.mov(Reg::R6, Reg::R1)
        .load(Size::DW, Reg::R8, Reg::R6, l.ctx_state);
    classify(&mut a, l, ifaces, accept);
    open_packet(&mut a, l, drop, v6, accept);
    ipv4(&mut a, nets, accept, drop, l4);
    a.bind(v6);
    ipv6(&mut a, nets, accept, drop, l4);
    a.bind(l4);
    port_lookup(&mut a, ports, drop);

    a.bind(accept).ret(NF_ACCEPT);
    a.bind(drop).ret(NF_DROP);
    a.finish()
}

/// Whether the packet is the guard's to judge, and of which kind: one arriving on an exempt
/// interface goes to `accept`; at INPUT it is for the host ports, at FORWARD for the container
/// ports and only towards a runtime's bridge (else `accept`). Leaves the kind at `FP_KIND` and
/// whether it came on the private network's interface at `FP_PRIV`.
fn classify(a: &mut Asm, l: &Layout, ifaces: i32, accept: Label) {
    let input = a.label();
    let parse = a.label();
    // Arrived on an exempt interface: untouched. On the private network's: untouched when its
    // source is in the private ranges, which is checked once the header is read.
    a.mov_imm(Reg::R1, 0)
        .store(Size::DW, Reg::R10, FP_PRIV, Reg::R1);
    lookup_iface(a, l, ifaces, l.state_in);
    let not_exempt = a.label();
    a.jmp_imm(Cond::Eq, Reg::R0, 0, not_exempt)
        .load(Size::W, Reg::R1, Reg::R0, 0)
        .jmp_imm(Cond::Set, Reg::R1, IFACE_EXEMPT as i32, accept)
        .alu_imm(Alu::And, Reg::R1, IFACE_PRIVATE as i32)
        .store(Size::DW, Reg::R10, FP_PRIV, Reg::R1)
        .bind(not_exempt);

    // INPUT: the host ports. FORWARD: the container ports, only towards a runtime's bridge.
    a.load(Size::B, Reg::R1, Reg::R8, l.state_hook)
        .jmp_imm(Cond::Eq, Reg::R1, HOOK_LOCAL_IN as i32, input)
        .jmp_imm(Cond::Ne, Reg::R1, HOOK_FORWARD as i32, accept);
    lookup_iface(a, l, ifaces, l.state_out);
    a.jmp_imm(Cond::Eq, Reg::R0, 0, accept)
        .load(Size::W, Reg::R1, Reg::R0, 0)
        .alu_imm(Alu::And, Reg::R1, IFACE_RUNTIME as i32)
        .jmp_imm(Cond::Eq, Reg::R1, 0, accept)
        .mov_imm(Reg::R1, KIND_CONTAINER as i32)
        .store(Size::DW, Reg::R10, FP_KIND, Reg::R1)
        .ja(parse)
        .bind(input)
        .mov_imm(Reg::R1, KIND_HOST as i32)
        .store(Size::DW, Reg::R10, FP_KIND, Reg::R1)
        .bind(parse);
}

/// The packet opened through an skb dynptr (its data starts at the network header at these
/// hooks; one that cannot be opened goes to `drop`), r9 zeroed, IPv6 to `v6`, IPv4 on, any other
/// family to `accept`.
fn open_packet(a: &mut Asm, l: &Layout, drop: Label, v6: Label, accept: Label) {
    a.load(Size::DW, Reg::R1, Reg::R6, l.ctx_skb)
        .mov_imm(Reg::R2, 0)
        .mov(Reg::R3, Reg::R10)
        .alu_imm(Alu::Add, Reg::R3, FP_DYNPTR as i32)
        .call_kfunc(l.dynptr_from_skb)
        .jmp_imm(Cond::Ne, Reg::R0, 0, drop)
        .mov_imm(Reg::R9, 0)
        .load(Size::B, Reg::R1, Reg::R8, l.state_pf)
        .jmp_imm(Cond::Eq, Reg::R1, NFPROTO_IPV6 as i32, v6)
        .jmp_imm(Cond::Ne, Reg::R1, NFPROTO_IPV4 as i32, accept);
}

/// IPv4: the protocol, a later fragment (no transport header: dropped, it could be for a
/// guarded port; with the defrag flag none arrive), the header's length into r9, then to `l4`.
fn ipv4(a: &mut Asm, nets: i32, accept: Label, drop: Label, l4: Label) {
    read(a, 20, 0, drop);
    private_source(a, nets, false, accept);
    a.load(Size::B, Reg::R7, Reg::R10, FP_BUF + 9);
    let v4_l4 = a.label();
    a.jmp_imm(Cond::Eq, Reg::R7, 6, v4_l4)
        .jmp_imm(Cond::Ne, Reg::R7, 17, accept)
        .bind(v4_l4)
        .load(Size::H, Reg::R1, Reg::R10, FP_BUF + 6)
        .be16(Reg::R1)
        .alu_imm(Alu::And, Reg::R1, 0x1fff)
        .jmp_imm(Cond::Ne, Reg::R1, 0, drop)
        .load(Size::B, Reg::R9, Reg::R10, FP_BUF)
        .alu_imm(Alu::And, Reg::R9, 0x0f)
        .alu_imm(Alu::Lsh, Reg::R9, 2)
        .ja(l4);
}

/// IPv6: the next header after the fixed 40 bytes, then each extension header in turn, up to
/// [`MAX_EXT_HEADERS`], the transport header's offset into r9, then to `l4`.
fn ipv6(a: &mut Asm, nets: i32, accept: Label, drop: Label, l4: Label) {
    read(a, 24, 0, drop);
    private_source(a, nets, true, accept);
    a.load(Size::B, Reg::R7, Reg::R10, FP_BUF + 6)
        .mov_imm(Reg::R9, 40);
    for _ in 0..MAX_EXT_HEADERS {
        let next = a.label();
        let frag = a.label();
        let auth = a.label();
        let opts = a.label();
        a.jmp_imm(Cond::Eq, Reg::R7, 6, l4)
            .jmp_imm(Cond::Eq, Reg::R7, 17, l4)
            .jmp_imm(Cond::Eq, Reg::R7, 0, opts)
            .jmp_imm(Cond::Eq, Reg::R7, 43, opts)
            .jmp_imm(Cond::Eq, Reg::R7, 60, opts)
            .jmp_imm(Cond::Eq, Reg::R7, 44, frag)
            .jmp_imm(Cond::Eq, Reg::R7, 51, auth)
            // Anything else (ICMPv6, no next header, ESP) carries no guarded port.
            .ja(accept);
        // Hop-by-hop, routing, destination options: (length + 1) * 8 bytes.
        a.bind(opts);
        read(a, 2, 0, drop);
        a.load(Size::B, Reg::R7, Reg::R10, FP_BUF)
            .load(Size::B, Reg::R1, Reg::R10, FP_BUF + 1)
            .alu_imm(Alu::Add, Reg::R1, 1)
            .alu_imm(Alu::Lsh, Reg::R1, 3)
            .alu_reg(Alu::Add, Reg::R9, Reg::R1)
            .ja(next);
        // Fragment: a later fragment has no transport header, so it is dropped; the first (or an
        // atomic fragment) goes on to what follows its 8 bytes.
        a.bind(frag);
        read(a, 8, 0, drop);
        a.load(Size::B, Reg::R7, Reg::R10, FP_BUF)
            .load(Size::H, Reg::R1, Reg::R10, FP_BUF + 2)
            .be16(Reg::R1)
            .alu_imm(Alu::And, Reg::R1, 0xfff8)
            .jmp_imm(Cond::Ne, Reg::R1, 0, drop)
            .alu_imm(Alu::Add, Reg::R9, 8)
            .ja(next);
        // Authentication header: (length + 2) * 4 bytes.
        a.bind(auth);
        read(a, 2, 0, drop);
        a.load(Size::B, Reg::R7, Reg::R10, FP_BUF)
            .load(Size::B, Reg::R1, Reg::R10, FP_BUF + 1)
            .alu_imm(Alu::Add, Reg::R1, 2)
            .alu_imm(Alu::Lsh, Reg::R1, 2)
            .alu_reg(Alu::Add, Reg::R9, Reg::R1)
            .bind(next);
    }
    // Still a header after the last one read: TCP or UDP may follow, unread, so dropped.
    a.jmp_imm(Cond::Eq, Reg::R7, 6, l4)
        .jmp_imm(Cond::Eq, Reg::R7, 17, l4)
        .jmp_imm(Cond::Eq, Reg::R7, 0, drop)
        .jmp_imm(Cond::Eq, Reg::R7, 43, drop)
        .jmp_imm(Cond::Eq, Reg::R7, 60, drop)
        .jmp_imm(Cond::Eq, Reg::R7, 44, drop)
        .jmp_imm(Cond::Eq, Reg::R7, 51, drop)
        .ja(accept);
}

/// TCP or UDP at r9: the destination port (as the packet carries it), the protocol and the
/// kind make the key; a key in the ports map goes to `drop`, as does a header too short to read.
fn port_lookup(a: &mut Asm, ports: i32, drop: Label) {
    read(a, 4, 0, drop);
    a.load(Size::H, Reg::R1, Reg::R10, FP_BUF + 2)
        .mov(Reg::R2, Reg::R7)
        .alu_imm(Alu::Lsh, Reg::R2, 16)
        .alu_reg(Alu::Or, Reg::R1, Reg::R2)
        .load(Size::DW, Reg::R2, Reg::R10, FP_KIND)
        .alu_imm(Alu::Lsh, Reg::R2, 24)
        .alu_reg(Alu::Or, Reg::R1, Reg::R2)
        .store(Size::W, Reg::R10, FP_PORTKEY, Reg::R1)
        .load_map(Reg::R1, ports)
        .mov(Reg::R2, Reg::R10)
        .alu_imm(Alu::Add, Reg::R2, FP_PORTKEY as i32)
        .call(HELPER_MAP_LOOKUP)
        .jmp_imm(Cond::Ne, Reg::R0, 0, drop);
}

/// The ports map's key: the port in network order, the protocol's IP number, the kind.
pub fn port_key(port: u16, proto: u8, kind: u8) -> [u8; 4] {
    let p = port.to_be_bytes();
    [p[0], p[1], proto, kind]
}

/// The nets map's key for a network: its prefix length past the family word, the family, the
/// address.
pub fn net_key(addr: std::net::IpAddr, len: u8) -> [u8; NET_KEY_SIZE] {
    let mut k = [0u8; NET_KEY_SIZE];
    let (family, bytes): (u8, Vec<u8>) = match addr {
        std::net::IpAddr::V4(a) => (NET_V4, a.octets().to_vec()),
        std::net::IpAddr::V6(a) => (NET_V6, a.octets().to_vec()),
    };
    k[..4].copy_from_slice(&(32 + u32::from(len)).to_ne_bytes());
    k[4] = family;
    k[8..8 + bytes.len()].copy_from_slice(&bytes);
    k
}

/// The interfaces map's key: the name up to its NUL, zero-padded to 16 bytes, as the program
/// makes the key of a device's name (whatever the kernel keeps after the NUL).
pub fn iface_key(name: &str) -> [u8; 16] {
    let mut k = [0u8; 16];
    for (o, b) in k
        .iter_mut()
        .zip(name.bytes().take_while(|b| *b != 0).take(15))
    {
        *o = b;
    }
    k
}
