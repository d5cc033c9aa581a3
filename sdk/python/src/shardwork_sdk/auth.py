"""Sign-In with Ethereum (EIP-4361): the message the key signs, and the API's token exchange."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Sequence

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount

from .models import NonceResponse, TokenResponse
from .transport import Transport

#: Account 3 of the public development mnemonic (anvil's and `shardwork up`'s), the CLI's
#: `--dev-requester`. Only for a local marketplace on a development chain.
DEV_REQUESTER_KEY = "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6"

STATEMENT = "Sign in to Shardwork"


def _rfc3339(t: datetime) -> str:
    # Whole seconds in UTC with a Z, as the server renders them (chrono's SecondsFormat::Secs).
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def siwe_message(
    *,
    domain: str,
    address: str,
    uri: str,
    chain_id: int,
    nonce: str,
    issued_at: datetime,
    expiration_time: datetime | None = None,
    statement: str | None = STATEMENT,
) -> str:
    """Renders an EIP-4361 message, line for line as the server parses it
    (core/src/protocol/siwe.rs). ``address`` must be EIP-55 checksummed."""
    lines = [f"{domain} wants you to sign in with your Ethereum account:", address, ""]
    if statement is not None:
        lines += [statement, ""]
    lines += [
        f"URI: {uri}",
        "Version: 1",
        f"Chain ID: {chain_id}",
        f"Nonce: {nonce}",
        f"Issued At: {_rfc3339(issued_at)}",
    ]
    if expiration_time is not None:
        lines.append(f"Expiration Time: {_rfc3339(expiration_time)}")
    return "\n".join(lines)


def load_account(key: str | bytes | LocalAccount) -> LocalAccount:
    """A signer from a hex private key (with or without 0x), raw bytes, or an eth-account
    account; a malformed key is refused with a clear message (never echoing the key)."""
    if isinstance(key, LocalAccount):
        return key
    try:
        return Account.from_key(key)
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a secp256k1 private key (32 bytes, hex): {type(e).__name__}") from None


class SignIn:
    """Holds the access token of one key; signs in on first use and again when the API
    refuses the token (expired), so long follows outlive a token."""

    def __init__(self, transport: Transport, account: LocalAccount, roles: Sequence[str] = ()) -> None:
        self.transport = transport
        self.account = account
        self.roles = list(roles)
        self._token: str | None = None
        self.tokens: TokenResponse | None = None
        self._lock = threading.Lock()

    def __call__(self, refresh: bool) -> str:
        with self._lock:
            if refresh or self._token is None:
                self.tokens = self.sign_in()
                self._token = self.tokens.access_token
            return self._token

    def sign_in(self) -> TokenResponse:
        """Asks for a nonce, signs the SIWE message with EIP-191 ``personal_sign``, and trades
        it for tokens."""
        nonce = NonceResponse.model_validate(
            self.transport.request("POST", "/v1/auth/nonce", auth=False).json()
        )
        now = datetime.now(timezone.utc)
        message = siwe_message(
            domain=nonce.domain,
            address=self.account.address,
            uri=f"http://{nonce.domain}",
            chain_id=nonce.chain_id,
            nonce=nonce.nonce,
            issued_at=now,
            expiration_time=now + timedelta(minutes=10),
        )
        signature = self.account.sign_message(encode_defunct(text=message)).signature
        body = {"message": message, "signature": "0x" + bytes(signature).hex(), "roles": self.roles}
        # Not retried: the nonce is spent by the first verify that reaches the server.
        response = self.transport.request("POST", "/v1/auth/verify", json=body, auth=False, retry=False)
        return TokenResponse.model_validate(response.json())
