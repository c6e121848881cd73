//! Netlink message framing: nlmsghdr + nfgenmsg on the way out, datagram splitting and
//! acknowledgement decoding on the way in.

use super::attr::{align, Attrs};
use super::consts::*;
use super::types::Family;

/// Starts an nf_tables message and returns its offset, to be closed with [`end`].
/// Header fields are host-endian; `res_id` is big-endian as nfnetlink defines it.
pub fn begin(buf: &mut Vec<u8>, ty: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.push(family);
    buf.push(NFNETLINK_V0);
    buf.extend_from_slice(&res_id.to_be_bytes());
    start
}

/// Writes the final length of the message begun at `start`.
pub fn end(buf: &mut [u8], start: usize) {
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// The netlink message type of an nf_tables message.
pub const fn nft_type(msg: u8) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg as u16
}

/// Overwrites the sequence number of the message at `start`.
pub fn set_seq(buf: &mut [u8], start: usize, seq: u32) {
    buf[start + 8..start + 12].copy_from_slice(&seq.to_ne_bytes());
}

/// Adds `flag` to the flags of the message at `start`.
pub fn add_flag(buf: &mut [u8], start: usize, flag: u16) {
    let at = start + 6;
    let flags = u16::from_ne_bytes([buf[at], buf[at + 1]]) | flag;
    buf[at..at + 2].copy_from_slice(&flags.to_ne_bytes());
}

/// Writes a complete attribute-less request, e.g. a dump or GETGEN.
pub fn request(ty: u8, flags: u16, seq: u32, family: Option<Family>) -> Vec<u8> {
    let mut buf = Vec::with_capacity(20);
    let fam = family.map(Family::to_raw).unwrap_or(0);
    let start = begin(&mut buf, nft_type(ty), NLM_F_REQUEST | flags, seq, fam, 0);
    end(&mut buf, start);
    buf
}

/// One message read from a datagram.
#[derive(Debug, Clone, Copy)]
pub struct NlMsg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

impl<'a> NlMsg<'a> {
    /// For nf_tables messages: the message kind (low byte) if the subsystem is nf_tables.
    pub fn nft_msg(&self) -> Option<u8> {
        (self.ty >> 8 == NFNL_SUBSYS_NFTABLES).then_some((self.ty & 0xff) as u8)
    }

    /// The family from the nfgenmsg header.
    pub fn family(&self) -> Family {
        Family::from_raw(self.payload.first().copied().unwrap_or(0))
    }

    /// The attributes after the nfgenmsg header.
    pub fn attrs(&self) -> Attrs<'a> {
        Attrs::new(self.payload.get(NFGENMSG_LEN..).unwrap_or(&[]))
    }
}

/// A datagram whose framing breaks: a message's length with the bytes left for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("message length {len} with {left} bytes left in the datagram")]
pub struct BrokenFraming {
    pub len: usize,
    pub left: usize,
}

/// Splits a datagram into messages; broken framing is an error, since nothing after it can be
/// trusted to be aligned.
pub fn split(mut data: &[u8]) -> Result<Vec<NlMsg<'_>>, BrokenFraming> {
    let mut out = Vec::new();
    while data.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(BrokenFraming {
                len,
                left: data.len(),
            });
        }
        out.push(NlMsg {
            ty: u16::from_ne_bytes(data[4..6].try_into().unwrap()),
            flags: u16::from_ne_bytes(data[6..8].try_into().unwrap()),
            seq: u32::from_ne_bytes(data[8..12].try_into().unwrap()),
            payload: &data[NLMSG_HDRLEN..len],
        });
        data = &data[align(len).min(data.len())..];
    }
    Ok(out)
}

/// An NLMSG_ERROR message: an acknowledgement when `errno` is 0, else a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// Positive errno, 0 for success.
    pub errno: i32,
    /// The sequence number of the request it answers.
    pub seq: u32,
    /// The kernel's extended-ack message, when it gave one.
    pub message: Option<String>,
    /// The offset of the offending attribute in the request, when given.
    pub offset: Option<u32>,
}

/// An NLMSG_ERROR message too short to hold its errno and the request's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("error message of {0} bytes")]
pub struct ShortAck(pub usize);

/// Decodes the payload of an NLMSG_ERROR message.
pub fn parse_ack(msg: &NlMsg<'_>) -> Result<Ack, ShortAck> {
    let p = msg.payload;
    if p.len() < 4 + NLMSG_HDRLEN {
        return Err(ShortAck(p.len()));
    }
    let error = i32::from_ne_bytes(p[0..4].try_into().unwrap());
    let orig_len = u32::from_ne_bytes(p[4..8].try_into().unwrap()) as usize;
    let orig_seq = u32::from_ne_bytes(p[12..16].try_into().unwrap());
    let mut ack = Ack {
        // i32::MIN has no positive counterpart; it is still a refusal.
        errno: error.checked_neg().unwrap_or(i32::MAX),
        seq: orig_seq,
        message: None,
        offset: None,
    };
    if msg.flags & NLM_F_ACK_TLVS != 0 {
        // Without NLM_F_CAPPED the original request is echoed before the TLVs.
        let tlv_start = if msg.flags & NLM_F_CAPPED != 0 {
            4 + NLMSG_HDRLEN
        } else {
            4 + align(orig_len)
        };
        for a in Attrs::new(p.get(tlv_start..).unwrap_or(&[])) {
            match a.ty {
                NLMSGERR_ATTR_MSG => ack.message = Some(a.string()),
                NLMSGERR_ATTR_OFFS => ack.offset = a.data.try_into().ok().map(u32::from_ne_bytes),
                _ => {}
            }
        }
    }
    Ok(ack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attr;

    #[test]
    fn a_message_has_header_and_nfgenmsg() {
        let mut buf = Vec::new();
        let s = begin(&mut buf, nft_type(NFT_MSG_NEWTABLE), NLM_F_REQUEST, 9, 1, 0);
        attr::put_str(&mut buf, NFTA_TABLE_NAME, "t");
        end(&mut buf, s);
        assert_eq!(buf.len(), 16 + 4 + 8);
        assert_eq!(u32::from_ne_bytes(buf[0..4].try_into().unwrap()), 28);
        assert_eq!(u16::from_ne_bytes(buf[4..6].try_into().unwrap()), 0x0a00);
        assert_eq!(u32::from_ne_bytes(buf[8..12].try_into().unwrap()), 9);
        assert_eq!(&buf[16..20], [1, 0, 0, 0]);
        let msgs = split(&buf).unwrap();
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].nft_msg(), Some(NFT_MSG_NEWTABLE));
        assert_eq!(msgs[0].family(), Family::Inet);
        assert_eq!(msgs[0].attrs().next().unwrap().string(), "t");
    }

    #[test]
    fn batch_markers_carry_the_subsystem_as_big_endian_res_id() {
        let mut buf = Vec::new();
        let s = begin(
            &mut buf,
            NFNL_MSG_BATCH_BEGIN,
            NLM_F_REQUEST,
            1,
            0,
            NFNL_SUBSYS_NFTABLES,
        );
        end(&mut buf, s);
        assert_eq!(&buf[16..20], [0, 0, 0, 10]);
    }

    #[test]
    fn capped_acks_with_extended_messages_decode() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&36u32.to_ne_bytes());
        buf.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        buf.extend_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_ne_bytes());
        buf.extend_from_slice(&5u32.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&(-libc::EPERM).to_ne_bytes());
        // The capped original header: length, type, flags, seq, pid.
        buf.extend_from_slice(&64u32.to_ne_bytes());
        buf.extend_from_slice(&0x0a06u16.to_ne_bytes());
        buf.extend_from_slice(&0u16.to_ne_bytes());
        buf.extend_from_slice(&5u32.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes());
        attr::put_str(&mut buf, NLMSGERR_ATTR_MSG, "nope");
        let len = buf.len() as u32;
        buf[0..4].copy_from_slice(&len.to_ne_bytes());
        let msgs = split(&buf).unwrap();
        let ack = parse_ack(&msgs[0]).unwrap();
        assert_eq!(ack.errno, libc::EPERM);
        assert_eq!(ack.seq, 5);
        assert_eq!(ack.message.as_deref(), Some("nope"));
    }

    #[test]
    fn broken_framing_is_reported() {
        let buf = [200u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(split(&buf).is_err());
    }
}
