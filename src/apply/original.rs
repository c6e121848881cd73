//! The originals of found files: copied by streaming from the handle the file was opened by,
//! once per path, or past `settings.originals_limit_bytes` recorded by their digest only.

use super::{Cx, OriginalError};
use crate::failpoint;
use crate::store::{self, Op, Original};
use std::path::Path;

impl Cx<'_> {
    /// Saves the original of a found file before anything else happens to it, once per path,
    /// copied by streaming from the handle it was opened by (never whole in memory); past the
    /// settings' originals limit only its digest is recorded. Returns what was kept.
    ///
    /// `known` is the file's digest when its held record's stamp says it is unchanged: a file
    /// whose original is already kept is then not read at all.
    pub fn keep_original(
        &mut self,
        id: &str,
        key: &str,
        found: &crate::beneath::Found,
        known: Option<String>,
    ) -> Result<KeptOriginal, OriginalError> {
        let limit = originals_limit(self.store.state.settings.as_ref());
        let save = |source| OriginalError::Save {
            key: key.to_string(),
            source,
        };
        if let Some(o) = self.store.state.original(key) {
            let digest = match known {
                Some(d) => d,
                None => found.digest().map_err(save)?,
            };
            return Ok(KeptOriginal {
                saved: saved_at(o).map(str::to_string),
                digest,
                size: found.size,
                limit,
            });
        }
        let base = Path::new(key)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file");
        let tag = &store::digest(key.as_bytes())[7..23];
        let (saved, digest) = if found.size > limit {
            (None, found.digest().map_err(save)?)
        } else {
            // Opened by name in the store's directory, following no link: a link planted at an
            // original's name (or at `originals/`) is never written through.
            let shown = self.store.dir().join("originals");
            let dir = self
                .store
                .originals(true)
                .and_then(|d| d.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
                .map_err(|source| OriginalError::Directory { dir: shown, source })?;
            let name = format!("{tag}-{base}");
            // An original saved by a host that died before recording it is the first one; keep
            // it (its digest is the file's as found then, which is what it holds). Anything else
            // at its name (a link) is replaced.
            let digest = if dir.is_file(&name) {
                found.digest().map_err(save)?
            } else {
                // In the store's own directory, under a name only the host gives; one left by a
                // host that died while copying is replaced, and one that failed is removed (a
                // full disk would otherwise keep the partial copy of a large original).
                let tmp = format!(".{tag}.tmp");
                let copied = dir.create(&tmp, false).and_then(|mut out| {
                    let digest = crate::beneath::copy_digest(found, Some(&mut out))?;
                    out.sync_all()?;
                    drop(out);
                    dir.rename(&tmp, &name)?;
                    Ok(digest)
                });
                let digest = match copied {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = dir.remove(&tmp);
                        return Err(save(e));
                    }
                };
                dir.sync().map_err(save)?;
                digest
            };
            // Recorded as a machine path, so the store reads the same under any root.
            (
                Some(format!("/var/lib/mesh-host/originals/{tag}-{base}")),
                digest,
            )
        };
        self.changed(id);
        self.record(
            id,
            Op::Original(Original {
                key: key.to_string(),
                saved: saved
                    .clone()
                    .unwrap_or_else(|| format!("{DIGEST_ONLY}{} bytes", found.size)),
                digest: digest.clone(),
                mode: Some(found.mode & 0o7777),
                uid: Some(found.uid),
                gid: Some(found.gid),
            }),
        )?;
        failpoint::hit("after-record", id);
        Ok(KeptOriginal {
            saved,
            digest,
            size: found.size,
            limit,
        })
    }
}

/// The default of `settings.found_read_s`: 60 s.
pub const FOUND_READ_S_DEFAULT: u64 = 60;

/// How long one whole read of a found, held or owned file may take.
pub fn found_read_secs(settings: Option<&crate::declaration::Settings>) -> u64 {
    settings
        .and_then(|s| s.found_read_s)
        .map_or(FOUND_READ_S_DEFAULT, u64::from)
}

/// The default of `settings.found_read_limit_bytes`: 1 GiB.
pub const FOUND_READ_LIMIT_DEFAULT: u64 = 1024 * 1024 * 1024;

/// The largest file the host reads whole.
pub fn found_read_limit(settings: Option<&crate::declaration::Settings>) -> u64 {
    settings
        .and_then(|s| s.found_read_limit_bytes)
        .unwrap_or(FOUND_READ_LIMIT_DEFAULT)
}

/// What the store records in an original's `saved` when the file was over the originals limit
/// and only its digest was kept (followed by its size).
const DIGEST_ONLY: &str = "not saved, recorded by its digest only: ";

/// The default of `settings.originals_limit_bytes`: 64 MiB.
pub const ORIGINALS_LIMIT_DEFAULT: u64 = 64 * 1024 * 1024;

/// The largest found file whose original is saved whole.
pub fn originals_limit(settings: Option<&crate::declaration::Settings>) -> u64 {
    settings
        .and_then(|s| s.originals_limit_bytes)
        .unwrap_or(ORIGINALS_LIMIT_DEFAULT)
}

/// Where an original is saved (a machine path), or `None` when only its digest was recorded.
pub(crate) fn saved_at(o: &Original) -> Option<&str> {
    (!o.saved.starts_with(DIGEST_ONLY)).then_some(o.saved.as_str())
}

/// The size of an original recorded by its digest only.
pub(crate) fn digest_only_size(o: &Original) -> Option<&str> {
    o.saved.strip_prefix(DIGEST_ONLY)
}

/// What [`Cx::keep_original`] kept of a found file.
pub(crate) struct KeptOriginal {
    /// Where its bytes are saved; `None` when it was over the limit.
    pub saved: Option<String>,
    pub digest: String,
    pub size: u64,
    pub limit: u64,
}

impl KeptOriginal {
    /// How a report line says it.
    pub fn said(&self) -> String {
        match &self.saved {
            Some(at) => format!("original saved at {at}"),
            None => format!(
                "original not saved: {} bytes, over the originals limit of {} bytes \
                 (settings.originals_limit_bytes); recorded by its digest {} only",
                self.size, self.limit, self.digest
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::declaration::Settings;
    use crate::system::fake::{declaration, Bed};

    /// Proves the limit is the settings': a file one byte over it is recorded by its digest
    /// only (nothing copied), one at it is copied whole, and each digest is the file's.
    #[test]
    fn past_the_limit_only_the_digest_is_recorded() {
        let mut bed = Bed::new();
        bed.store.state.settings = Some(Settings {
            ports: Default::default(),
            private_network: None,
            deadlines: None,
            originals_limit_bytes: Some(4),
            found_read_limit_bytes: None,
            found_read_s: None,
        });
        std::fs::create_dir(bed.dir.path().join("etc")).unwrap();
        std::fs::write(bed.dir.path().join("etc/big"), "12345").unwrap();
        std::fs::write(bed.dir.path().join("etc/small"), "1234").unwrap();
        let decl = declaration("converged", &[], serde_json::json!([]));
        let mut cx = bed.cx(&decl);
        let big = cx.beneath.read_file("/etc/big").unwrap().unwrap();
        let kept = cx.keep_original("a", "/etc/big", &big, None).unwrap();
        assert_eq!(kept.saved, None);
        assert_eq!(kept.digest, crate::store::digest(b"12345"));
        assert!(kept
            .said()
            .contains("5 bytes, over the originals limit of 4 bytes"));
        let small = cx.beneath.read_file("/etc/small").unwrap().unwrap();
        let kept = cx.keep_original("b", "/etc/small", &small, None).unwrap();
        let saved = kept.saved.clone().expect("saved whole");
        drop(cx);
        let on_disk = bed.dir.path().join(saved.trim_start_matches('/'));
        assert_eq!(std::fs::read(on_disk).unwrap(), b"1234");
        let rec = bed.store.state.original("/etc/big").unwrap();
        assert_eq!(super::saved_at(rec), None);
        assert_eq!(super::digest_only_size(rec), Some("5 bytes"));
        assert_eq!(
            std::fs::read_dir(bed.dir.path().join("var/lib/mesh-host/originals"))
                .unwrap()
                .count(),
            1,
            "only the small file was copied"
        );
    }
}
