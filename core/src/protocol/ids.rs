//! Identifier newtypes that only hold valid values: a CID, an Ethereum address, an amount of wei.
//!
//! They serialize as the strings users write, and refuse bad strings at the edge, so nothing
//! past deserialization sees an invalid identifier.

use std::fmt;
use std::str::FromStr;

use cid::Cid;

/// An IPFS CID, written as its canonical string (base32 for CIDv1, base58btc for CIDv0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId(pub Cid);

impl ContentId {
    /// The CID itself.
    pub fn cid(&self) -> &Cid {
        &self.0
    }
}

impl From<Cid> for ContentId {
    fn from(cid: Cid) -> Self {
        ContentId(cid)
    }
}

impl FromStr for ContentId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("a CID is required".into());
        }
        s.parse::<Cid>()
            .map(ContentId)
            .map_err(|err| format!("{s:?} is not a valid CID ({err})"))
    }
}

impl fmt::Display for ContentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A 20-byte Ethereum address, written `0x` + 40 hex digits. Mixed case is accepted as given;
/// it is stored and printed lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EthAddress(pub [u8; 20]);

impl EthAddress {
    /// The zero address (`0x` and 40 zeros), which names no account and no token.
    pub const ZERO: EthAddress = EthAddress([0; 20]);
}

impl FromStr for EthAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex_part = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .ok_or_else(|| format!("{s:?} is not an address: it must start with 0x"))?;
        if hex_part.len() != 40 {
            return Err(format!(
                "{s:?} is not an address: expected 40 hex digits after 0x, found {}",
                hex_part.len()
            ));
        }
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(hex_part, &mut bytes)
            .map_err(|_| format!("{s:?} is not an address: it holds a non-hex character"))?;
        Ok(EthAddress(bytes))
    }
}

impl fmt::Display for EthAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{}", hex::encode(self.0))
    }
}

/// A non-negative amount in the token's smallest unit (wei for ETH), written as a decimal
/// string because JSON numbers lose precision above 2^53. Up to 2^256 - 1, as on chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeiAmount(String);

impl WeiAmount {
    /// 2^256 - 1, the largest uint256.
    const MAX: &'static str =
        "115792089237316195423570985008687907853269984665640564039457584007913129639935";

    /// The amount as a decimal string without leading zeros.
    pub fn as_decimal(&self) -> &str {
        &self.0
    }

    /// Whether the amount is 0.
    pub fn is_zero(&self) -> bool {
        self.0 == "0"
    }
}

impl FromStr for WeiAmount {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "{s:?} is not an amount: use a decimal integer of wei"
            ));
        }
        let trimmed = s.trim_start_matches('0');
        let canonical = if trimmed.is_empty() { "0" } else { trimmed };
        let too_big = canonical.len() > Self::MAX.len()
            || (canonical.len() == Self::MAX.len() && canonical > Self::MAX);
        if too_big {
            return Err(format!("{s:?} exceeds the largest uint256"));
        }
        Ok(WeiAmount(canonical.to_owned()))
    }
}

impl fmt::Display for WeiAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! string_serde {
    ($ty:ty) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(ContentId);
string_serde!(EthAddress);
string_serde!(WeiAmount);

/// The identifiers as OpenAPI schemas: strings with the pattern and format users write, not the
/// Rust structures behind them. A pattern is necessary, not sufficient: a CID must also decode
/// and an amount must not exceed 2^256 - 1, which the server checks.
#[cfg(feature = "openapi")]
mod openapi {
    use std::borrow::Cow;

    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaFormat, Type};

    use super::{ContentId, EthAddress, WeiAmount};

    fn string_schema(
        format: &str,
        pattern: &str,
        description: &str,
        example: &str,
    ) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::Custom(format.to_owned())))
            .pattern(Some(pattern))
            .description(Some(description))
            .examples([serde_json::Value::from(example)])
            .into()
    }

    impl utoipa::PartialSchema for ContentId {
        fn schema() -> RefOr<Schema> {
            string_schema(
                "cid",
                "^(Qm[1-9A-HJ-NP-Za-km-z]{44}|b[a-z2-7]+)$",
                "An IPFS CID: base32 (`b…`) for CIDv1, base58btc (`Qm…`) for CIDv0.",
                "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
            )
        }
    }
    impl utoipa::ToSchema for ContentId {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("ContentId")
        }
    }

    impl utoipa::PartialSchema for EthAddress {
        fn schema() -> RefOr<Schema> {
            string_schema(
                "eth-address",
                "^0[xX][0-9a-fA-F]{40}$",
                "A 20-byte Ethereum address, `0x` and 40 hex digits; answered lowercase.",
                "0x19e7e376e7c213b7e7e7e46cc70a5dd086daff2a",
            )
        }
    }
    impl utoipa::ToSchema for EthAddress {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("EthAddress")
        }
    }

    impl utoipa::PartialSchema for WeiAmount {
        fn schema() -> RefOr<Schema> {
            string_schema(
                "uint256",
                "^0*[0-9]{1,78}$",
                "An amount in the token's smallest unit (wei for ETH) as a decimal string, up to \
                 2^256 - 1; a string because JSON numbers lose precision above 2^53.",
                "1000000000000000000",
            )
        }
    }
    impl utoipa::ToSchema for WeiAmount {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("WeiAmount")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_needs_prefix_and_forty_hex_digits() {
        assert!(
            "0x00000000000000000000000000000000000000aB"
                .parse::<EthAddress>()
                .is_ok()
        );
        let err = "00000000000000000000000000000000000000ab"
            .parse::<EthAddress>()
            .unwrap_err();
        assert!(err.contains("0x"), "{err}");
        let err = "0x0000".parse::<EthAddress>().unwrap_err();
        assert!(err.contains("found 4"), "{err}");
        let err = "0x000000000000000000000000000000000000000g"
            .parse::<EthAddress>()
            .unwrap_err();
        assert!(err.contains("non-hex"), "{err}");
    }

    #[test]
    fn wei_amount_accepts_max_uint256_and_refuses_one_more() {
        assert!(WeiAmount::MAX.parse::<WeiAmount>().is_ok());
        let one_more =
            "115792089237316195423570985008687907853269984665640564039457584007913129639936";
        assert!(
            one_more
                .parse::<WeiAmount>()
                .unwrap_err()
                .contains("largest uint256")
        );
        assert_eq!("007".parse::<WeiAmount>().unwrap().as_decimal(), "7");
        assert!("-1".parse::<WeiAmount>().is_err());
        assert!("1e18".parse::<WeiAmount>().is_err());
        assert!("".parse::<WeiAmount>().is_err());
    }

    #[test]
    fn cid_round_trips_as_string() {
        let text = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku";
        let cid: ContentId = serde_json::from_str(&format!("\"{text}\"")).unwrap();
        assert_eq!(serde_json::to_string(&cid).unwrap(), format!("\"{text}\""));
        let err = serde_json::from_str::<ContentId>("\"bafy-not-a-cid\"").unwrap_err();
        assert!(err.to_string().contains("not a valid CID"), "{err}");
    }
}
