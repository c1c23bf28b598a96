//! The operator token: what a caller of the operator endpoints (`/v1/status`, `/metrics`,
//! `/rpc`, `/v1/plan`, `/v1/route`) shows as `Authorization: Bearer <token>`. It comes from
//! `DEEPCLI_OPERATOR_TOKEN`, or from `<state>/operator-token`, which the first server to start
//! creates (mode 0600).

use std::io::Write;

use super::{StateDir, StateError};

/// The operator token as a client finds it: `DEEPCLI_OPERATOR_TOKEN`, else the token file.
/// Never creates one; an empty token is no token.
pub fn read_operator_token(state: &StateDir) -> Option<String> {
    let token = match std::env::var("DEEPCLI_OPERATOR_TOKEN") {
        Ok(token) if !token.trim().is_empty() => token,
        _ => std::fs::read_to_string(state.operator_token()).ok()?,
    };
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// The operator token a server requires: `DEEPCLI_OPERATOR_TOKEN`, else `<state>/operator-token`,
/// created whole (a temporary file linked into place, so a crash never leaves an empty token
/// file that an empty `Bearer` would match).
pub fn operator_token(state: &StateDir) -> Result<String, StateError> {
    if let Some(token) = read_operator_token(state) {
        return Ok(token);
    }
    let path = state.operator_token();
    let err = |source| StateError::Token {
        path: path.clone(),
        source,
    };
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let dir = state.root();
    let mut tmp = tempfile::Builder::new()
        .prefix(".operator-token-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(
            crate::owner_only::FILE_MODE,
        ))
        .tempfile_in(dir)
        .map_err(err)?;
    tmp.write_all(token.as_bytes()).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    match tmp.persist_noclobber(&path) {
        Ok(_) => Ok(token),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another server made one first: theirs. An empty file (an older deepcli that
            // crashed while writing it) holds no token: replaced.
            match read_operator_token(state) {
                Some(theirs) => Ok(theirs),
                None => {
                    e.file.persist(&path).map_err(|e| err(e.error))?;
                    Ok(token)
                }
            }
        }
        Err(e) => Err(err(e.error)),
    }
}

#[cfg(test)]
mod tests {
    use super::{StateDir, operator_token, read_operator_token};

    /// An empty token file matched `Authorization: Bearer ` with nothing after it.
    #[test]
    fn an_empty_operator_token_file_is_no_token() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::new(tmp.path());
        std::fs::write(state.operator_token(), "\n").unwrap();
        // The variable would win over the file.
        assert_eq!(std::env::var("DEEPCLI_OPERATOR_TOKEN").ok(), None);
        assert_eq!(read_operator_token(&state), None);
        let token = operator_token(&state).unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(read_operator_token(&state), Some(token.clone()));
        assert_eq!(operator_token(&state).unwrap(), token, "kept once made");
    }
}
