//! A small typed assembler for eBPF: registers, sizes and jump targets are types, jumps go to
//! labels resolved when the program is finished, and the output is the kernel's 8-byte encoding.

/// A register; `R10` is the read-only frame pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reg {
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

/// The width of a load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    B,
    H,
    W,
    DW,
}

impl Size {
    fn code(self) -> u8 {
        match self {
            Size::W => 0x00,
            Size::H => 0x08,
            Size::B => 0x10,
            Size::DW => 0x18,
        }
    }

    /// The width for a field of `bytes` bytes, if a single load can read it.
    pub fn of_bytes(bytes: u32) -> Option<Size> {
        match bytes {
            1 => Some(Size::B),
            2 => Some(Size::H),
            4 => Some(Size::W),
            8 => Some(Size::DW),
            _ => None,
        }
    }
}

/// A 64-bit arithmetic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alu {
    Add,
    Mul,
    And,
    Or,
    Lsh,
    Rsh,
    Mov,
}

impl Alu {
    fn code(self) -> u8 {
        match self {
            Alu::Add => 0x00,
            Alu::Mul => 0x20,
            Alu::Or => 0x40,
            Alu::And => 0x50,
            Alu::Lsh => 0x60,
            Alu::Rsh => 0x70,
            Alu::Mov => 0xb0,
        }
    }
}

/// A conditional jump's comparison (unsigned where it matters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    Eq,
    Ne,
    Gt,
    Set,
}

impl Cond {
    fn code(self) -> u8 {
        match self {
            Cond::Eq => 0x10,
            Cond::Gt => 0x20,
            Cond::Set => 0x40,
            Cond::Ne => 0x50,
        }
    }
}

/// A place in the program a jump can go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

#[derive(Debug, Clone, Copy)]
struct Insn {
    code: u8,
    dst: Reg,
    src: u8,
    off: i16,
    imm: i32,
}

impl Insn {
    fn encode(self) -> u64 {
        let regs = (self.dst as u8) | (self.src << 4);
        u64::from_le_bytes([
            self.code,
            regs,
            self.off.to_le_bytes()[0],
            self.off.to_le_bytes()[1],
            self.imm.to_le_bytes()[0],
            self.imm.to_le_bytes()[1],
            self.imm.to_le_bytes()[2],
            self.imm.to_le_bytes()[3],
        ])
    }
}

const CLASS_LD: u8 = 0x00;
const CLASS_LDX: u8 = 0x01;
const CLASS_STX: u8 = 0x03;
const CLASS_ALU: u8 = 0x04;
const CLASS_JMP: u8 = 0x05;
const CLASS_ALU64: u8 = 0x07;
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;
const SRC_X: u8 = 0x08;
const OP_CALL: u8 = 0x80;
const OP_EXIT: u8 = 0x90;
const OP_END: u8 = 0xd0;
const TO_BE: u8 = 0x08;
const PSEUDO_MAP_FD: u8 = 1;
const PSEUDO_KFUNC_CALL: u8 = 2;

/// A program being assembled.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    fn push(&mut self, code: u8, dst: Reg, src: u8, off: i16, imm: i32) -> &mut Asm {
        self.insns.push(Insn {
            code,
            dst,
            src,
            off,
            imm,
        });
        self
    }

    /// A new label, placed later with [`Asm::bind`].
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Places `l` at the next instruction.
    pub fn bind(&mut self, l: Label) -> &mut Asm {
        self.labels[l.0] = Some(self.insns.len());
        self
    }

    /// `dst op= imm` in 64 bits.
    pub fn alu_imm(&mut self, op: Alu, dst: Reg, imm: i32) -> &mut Asm {
        self.push(CLASS_ALU64 | op.code(), dst, 0, 0, imm)
    }

    /// `dst op= src` in 64 bits.
    pub fn alu_reg(&mut self, op: Alu, dst: Reg, src: Reg) -> &mut Asm {
        self.push(CLASS_ALU64 | op.code() | SRC_X, dst, src as u8, 0, 0)
    }

    /// `dst = imm`.
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) -> &mut Asm {
        self.alu_imm(Alu::Mov, dst, imm)
    }

    /// `dst = src`.
    pub fn mov(&mut self, dst: Reg, src: Reg) -> &mut Asm {
        self.alu_reg(Alu::Mov, dst, src)
    }

    /// Converts the low 16 bits of `dst` from network to host order (and clears the rest).
    pub fn be16(&mut self, dst: Reg) -> &mut Asm {
        self.push(CLASS_ALU | OP_END | TO_BE, dst, 0, 0, 16)
    }

    /// `dst = *(size *)(src + off)`.
    pub fn load(&mut self, size: Size, dst: Reg, src: Reg, off: i16) -> &mut Asm {
        self.push(CLASS_LDX | MODE_MEM | size.code(), dst, src as u8, off, 0)
    }

    /// `*(size *)(dst + off) = src`.
    pub fn store(&mut self, size: Size, dst: Reg, off: i16, src: Reg) -> &mut Asm {
        self.push(CLASS_STX | MODE_MEM | size.code(), dst, src as u8, off, 0)
    }

    /// `dst = map`, by file descriptor (the kernel swaps in the map's address).
    pub fn load_map(&mut self, dst: Reg, map_fd: i32) -> &mut Asm {
        self.push(
            CLASS_LD | MODE_IMM | Size::DW.code(),
            dst,
            PSEUDO_MAP_FD,
            0,
            map_fd,
        );
        self.push(0, Reg::R0, 0, 0, 0)
    }

    /// `dst = imm` for a 64-bit immediate (`ld_imm64`, two instructions).
    pub fn ld_imm64(&mut self, dst: Reg, imm: u64) -> &mut Asm {
        self.push(
            CLASS_LD | MODE_IMM | Size::DW.code(),
            dst,
            0,
            0,
            imm as u32 as i32,
        );
        self.push(0, Reg::R0, 0, 0, (imm >> 32) as u32 as i32)
    }

    /// Calls a helper by its number.
    pub fn call(&mut self, helper: i32) -> &mut Asm {
        self.push(CLASS_JMP | OP_CALL, Reg::R0, 0, 0, helper)
    }

    /// Calls a kernel function by its BTF id in vmlinux.
    pub fn call_kfunc(&mut self, btf_id: u32) -> &mut Asm {
        self.push(
            CLASS_JMP | OP_CALL,
            Reg::R0,
            PSEUDO_KFUNC_CALL,
            0,
            btf_id as i32,
        )
    }

    /// Jumps to `to`.
    pub fn ja(&mut self, to: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), to));
        self.push(CLASS_JMP, Reg::R0, 0, 0, 0)
    }

    /// Jumps to `to` if `dst cond imm`.
    pub fn jmp_imm(&mut self, cond: Cond, dst: Reg, imm: i32, to: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), to));
        self.push(CLASS_JMP | cond.code(), dst, 0, 0, imm)
    }

    /// Returns `r0`.
    pub fn exit(&mut self) -> &mut Asm {
        self.push(CLASS_JMP | OP_EXIT, Reg::R0, 0, 0, 0)
    }

    /// `r0 = verdict; exit`.
    pub fn ret(&mut self, verdict: i32) -> &mut Asm {
        self.mov_imm(Reg::R0, verdict).exit()
    }

    /// The encoded program; panics on a label never bound or a jump too far, both mistakes of
    /// the program's builder, never of input.
    pub fn finish(mut self) -> Vec<u64> {
        for (at, l) in std::mem::take(&mut self.fixups) {
            let target = self.labels[l.0].expect("a jump to a label never bound");
            let off = target as i64 - at as i64 - 1;
            self.insns[at].off = i16::try_from(off).expect("a jump too far for 16 bits");
        }
        self.insns.into_iter().map(Insn::encode).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        let mut a = Asm::new();
        let out = a.label();
        a.mov_imm(Reg::R0, 1) // b7 00 0000 01000000
            .load(Size::DW, Reg::R7, Reg::R1, 8) // 79 17 0800 00000000
            .jmp_imm(Cond::Ne, Reg::R2, 6, out) // 55 02 0100 06000000
            .be16(Reg::R3) // dc 03 0000 10000000
            .bind(out)
            .call_kfunc(0x1234) // 85 20 0000 34120000
            .exit(); // 95 00 0000 00000000
        let got: Vec<String> = a
            .finish()
            .into_iter()
            .map(|i| format!("{:016x}", i.swap_bytes()))
            .collect();
        assert_eq!(
            got,
            [
                "b700000001000000",
                "7917080000000000",
                "5502010006000000",
                "dc03000010000000",
                "8520000034120000",
                "9500000000000000",
            ]
        );
    }

    #[test]
    fn a_map_load_takes_two_slots() {
        let mut a = Asm::new();
        a.load_map(Reg::R1, 7).ret(1);
        let got = a.finish();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].to_le_bytes()[..2], [0x18, 0x11]);
        assert_eq!(got[0] >> 32, 7);
        assert_eq!(got[1], 0);
    }
}
