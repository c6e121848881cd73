//! Logging to standard error, in the form its reader keeps: the journal's (`<N>` syslog priority
//! prefixes, no timestamps, no colour) when stderr is the journal, plain lines otherwise, coloured
//! only for a person at a terminal who has not set `NO_COLOR`.
//!
//! systemd tells a service its stderr is the journal by `JOURNAL_STREAM=DEV:INODE`, the device
//! and inode of that stream; a variable inherited by a process whose stderr was redirected
//! elsewhere names another file, so it counts only when it matches fd 2 (sd_journal_stream_fd's
//! rule). journald reads the `<N>` prefix as the line's priority (`SyslogLevelPrefix=yes`, the
//! default), so `journalctl -p warning -u mesh-host` shows the warnings and errors alone, and it
//! stamps each line itself.

use std::fmt;
use std::io::IsTerminal;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The filter when `RUST_LOG` is not set: warnings and errors from everything, and what the
/// resident host does (its reconciles, the guard and openings put back, firewalld's reloads, the
/// link's changes and the declarations it applies) and the progress of long steps at info, so an
/// operator's journal shows them.
pub const DEFAULT_FILTER: &str =
    "warn,mesh_host::resident=info,mesh_host::link=info,mesh_host::progress=info";

/// Where the lines go and how they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// stderr is the journal: `<N>` prefixes, no timestamps, no colour.
    Journal,
    /// Plain lines with their own timestamps; colour when `ansi`.
    Plain { ansi: bool },
}

/// The style for this process's stderr and environment.
pub fn style() -> Style {
    let stream = std::env::var("JOURNAL_STREAM").ok();
    let no_color = std::env::var_os("NO_COLOR");
    let stderr = std::io::stderr();
    style_for(
        stream.as_deref(),
        stderr_identity(),
        stderr.is_terminal(),
        no_color.as_deref().map(|v| !v.is_empty()).unwrap_or(false),
    )
}

/// The decision, from its inputs: `journal_stream` is `JOURNAL_STREAM`, `stderr` the device and
/// inode of fd 2, `no_color` whether `NO_COLOR` is set to something (no-color.org: present and
/// not empty).
pub fn style_for(
    journal_stream: Option<&str>,
    stderr: Option<(u64, u64)>,
    terminal: bool,
    no_color: bool,
) -> Style {
    if let (Some(s), Some((dev, ino))) = (journal_stream, stderr) {
        if parse_stream(s) == Some((dev, ino)) {
            return Style::Journal;
        }
    }
    Style::Plain {
        ansi: terminal && !no_color,
    }
}

/// `JOURNAL_STREAM`'s `DEV:INODE`, both decimal.
pub fn parse_stream(s: &str) -> Option<(u64, u64)> {
    let (dev, ino) = s.trim().split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// The device and inode of this process's fd 2, when it is open.
fn stderr_identity() -> Option<(u64, u64)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let fd = std::io::stderr().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    Some((meta.dev(), meta.ino()))
}

/// syslog's priority for a tracing level: error 3, warning 4, info 6, debug and trace 7.
pub fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// One event as a journal line: `<N>target: message field=value …`.
struct JournalFormat;

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        write!(writer, "<{}>{}: ", priority(*meta.level()), meta.target())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Installs the subscriber: `RUST_LOG` if set, else [`DEFAULT_FILTER`], in the style
/// [`style`] chooses.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_FILTER.into());
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match style() {
        Style::Journal => builder.with_ansi(false).event_format(JournalFormat).init(),
        Style::Plain { ansi } => builder.with_ansi(ansi).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_counts_only_when_it_is_this_stderr() {
        let fd2 = Some((64769, 1234));
        assert_eq!(
            style_for(Some("64769:1234"), fd2, false, false),
            Style::Journal
        );
        // Inherited by a process whose stderr went elsewhere: plain.
        assert_eq!(
            style_for(Some("64769:999"), fd2, false, false),
            Style::Plain { ansi: false }
        );
        assert_eq!(
            style_for(Some("nonsense"), fd2, true, false),
            Style::Plain { ansi: true }
        );
        assert_eq!(
            style_for(None, fd2, true, false),
            Style::Plain { ansi: true }
        );
        // The journal is never coloured, terminal or not.
        assert_eq!(
            style_for(Some("64769:1234"), fd2, true, false),
            Style::Journal
        );
    }

    #[test]
    fn colour_only_for_a_terminal_without_no_color() {
        assert_eq!(
            style_for(None, None, true, false),
            Style::Plain { ansi: true }
        );
        assert_eq!(
            style_for(None, None, true, true),
            Style::Plain { ansi: false }
        );
        assert_eq!(
            style_for(None, None, false, false),
            Style::Plain { ansi: false }
        );
    }

    #[test]
    fn levels_are_syslog_priorities() {
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::DEBUG), 7);
        assert_eq!(parse_stream("8:12345\n"), Some((8, 12345)));
        assert_eq!(parse_stream("8"), None);
    }
}
