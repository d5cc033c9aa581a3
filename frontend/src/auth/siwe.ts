// The EIP-4361 message the wallet signs. The server (api/src/auth/siwe.rs, routes/auth.rs)
// checks: the domain equals its `siwe_domain`, the chain id equals its chain, version 1, the
// nonce it issued (single use, unexpired), `Issued At` not in the future, `Expiration Time` not
// passed, and an EIP-55 checksummed address that recovers from the personal_sign signature.
import { getAddress, type Address } from 'viem';
import { createSiweMessage } from 'viem/siwe';

export const SIGN_IN_STATEMENT = 'Sign in to Shardwork to post, fund and follow fine-tuning jobs.';

export interface SignInRequest {
  /** What the server says the message must name (`domain` of `POST /v1/auth/nonce`). */
  domain: string;
  /** Where the portal runs (`location.origin`). */
  origin: string;
  address: Address;
  chainId: number;
  nonce: string;
  issuedAt: Date;
  /** The nonce's expiry: a message is worth nothing after it. */
  expiresAt: Date;
}

/**
 * Why signing in from this page cannot work, or null. A wallet shows the domain to the user as
 * the site asking: a message naming another host than the page's is what phishing looks like,
 * so the portal refuses to build one rather than have the wallet warn.
 */
export function domainMismatch(serverDomain: string, pageHost: string): string | null {
  if (serverDomain === pageHost) return null;
  return (
    `This server signs users in for "${serverDomain}", but this page is served from "${pageHost}". ` +
    `Open the portal at http://${serverDomain}/ or set api.siwe_domain to "${pageHost}".`
  );
}

export function signInMessage(req: SignInRequest): string {
  return createSiweMessage({
    domain: req.domain,
    address: getAddress(req.address),
    statement: SIGN_IN_STATEMENT,
    uri: req.origin,
    version: '1',
    chainId: req.chainId,
    nonce: req.nonce,
    issuedAt: req.issuedAt,
    expirationTime: req.expiresAt,
  });
}
