//! The declaration as `apply` reads it: a regular file (a link to one is followed) or standard
//! input (`-`), never more than a limit; a device, a FIFO, a socket or a directory is refused
//! before a byte is read, so `apply /dev/zero` or a FIFO with no writer end at once.

use anyhow::{Context, Result};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The most a declaration may hold unless `--max-declaration-bytes` says otherwise: 16 MiB.
pub const MAX_DECLARATION_BYTES: u64 = 16 << 20;

/// What reading the declaration gave: its name for messages and its bytes, or a refusal (exit 2)
/// naming it and why.
pub enum Got {
    Bytes { name: String, bytes: Vec<u8> },
    Refused(String),
}

/// Reads the declaration `file` (`-`: standard input) of at most `max` bytes. An error reading a
/// file that is there and of the right kind (permission, I/O) is the host's failure, not a
/// refusal.
pub fn declaration(file: &Path, max: u64) -> Result<Got> {
    if file.as_os_str() == "-" {
        let name = "standard input".to_string();
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(max + 1)
            .read_to_end(&mut bytes)
            .context("reading the declaration from standard input")?;
        if bytes.len() as u64 > max {
            return Ok(Got::Refused(past(&name, max)));
        }
        return Ok(Got::Bytes { name, bytes });
    }
    let name = file.display().to_string();
    // Asked before opening: opening a device can have effects of its own (a tape rewinds, a
    // watchdog arms), and opening a FIFO without O_NONBLOCK waits for a writer.
    let before = match std::fs::metadata(file) {
        Ok(m) => m,
        // Bad input, as a missing bundle is: named, exit 2, nothing changed.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Got::Refused(format!("declaration {name} does not exist")))
        }
        Err(e) => return Err(e).with_context(|| format!("reading declaration {name}")),
    };
    if let Some(kind) = not_regular(&before.file_type()) {
        return Ok(Got::Refused(format!(
            "declaration {name} is {kind}, not a regular file; nothing was read from it"
        )));
    }
    if before.len() > max {
        return Ok(Got::Refused(over(&name, before.len(), max)));
    }
    // Non-blocking, so a FIFO swapped in since the look above cannot hang the open; the handle's
    // own kind and identity are what count.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY).bits())
        .open(file)
        .with_context(|| format!("reading declaration {name}"))?;
    let meta = f
        .metadata()
        .with_context(|| format!("reading declaration {name}"))?;
    if let Some(kind) = not_regular(&meta.file_type()) {
        return Ok(Got::Refused(format!(
            "declaration {name} is {kind}, not a regular file; nothing was read from it"
        )));
    }
    if (meta.dev(), meta.ino()) != (before.dev(), before.ino()) {
        return Ok(Got::Refused(format!(
            "declaration {name} was replaced while it was opened; nothing was read from it"
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(max) as usize);
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading declaration {name}"))?;
    if bytes.len() as u64 > max {
        // It grew past the limit while it was read.
        return Ok(Got::Refused(past(&name, max)));
    }
    Ok(Got::Bytes { name, bytes })
}

fn over(name: &str, len: u64, max: u64) -> String {
    format!(
        "declaration {name} is {len} bytes, over the limit of {max} bytes \
         (--max-declaration-bytes)"
    )
}

fn past(name: &str, max: u64) -> String {
    format!(
        "declaration {name} holds more than {max} bytes, the limit \
         (--max-declaration-bytes)"
    )
}

/// What a file that is not a regular file is, as a refusal says it.
fn not_regular(t: &std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}
