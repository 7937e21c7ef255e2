//! Inline images on inputs: decoded, checked and stored once per session, referenced by storageId.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::sessions::NewImage;

/// Largest decoded image (seed: `StoredImageRef.bytes <= 5242880`).
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;
pub const MAX_IMAGES: usize = 4;

/// Standard base64, padded or not.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

#[derive(Debug, Clone)]
pub struct ImageIn {
    pub data: String,
    pub mime_type: String,
}

/// Does the content start like the type it claims? Served images must never be sniffed as
/// something else.
fn matches_signature(mime: &str, b: &[u8]) -> bool {
    match mime {
        "image/png" => b.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => b.starts_with(&[0xFF, 0xD8, 0xFF]),
        "image/gif" => b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a"),
        "image/webp" => b.len() >= 12 && &b[0..4] == b"RIFF" && &b[8..12] == b"WEBP",
        _ => false,
    }
}

pub(super) fn decode_all(images: &[ImageIn]) -> Result<Vec<NewImage>> {
    if images.len() > MAX_IMAGES {
        return Err(Error::invalid(format!(
            "images: at most {MAX_IMAGES} images per input"
        )));
    }
    images
        .iter()
        .enumerate()
        .map(|(i, img)| {
            // Base64 grows by 4/3; refuse before decoding anything far too large.
            if img.data.len() > MAX_IMAGE_BYTES / 3 * 4 + 8 {
                return Err(Error::invalid(format!(
                    "images/{i}/data: image larger than 5 MiB"
                )));
            }
            let bytes = BASE64
                .decode(img.data.as_bytes())
                .map_err(|_| Error::invalid(format!("images/{i}/data: not valid base64")))?;
            if bytes.len() > MAX_IMAGE_BYTES {
                return Err(Error::invalid(format!(
                    "images/{i}/data: image larger than 5 MiB"
                )));
            }
            if !matches_signature(&img.mime_type, &bytes) {
                return Err(Error::invalid(format!(
                    "images/{i}/data: content is not a {} image",
                    img.mime_type
                )));
            }
            let digest = Sha256::digest(&bytes);
            let storage_id = format!("img_{}", crate::secret::hex(&digest[..16]));
            Ok(NewImage {
                storage_id,
                mime_type: img.mime_type.clone(),
                bytes,
            })
        })
        .collect()
}
