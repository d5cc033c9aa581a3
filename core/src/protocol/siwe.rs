//! Sign-In with Ethereum (EIP-4361): the message a wallet signs, and its signer.
//!
//! Parsed by hand rather than with the `siwe` crate, which pins an older alloy; the grammar is
//! small. The message is line oriented:
//!
//! ```text
//! {domain} wants you to sign in with your Ethereum account:
//! {EIP-55 address}
//!
//! [{statement}
//! ]
//! URI: {uri}
//! Version: 1
//! Chain ID: {chain id}
//! Nonce: {nonce}
//! Issued At: {RFC 3339}
//! [Expiration Time: {RFC 3339}]
//! [Not Before: {RFC 3339}]
//! [Request ID: {text}]
//! [Resources:
//! - {uri}...]
//! ```
//!
//! The signature is EIP-191 `personal_sign` over the message bytes; the signer is recovered
//! with secp256k1 (k256, through alloy) and must be the address the message names.

use super::EthAddress;
use alloy::primitives::{Address, Signature};
use chrono::{DateTime, Utc};

/// A parsed EIP-4361 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiweMessage {
    /// The origin's URI scheme (`https`), when the first line names one.
    pub scheme: Option<String>,
    /// The authority (host and optional port) asking for the sign-in.
    pub domain: String,
    /// The account signing in.
    pub address: EthAddress,
    /// A line for the user to read, if any.
    pub statement: Option<String>,
    /// The resource the sign-in is for (usually the site's URI).
    pub uri: String,
    /// The message format's version; always `1`.
    pub version: String,
    /// The EIP-155 chain the session is for.
    pub chain_id: u64,
    /// The server's one-time token against replay (8 or more letters and digits).
    pub nonce: String,
    /// When the message was made.
    pub issued_at: DateTime<Utc>,
    /// When the message stops being valid, if ever.
    pub expiration_time: Option<DateTime<Utc>>,
    /// When the message starts being valid, if not at once.
    pub not_before: Option<DateTime<Utc>>,
    /// An id the requesting system chose, if any.
    pub request_id: Option<String>,
    /// Resources the user is asked to grant access to, as URIs.
    pub resources: Vec<String>,
}

/// A problem with a sign-in message, naming the line or field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SiweError {
    /// The EIP-4361 field (`domain`, `address`, `nonce`, …) or `message` for the layout.
    pub field: &'static str,
    /// What is wrong there.
    pub message: String,
}

fn err(field: &'static str, message: impl Into<String>) -> SiweError {
    SiweError {
        field,
        message: message.into(),
    }
}

const PREAMBLE: &str = " wants you to sign in with your Ethereum account:";

/// Largest message accepted: a sign-in message is a few hundred bytes; the cap keeps a
/// malicious one from costing more.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;

impl SiweMessage {
    /// Parses a message and checks its layout and fields (not its signature: [`recover_signer`]).
    pub fn parse(text: &str) -> Result<SiweMessage, SiweError> {
        if text.len() > MAX_MESSAGE_BYTES {
            return Err(err(
                "message",
                format!(
                    "{} bytes exceeds the limit of {MAX_MESSAGE_BYTES}",
                    text.len()
                ),
            ));
        }
        let mut lines = text.split('\n').peekable();

        let first = lines.next().unwrap_or_default();
        let authority = first
            .strip_suffix(PREAMBLE)
            .ok_or_else(|| err("message", format!("line 1 must end with {PREAMBLE:?}")))?;
        let (scheme, domain) = match authority.split_once("://") {
            Some((scheme, domain)) => (Some(scheme.to_owned()), domain),
            None => (None, authority),
        };
        if domain.is_empty() || domain.contains(char::is_whitespace) {
            return Err(err("domain", format!("{domain:?} is not an authority")));
        }

        let address_line = lines.next().ok_or_else(|| err("address", "missing"))?;
        // EIP-4361 requires the EIP-55 checksum: it catches a mistyped address.
        let address = Address::parse_checksummed(address_line, None).map_err(|e| {
            err(
                "address",
                format!("{address_line:?} is not an EIP-55 checksummed address ({e})"),
            )
        })?;

        if lines.next() != Some("") {
            return Err(err("message", "a blank line must follow the address"));
        }
        let mut statement = None;
        if lines
            .peek()
            .is_some_and(|l| !l.is_empty() && !l.starts_with("URI: "))
        {
            let line = lines.next().unwrap_or_default();
            statement = Some(line.to_owned());
            if lines.next() != Some("") {
                return Err(err("statement", "a blank line must follow the statement"));
            }
        } else if lines.peek() == Some(&"") {
            // The spec's form with no statement keeps the empty statement line.
            lines.next();
        }

        let uri = field(&mut lines, "URI", "uri")?
            .ok_or_else(|| err("uri", "the URI: line is missing"))?;
        let version = field(&mut lines, "Version", "version")?
            .ok_or_else(|| err("version", "the Version: line is missing"))?;
        if version != "1" {
            return Err(err(
                "version",
                format!("{version:?} is not supported; use 1"),
            ));
        }
        let chain_id = field(&mut lines, "Chain ID", "chain_id")?
            .ok_or_else(|| err("chain_id", "the Chain ID: line is missing"))?;
        let chain_id: u64 = chain_id
            .parse()
            .map_err(|_| err("chain_id", format!("{chain_id:?} is not a chain id")))?;
        let nonce = field(&mut lines, "Nonce", "nonce")?
            .ok_or_else(|| err("nonce", "the Nonce: line is missing"))?;
        if nonce.len() < 8 || !nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(err("nonce", "must be at least 8 letters or digits"));
        }
        let issued_at = field(&mut lines, "Issued At", "issued_at")?
            .ok_or_else(|| err("issued_at", "the Issued At: line is missing"))?;
        let issued_at = timestamp(&issued_at, "issued_at")?;
        let expiration_time = field(&mut lines, "Expiration Time", "expiration_time")?
            .map(|t| timestamp(&t, "expiration_time"))
            .transpose()?;
        let not_before = field(&mut lines, "Not Before", "not_before")?
            .map(|t| timestamp(&t, "not_before"))
            .transpose()?;
        let request_id = field(&mut lines, "Request ID", "request_id")?;
        let mut resources = Vec::new();
        if lines.peek() == Some(&"Resources:") {
            lines.next();
            while let Some(line) = lines.peek().and_then(|l| l.strip_prefix("- ")) {
                resources.push(line.to_owned());
                lines.next();
            }
        }
        // A trailing newline is tolerated; anything else after the last field is not.
        if let Some(rest) = lines.find(|l| !l.is_empty()) {
            return Err(err("message", format!("unexpected line {rest:?}")));
        }

        Ok(SiweMessage {
            scheme,
            domain: domain.to_owned(),
            address: EthAddress(address.into_array()),
            statement,
            uri,
            version,
            chain_id,
            nonce,
            issued_at,
            expiration_time,
            not_before,
            request_id,
            resources,
        })
    }

    /// Renders the message as a wallet shows and signs it; `parse(render())` is the identity.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(scheme) = &self.scheme {
            out.push_str(scheme);
            out.push_str("://");
        }
        out.push_str(&self.domain);
        out.push_str(PREAMBLE);
        out.push('\n');
        out.push_str(&Address::from(self.address.0).to_checksum(None));
        out.push_str("\n\n");
        if let Some(statement) = &self.statement {
            out.push_str(statement);
            out.push('\n');
        }
        out.push('\n');
        let ts = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        out.push_str(&format!(
            "URI: {}\nVersion: {}\nChain ID: {}\nNonce: {}\nIssued At: {}",
            self.uri,
            self.version,
            self.chain_id,
            self.nonce,
            ts(&self.issued_at)
        ));
        if let Some(t) = &self.expiration_time {
            out.push_str(&format!("\nExpiration Time: {}", ts(t)));
        }
        if let Some(t) = &self.not_before {
            out.push_str(&format!("\nNot Before: {}", ts(t)));
        }
        if let Some(id) = &self.request_id {
            out.push_str(&format!("\nRequest ID: {id}"));
        }
        if !self.resources.is_empty() {
            out.push_str("\nResources:");
            for r in &self.resources {
                out.push_str(&format!("\n- {r}"));
            }
        }
        out
    }
}

/// The value of the optional `Tag: value` line if it is next.
fn field<'a>(
    lines: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
    tag: &str,
    name: &'static str,
) -> Result<Option<String>, SiweError> {
    let prefix = format!("{tag}: ");
    match lines.peek().and_then(|l| l.strip_prefix(prefix.as_str())) {
        Some("") => Err(err(name, "is empty")),
        Some(value) => {
            let value = value.to_owned();
            lines.next();
            Ok(Some(value))
        }
        None => Ok(None),
    }
}

fn timestamp(text: &str, name: &'static str) -> Result<DateTime<Utc>, SiweError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| err(name, format!("{text:?} is not an RFC 3339 time ({e})")))
}

/// The address that signed `message` with EIP-191 `personal_sign`; `signature` is 65 bytes
/// (r, s, v) in hex with or without `0x`.
pub fn recover_signer(message: &str, signature: &str) -> Result<EthAddress, SiweError> {
    let hex_part = signature.strip_prefix("0x").unwrap_or(signature);
    let bytes = hex::decode(hex_part).map_err(|_| err("signature", "is not hex"))?;
    if bytes.len() != 65 {
        return Err(err(
            "signature",
            format!("must be 65 bytes (r, s, v), found {}", bytes.len()),
        ));
    }
    let signature = Signature::from_raw(&bytes)
        .map_err(|e| err("signature", format!("is not a secp256k1 signature ({e})")))?;
    let address = signature
        .recover_address_from_msg(message.as_bytes())
        .map_err(|e| err("signature", format!("no signer can be recovered ({e})")))?;
    Ok(EthAddress(address.into_array()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::signers::SignerSync;
    use alloy::signers::local::PrivateKeySigner;

    fn sample(address: EthAddress) -> SiweMessage {
        SiweMessage {
            scheme: None,
            domain: "localhost:8080".into(),
            address,
            statement: Some("Sign in to Shardwork".into()),
            uri: "http://localhost:8080".into(),
            version: "1".into(),
            chain_id: 31337,
            nonce: "abcdefgh1234".into(),
            issued_at: "2026-11-22T03:00:00Z".parse().unwrap(),
            expiration_time: Some("2026-11-22T03:10:00Z".parse().unwrap()),
            not_before: None,
            request_id: None,
            resources: vec!["ipfs://bafy".into(), "https://example.org/x".into()],
        }
    }

    fn signer() -> PrivateKeySigner {
        PrivateKeySigner::from_bytes(&[0x11; 32].into()).unwrap()
    }

    #[test]
    fn rendered_message_parses_back() {
        let msg = sample(EthAddress(signer().address().into_array()));
        assert_eq!(SiweMessage::parse(&msg.render()).unwrap(), msg);
        let bare = SiweMessage {
            statement: None,
            expiration_time: None,
            resources: vec![],
            ..msg
        };
        assert_eq!(SiweMessage::parse(&bare.render()).unwrap(), bare);
    }

    #[test]
    fn lowercase_address_is_refused_for_its_missing_checksum() {
        let msg = sample(EthAddress(signer().address().into_array()));
        let text = msg.render();
        let lower = text.replace(
            &signer().address().to_checksum(None),
            &format!("{}", msg.address),
        );
        assert_eq!(SiweMessage::parse(&lower).unwrap_err().field, "address");
    }

    #[test]
    fn each_bad_field_is_named() {
        let text = sample(EthAddress(signer().address().into_array())).render();
        for (from, to, field) in [
            ("Chain ID: 31337", "Chain ID: x", "chain_id"),
            ("Nonce: abcdefgh1234", "Nonce: ab", "nonce"),
            ("Version: 1", "Version: 2", "version"),
            ("Issued At: 2026", "Issued At: yesterday 2026", "issued_at"),
            (" wants you", " needs you", "message"),
        ] {
            let bad = text.replace(from, to);
            assert_eq!(SiweMessage::parse(&bad).unwrap_err().field, field, "{to}");
        }
        let trailing = format!("{text}\nExtra: line");
        assert_eq!(SiweMessage::parse(&trailing).unwrap_err().field, "message");
    }

    #[test]
    fn signer_is_recovered_from_a_personal_sign_signature() {
        let signer = signer();
        let text = sample(EthAddress(signer.address().into_array())).render();
        let signature = signer.sign_message_sync(text.as_bytes()).unwrap();
        let hex_sig = format!("0x{}", hex::encode(signature.as_bytes()));
        let recovered = recover_signer(&text, &hex_sig).unwrap();
        assert_eq!(recovered.0, signer.address().into_array());
        // Any change to the message changes the recovered signer.
        let other = recover_signer(&text.replace("31337", "1"), &hex_sig).unwrap();
        assert_ne!(other, recovered);
        assert_eq!(
            recover_signer(&text, "0x1234").unwrap_err().field,
            "signature"
        );
    }
}
