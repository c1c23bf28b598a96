//! Content hashes: `sha256:<hex>`, the one form deepcli writes into state, plans and logs.

use sha2::{Digest, Sha256};

/// A running SHA-256 whose parts are length-prefixed, so `("ab", "c")` and `("a", "bc")`
/// differ.
#[derive(Default)]
pub struct Hasher(Sha256);

impl Hasher {
    pub fn part(&mut self, bytes: &[u8]) -> &mut Hasher {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub fn finish(&mut self) -> String {
        let digest = std::mem::take(&mut self.0).finalize();
        format!("sha256:{digest:x}")
    }
}

/// A SHA-256 of everything written to it: hashes a serialization without keeping it.
#[derive(Default)]
pub struct Writer(Sha256);

impl Writer {
    pub fn finish(self) -> String {
        format!("sha256:{:x}", self.0.finalize())
    }
}

impl std::io::Write for Writer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The hash of one blob.
pub fn of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_delimited() {
        let ab_c = Hasher::default().part(b"ab").part(b"c").finish();
        let a_bc = Hasher::default().part(b"a").part(b"bc").finish();
        assert_ne!(ab_c, a_bc);
        let mut written = Writer::default();
        std::io::Write::write_all(&mut written, b"a").unwrap();
        std::io::Write::write_all(&mut written, b"bc").unwrap();
        assert_eq!(written.finish(), of(b"abc"));
        assert_eq!(
            of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
