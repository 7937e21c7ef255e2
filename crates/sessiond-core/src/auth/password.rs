//! Password hashing with argon2id (PHC strings with their own salt and parameters).

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

use crate::error::{Error, Result};

pub const MIN_LENGTH: usize = 10;
pub const MAX_LENGTH: usize = 1024;

pub fn check_strength(password: &str) -> Result<()> {
    let n = password.chars().count();
    if n < MIN_LENGTH {
        return Err(Error::invalid(format!(
            "password: at least {MIN_LENGTH} characters"
        )));
    }
    if n > MAX_LENGTH {
        return Err(Error::invalid(format!(
            "password: at most {MAX_LENGTH} characters"
        )));
    }
    Ok(())
}

pub fn hash(password: &str) -> Result<String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| Error::Internal(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Internal(format!("cannot hash password: {e}")))
}

/// A hash of a random password, verified against when an account does not exist so that a
/// login's timing does not reveal which emails have accounts.
pub fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| hash("not-a-real-password-0123456789").unwrap_or_default());
    &DUMMY
}

pub fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hash_and_verify() {
        let h = super::hash("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(super::verify("correct horse battery", &h));
        assert!(!super::verify("wrong horse battery", &h));
    }
}
