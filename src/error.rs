//! How the core says an error: one line with its causes, for the terminal, the log and the link.

/// An error and its causes on one line, each cause said once: an error whose message already
/// ends with its cause's text (`store X: permission denied`, whose source is `permission
/// denied`) is not followed by that text again.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let said = cause.to_string();
        if text.contains(&said) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&said);
    }
    text
}
