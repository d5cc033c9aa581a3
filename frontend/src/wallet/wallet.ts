// The browser wallet: any EIP-1193 provider the page is given as `window.ethereum`, used
// through viem. The wallet signs and sends; the portal never holds a key.
import {
  createPublicClient,
  createWalletClient,
  custom,
  getAddress,
  type Address,
  type EIP1193Provider,
  type PublicClient,
  type WalletClient,
} from 'viem';

declare global {
  interface Window {
    ethereum?: EIP1193Provider;
  }
}

export function injectedProvider(): EIP1193Provider | null {
  return typeof window !== 'undefined' && window.ethereum ? window.ethereum : null;
}

export interface Wallet {
  provider: EIP1193Provider;
  wallet: WalletClient;
  public: PublicClient;
}

export function clientsFor(provider: EIP1193Provider): Wallet {
  const transport = custom(provider);
  return {
    provider,
    wallet: createWalletClient({ transport }),
    public: createPublicClient({ transport }),
  };
}

/** Asks the wallet for accounts (prompts the user the first time). */
export async function requestAccount(provider: EIP1193Provider): Promise<Address> {
  const accounts = await provider.request({ method: 'eth_requestAccounts' });
  const first = accounts[0];
  if (!first) throw new Error('The wallet shared no account. Unlock it and allow this site.');
  return getAddress(first);
}

/** Accounts already shared with this site, without prompting. */
export async function knownAccount(provider: EIP1193Provider): Promise<Address | null> {
  const accounts = await provider.request({ method: 'eth_accounts' });
  return accounts[0] ? getAddress(accounts[0]) : null;
}

export async function chainIdOf(provider: EIP1193Provider): Promise<number> {
  return Number.parseInt(await provider.request({ method: 'eth_chainId' }), 16);
}

/** Names of chains a user is likely to meet; others show as their id. */
const CHAIN_NAMES: Record<number, string> = {
  1: 'Ethereum',
  10: 'OP Mainnet',
  8453: 'Base',
  42161: 'Arbitrum One',
  11155111: 'Sepolia',
  31337: 'Local (anvil)',
};

export function chainName(id: number): string {
  return CHAIN_NAMES[id] ?? `chain ${id}`;
}

/** Explorer base for links to transactions, where the chain has a well-known one. */
const EXPLORERS: Record<number, string> = {
  1: 'https://etherscan.io',
  11155111: 'https://sepolia.etherscan.io',
  8453: 'https://basescan.org',
  10: 'https://optimistic.etherscan.io',
  42161: 'https://arbiscan.io',
};

export function txUrl(chainId: number | null, hash: string): string | null {
  const base = chainId === null ? undefined : EXPLORERS[chainId];
  return base ? `${base}/tx/${hash}` : null;
}

/** Why the wallet's chain cannot be used, or null when it is the API's. */
export function wrongChain(walletChain: number, apiChain: number): string | null {
  if (walletChain === apiChain) return null;
  return `Your wallet is on ${chainName(walletChain)} (${walletChain}); this marketplace runs on ${chainName(apiChain)} (${apiChain}). Switch networks in your wallet.`;
}

/** Asks the wallet to switch; wallets that cannot (or a user who declines) leave it to the user. */
export async function switchChain(provider: EIP1193Provider, chainId: number): Promise<void> {
  await provider.request({ method: 'wallet_switchEthereumChain', params: [{ chainId: `0x${chainId.toString(16)}` }] });
}

/** A wallet error as a sentence: user rejections (EIP-1193 code 4001) say so plainly. */
export function walletErrorMessage(err: unknown): string {
  const e = err as { code?: number; shortMessage?: string; message?: string; cause?: { code?: number } };
  if (e?.code === 4001 || e?.cause?.code === 4001) return 'You declined the request in your wallet.';
  if (e?.code === 4902) return 'Your wallet does not know this network; add it in the wallet first.';
  return e?.shortMessage ?? e?.message ?? String(err);
}
