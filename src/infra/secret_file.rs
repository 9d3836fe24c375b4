//! Secret files (API key files, the integrity key file): written `0600` on Unix,
//! tightened when the file already existed with wider permissions. A leaf of `infra`,
//! so the key store and the integrity keyring share it without importing each other.

/// Write `secret` and a newline to `path`, readable by its owner only.
pub(crate) fn write_secret_file(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The file may have existed with wider permissions: tighten it.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    writeln!(f, "{secret}")?;
    Ok(())
}
