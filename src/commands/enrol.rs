//! `mesh-host enrol --token-file PATH` or `--token TOKEN`: the token read and checked, the node's
//! key made here, the controller asked, and the enrolment kept by `link::keep`; a resident host
//! running is told at once.

use crate::apply::Host;
use crate::commands::{Exit, Refusal};
use crate::link::ATTEMPT_DEADLINE;
use anyhow::{Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use std::path::Path;

/// The longest token file read (a token is a few hundred bytes).
const TOKEN_FILE_MAX: u64 = 64 * 1024;

/// Why `enrol --token-file` read no token; each names the file (or standard input).
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("{shown}: {source}")]
    Unreadable {
        shown: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{shown}: longer than {TOKEN_FILE_MAX} bytes, not a token")]
    TooLong { shown: String },
    #[error("{shown} is empty: it holds no token")]
    Empty { shown: String },
}

/// Says (a warning) when a token file can be read by its group or by others: its secret enrols
/// any machine that presents it first, so a copy another user could read is worth a word, not a
/// refusal (the token is used once, and the operator may be enrolling right now for that reason).
fn warn_if_shared(path: &Path, file: &std::fs::File) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(meta) = file.metadata() else { return };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o044 != 0 {
        let who = match (mode & 0o040 != 0, mode & 0o004 != 0) {
            (true, true) => "its group and every user",
            (true, false) => "its group",
            _ => "every user",
        };
        tracing::warn!(
            "token file {} can be read by {who} (mode {mode:04o}): its secret enrols whoever \
             presents it first; keep a token in a file only root reads (chmod 600) and remove it \
             once enrolled",
            path.display()
        );
    }
}

/// The token of `enrol --token-file PATH` (`-`: standard input), whitespace around it dropped.
/// A missing, unreadable, oversized or empty file is an error naming it.
pub fn read_token_file(path: &Path) -> std::result::Result<String, TokenFileError> {
    use std::io::Read as _;
    let shown = if path == Path::new("-") {
        "standard input".to_string()
    } else {
        format!("token file {}", path.display())
    };
    let unreadable = |source| TokenFileError::Unreadable {
        shown: shown.clone(),
        source,
    };
    let reader: Box<dyn std::io::Read> = if path == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        let file = std::fs::File::open(path).map_err(unreadable)?;
        warn_if_shared(path, &file);
        Box::new(file)
    };
    let mut text = String::new();
    reader
        .take(TOKEN_FILE_MAX + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > TOKEN_FILE_MAX {
        return Err(TokenFileError::TooLong { shown });
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(TokenFileError::Empty { shown });
    }
    Ok(token.to_string())
}

/// `mesh-host enrol --token-file PATH` or `--token TOKEN` (`--json`), with the token's text; a
/// token or an enrolment refused is a [`Refusal`] for the command line to say.
pub fn enrol(host: &Host<'_>, text: &str, json: bool) -> Result<Result<Exit, Refusal>> {
    let token = match link::Token::parse(text, link::now_secs()) {
        Ok(t) => t,
        Err(link::Error::Token(problems)) => {
            let problems: Vec<String> = problems.iter().map(|p| format!("token: {p}")).collect();
            return Ok(Err(Refusal {
                exit: Exit::Refused,
                problems,
                summary: "the token was refused; nothing was stored",
            }));
        }
        Err(e) => return Err(e.into()),
    };
    // The node's own key is made here and now; it is stored only once the enrolment worked.
    let key = link::generate_key()?;
    let profile = crate::system::profile::Profile::gather(host.root, host.runner);
    let inventory = match crate::commands::inventory::read(host.runner) {
        Ok(v) => v.to_json(),
        Err(e) => serde_json::json!({"unreadable": crate::error::error_text(&e)}),
    };
    let request = link::EnrolRequest {
        token: token.id.clone(),
        node: token.node.clone(),
        public_key: STANDARD.encode(key.verifying_key().as_bytes()),
        profile: serde_json::to_value(&profile)?,
        inventory,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the link's runtime")?;
    let identity = match rt.block_on(link::enrol(
        &token,
        &request,
        &link::Resolver::under(host.root),
        ATTEMPT_DEADLINE,
    )) {
        Ok(i) => i,
        Err(e @ (link::Error::Enrolment { .. } | link::Error::Refused { .. })) => {
            return Ok(Err(Refusal {
                exit: Exit::Refused,
                problems: vec![e.to_string()],
                summary: "the token was refused; nothing was stored",
            }));
        }
        Err(e @ link::Error::Fingerprint { .. }) => {
            return Ok(Err(Refusal {
                exit: Exit::Unsafe,
                problems: vec![format!("refused: {e}")],
                summary: "nothing was stored",
            }));
        }
        Err(e) => return Err(anyhow::Error::new(e).context("enrolling")),
    };
    let linked = crate::link::keep(host.root, &key, &token, &identity)?;
    if json {
        let v = serde_json::json!({"enrolled": {
            "node": linked.node,
            "brokers": token.brokers,
            "certificate_sha256": token.fingerprint,
        }});
        crate::json_contract::print("enrolled", 0, &v)?;
    } else {
        println!(
            "enrolled as node {} through broker {} (certificate {}); `mesh-host run` keeps the \
             link",
            linked.node,
            token.brokers.join(", "),
            &token.fingerprint[..16]
        );
    }
    // A resident host already running takes the new identity up at once.
    if crate::pid_file::tell_resident(host.root) {
        // Said under the link's target, which the default log filter shows.
        tracing::info!(target: "mesh_host::link", "told the resident host that a new enrolment is stored");
    }
    Ok(Ok(Exit::Done))
}
