// What a job is staked in, and funding a stake in an ERC-20. ETH travels as createJob's value;
// a token moves by the escrow's transferFrom, so the requester first approves the escrow for
// the stake. The tokens on offer are the escrow's allow-list as `GET /v1/chain` lists it.
import {
  BaseError,
  ContractFunctionRevertedError,
  erc20Abi,
  formatUnits,
  type Address,
  type Hash,
  type PublicClient,
  type WalletClient,
} from 'viem';
import { eth } from '../format';
import { createJobCall, ETH, escrowAbi, waitForReceipt, type Funding } from './escrow';

/**
 * The errors of an OpenZeppelin ERC-20 (IERC20Errors) a token stake's transferFrom reverts
 * with; the escrow passes them on, so createJob is simulated with them to name the cause.
 * stake.test.ts checks them against the committed MockERC20 artifact.
 */
export const tokenErrorsAbi = [
  {
    type: 'error',
    name: 'ERC20InsufficientAllowance',
    inputs: [
      { name: 'spender', type: 'address', internalType: 'address' },
      { name: 'allowance', type: 'uint256', internalType: 'uint256' },
      { name: 'needed', type: 'uint256', internalType: 'uint256' },
    ],
  },
  {
    type: 'error',
    name: 'ERC20InsufficientBalance',
    inputs: [
      { name: 'sender', type: 'address', internalType: 'address' },
      { name: 'balance', type: 'uint256', internalType: 'uint256' },
      { name: 'needed', type: 'uint256', internalType: 'uint256' },
    ],
  },
] as const;

/** A token the escrow accepts, as `GET /v1/chain` lists it. */
export interface StakeToken {
  address: string;
  symbol?: string | null;
  name?: string | null;
  decimals?: number | null;
}

/** What an amount is counted in: ETH (wei) or one ERC-20 (its smallest unit). */
export interface Asset {
  /** The zero address for ETH. */
  address: string;
  symbol: string;
  /** Decimals of one whole unit; 0 when a token does not say (amounts then in its smallest unit). */
  decimals: number;
  isEth: boolean;
  /** Whether `symbol` is the asset's own (ETH, or a listed token's `symbol()`), not a stand-in. */
  named: boolean;
}

export const ETH_ASSET: Asset = { address: ETH, symbol: 'ETH', decimals: 18, isEth: true, named: true };

/** The asset `token` names (absent or the zero address: ETH), described from the allow-list. */
export function assetOf(token: string | null | undefined, tokens: readonly StakeToken[]): Asset {
  if (!token || token.toLowerCase() === ETH) return ETH_ASSET;
  const known = tokens.find((t) => t.address.toLowerCase() === token.toLowerCase());
  const short = `${token.slice(0, 6)}…${token.slice(-4)}`;
  return {
    address: token.toLowerCase(),
    symbol: known?.symbol || `units of ${short}`,
    decimals: known?.decimals ?? 0,
    isEth: false,
    named: Boolean(known?.symbol),
  };
}

/** `units` of `asset` with at most `digits` decimals, trailing zeros dropped ("250 tUSD"). */
export function formatAmount(units: bigint | string, asset: Asset, digits = 4): string {
  const value = typeof units === 'string' ? BigInt(units) : units;
  if (asset.isEth) return eth(value, digits);
  const [whole, frac = ''] = formatUnits(value, asset.decimals).split('.');
  const cut = frac.slice(0, digits).replace(/0+$/, '');
  const shown = `${whole}${cut ? `.${cut}` : ''}`;
  // Too small to show at this precision: the smallest unit, never a misleading "0".
  if (shown === '0' && value !== 0n) return `${value} × 10^-${asset.decimals} ${asset.symbol}`;
  return `${shown} ${asset.symbol}`;
}

/** The asset a job is staked in, from its spec (`stake.token`; absent for ETH). */
export function stakeAssetOf(spec: unknown, tokens: readonly StakeToken[]): Asset {
  const token = (spec as { stake?: { token?: unknown } } | null)?.stake?.token;
  return assetOf(typeof token === 'string' ? token : null, tokens);
}

/** The requester's balance of the stake's token and what the escrow may already take of it. */
export interface TokenStanding {
  balance: bigint;
  allowance: bigint;
}

export async function tokenStanding(client: PublicClient, token: Address, owner: Address, escrow: Address): Promise<TokenStanding> {
  const [balance, allowance] = await Promise.all([
    client.readContract({ address: token, abi: erc20Abi, functionName: 'balanceOf', args: [owner] }),
    client.readContract({ address: token, abi: erc20Abi, functionName: 'allowance', args: [owner, escrow] }),
  ]);
  return { balance, allowance };
}

/** A funding refused before anything was sent: the sentence says why. */
export class FundingRefused extends Error {
  override name = 'FundingRefused';
}

/** What the funding of a token stake did, step by step, for the page to show. */
export type TokenFundingStep = { step: 'approving'; hash?: Hash } | { step: 'funding' };

/**
 * Funds `funding` from `account`. For a token stake it first checks that the escrow accepts the
 * token and that the balance covers the stake (so no approval is spent on a funding that would
 * fail), then approves the escrow for exactly the stake when its allowance is short and waits
 * for that to be mined. createJob is simulated before it is sent, so a refusal comes back as
 * the contract's reason instead of reaching the wallet. `asset` names amounts in the refusals.
 */
export async function sendFunding(
  client: PublicClient,
  wallet: WalletClient,
  account: Address,
  funding: Funding,
  asset: Asset,
  onStep: (step: TokenFundingStep) => void = () => {},
): Promise<Hash> {
  const call = createJobCall(funding);
  const token = funding.token.toLowerCase() as Address;
  if (token !== ETH) {
    const stake = BigInt(funding.stake_wei);
    const escrow = funding.escrow_address as Address;
    const [accepted, { balance, allowance }] = await Promise.all([
      client.readContract({ address: escrow, abi: escrowAbi, functionName: 'tokenAllowed', args: [token] }),
      tokenStanding(client, token, account, escrow),
    ]);
    if (!accepted) throw new FundingRefused(notAccepted(asset));
    if (balance < stake) throw new FundingRefused(shortBalance(balance, stake, asset));
    if (allowance < stake) {
      onStep({ step: 'approving' });
      const { request } = await client.simulateContract({
        address: token,
        abi: erc20Abi,
        functionName: 'approve',
        args: [escrow, stake],
        account,
      });
      const hash = await wallet.writeContract({ ...request, chain: null });
      onStep({ step: 'approving', hash });
      const receipt = await waitForReceipt(client, hash);
      if (receipt.status !== 'success') throw new Error('The approval was reverted by the token contract.');
    }
  }
  onStep({ step: 'funding' });
  await client.simulateContract({ ...call, abi: [...escrowAbi, ...tokenErrorsAbi], account });
  return wallet.writeContract({ ...call, account, chain: null });
}

/**
 * A sentence for a refused funding: the escrow's and the token's custom errors by name, in the
 * stake's own units; null when `err` is no contract revert (a declined wallet, a network error).
 */
export function fundingRevertMessage(err: unknown, asset: Asset): string | null {
  if (err instanceof FundingRefused) return err.message;
  if (!(err instanceof BaseError)) return null;
  const revert = err.walk((e) => e instanceof ContractFunctionRevertedError);
  if (!(revert instanceof ContractFunctionRevertedError)) return null;
  const name = revert.data?.errorName;
  const args = (revert.data?.args ?? []) as readonly unknown[];
  const amount = (i: number) => (typeof args[i] === 'bigint' ? formatAmount(args[i] as bigint, asset, 6) : '?');
  switch (name) {
    case 'TokenNotAllowed':
      return notAccepted(asset);
    case 'ERC20InsufficientAllowance':
      return `The escrow may take only ${amount(1)} of your ${asset.symbol}, and the stake is ${amount(2)}: approve the escrow for the stake and fund again.`;
    case 'ERC20InsufficientBalance':
      return shortBalance(args[1] as bigint, args[2] as bigint, asset);
    case 'FeeAboveMaximum':
      return `The escrow's fee (${String(args[0])} bps) is above the highest you accepted (${String(args[1])} bps).`;
    default:
      return revert.shortMessage;
  }
}

function notAccepted(asset: Asset): string {
  return `The escrow does not accept ${asset.symbol} (${asset.address}): it is not on its allow-list. Post the job again staked in ETH or a listed token.`;
}

function shortBalance(balance: bigint, stake: bigint, asset: Asset): string {
  return `Your balance is ${formatAmount(balance, asset, 6)}, below the stake of ${formatAmount(stake, asset, 6)}.`;
}
