// A worker's earnings in the escrow (contracts/src/JobEscrow.sol), read from the chain and
// withdrawn with the operator's wallet. The escrow pays by pull: a payout credits each
// contributor in the contract, and the credit waits there until its owner withdraws it. The
// assets are ETH and every token the escrow ever allow-listed (its TokenAllowed events): a token
// taken off the list keeps its credits. A worker's bond (decisions/0044) is read and managed
// here too: bonded jobs lease tasks only against its active part. escrow.test.ts checks this ABI
// against the artifact.
import { type Address, type Hash, type PublicClient, type WalletClient } from 'viem';
import { ETH } from './escrow';

export const earningsAbi = [
  {
    type: 'function',
    name: 'withdraw',
    stateMutability: 'nonpayable',
    inputs: [{ name: 'token', type: 'address', internalType: 'address' }],
    outputs: [],
  },
  {
    type: 'function',
    name: 'withdrawable',
    stateMutability: 'view',
    inputs: [
      { name: 'account', type: 'address', internalType: 'address' },
      { name: 'token', type: 'address', internalType: 'address' },
    ],
    outputs: [{ name: 'amount', type: 'uint256', internalType: 'uint256' }],
  },
  {
    type: 'function',
    name: 'reputationOf',
    stateMutability: 'view',
    inputs: [{ name: 'account', type: 'address', internalType: 'address' }],
    outputs: [{ name: '', type: 'uint16', internalType: 'uint16' }],
  },
  {
    type: 'function',
    name: 'bond',
    stateMutability: 'payable',
    inputs: [
      { name: 'token', type: 'address', internalType: 'address' },
      { name: 'amount', type: 'uint256', internalType: 'uint256' },
    ],
    outputs: [],
  },
  {
    type: 'function',
    name: 'requestUnbond',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'token', type: 'address', internalType: 'address' },
      { name: 'amount', type: 'uint256', internalType: 'uint256' },
    ],
    outputs: [],
  },
  {
    type: 'function',
    name: 'completeUnbond',
    stateMutability: 'nonpayable',
    inputs: [{ name: 'token', type: 'address', internalType: 'address' }],
    outputs: [],
  },
  {
    type: 'function',
    name: 'bondOf',
    stateMutability: 'view',
    inputs: [
      { name: 'worker', type: 'address', internalType: 'address' },
      { name: 'token', type: 'address', internalType: 'address' },
    ],
    outputs: [
      {
        name: '',
        type: 'tuple',
        internalType: 'struct JobEscrow.Bond',
        components: [
          { name: 'active', type: 'uint128', internalType: 'uint128' },
          { name: 'unbonding', type: 'uint128', internalType: 'uint128' },
          { name: 'unlockAt', type: 'uint64', internalType: 'uint64' },
        ],
      },
    ],
  },
  {
    type: 'event',
    name: 'TokenAllowed',
    anonymous: false,
    inputs: [
      { name: 'token', type: 'address', indexed: true, internalType: 'address' },
      { name: 'allowed', type: 'bool', indexed: false, internalType: 'bool' },
      { name: 'index', type: 'uint8', indexed: false, internalType: 'uint8' },
    ],
  },
  {
    type: 'error',
    name: 'NothingToWithdraw',
    inputs: [
      { name: 'account', type: 'address', internalType: 'address' },
      { name: 'token', type: 'address', internalType: 'address' },
    ],
  },
] as const;

/** One asset's credit: what the account can withdraw now. */
export interface Credit {
  /** The zero address for ETH. */
  token: Address;
  amount: bigint;
}

/** One asset's bond: `active` backs claims; `unbonding` is credited back at `unlockAt`. */
export interface Bond {
  token: Address;
  active: bigint;
  unbonding: bigint;
  /** Unix seconds; 0 when nothing is unbonding. */
  unlockAt: number;
}

export interface Earnings {
  /** ETH always first; tokens only where there is something to withdraw. */
  credit: Credit[];
  /** ETH always first; tokens only where something is bonded or unbonding. */
  bonds: Bond[];
  /** On-chain reputation, basis points (0 ..= 10,000). */
  reputationBps: number;
}

/** ETH, then each token the escrow's TokenAllowed events name, once, in their order. */
export function assetsOf(allowed: readonly { token?: Address | undefined }[]): Address[] {
  const assets: Address[] = [ETH];
  for (const e of allowed) {
    if (e.token && !assets.some((a) => a.toLowerCase() === e.token!.toLowerCase())) assets.push(e.token);
  }
  return assets;
}

/** The account's credit per asset and its reputation, read from the escrow. */
export async function readEarnings(client: PublicClient, escrow: Address, account: Address): Promise<Earnings> {
  const allowed = await client.getContractEvents({ address: escrow, abi: earningsAbi, eventName: 'TokenAllowed', fromBlock: 0n });
  const assets = assetsOf(allowed.map((e) => e.args));
  const amounts = await Promise.all(
    assets.map((token) => client.readContract({ address: escrow, abi: earningsAbi, functionName: 'withdrawable', args: [account, token] })),
  );
  const reputation = await client.readContract({ address: escrow, abi: earningsAbi, functionName: 'reputationOf', args: [account] });
  const bonds = await Promise.all(
    assets.map((token) => client.readContract({ address: escrow, abi: earningsAbi, functionName: 'bondOf', args: [account, token] })),
  );
  return {
    credit: assets.map((token, i) => ({ token, amount: amounts[i]! })).filter((c) => c.token === ETH || c.amount > 0n),
    bonds: assets
      .map((token, i) => ({ token, active: bonds[i]!.active, unbonding: bonds[i]!.unbonding, unlockAt: Number(bonds[i]!.unlockAt) }))
      .filter((b) => b.token === ETH || b.active > 0n || b.unbonding > 0n),
    reputationBps: Number(reputation),
  };
}

/** What a bond change sends: bond ETH (as the value), ask part back, or collect what unbonded. */
export type BondAction =
  | { kind: 'bond'; amount: bigint }
  | { kind: 'unbond'; amount: bigint }
  | { kind: 'complete' };

/** The escrow call for `action` on the ETH bond. */
export function bondCall(escrow: Address, action: BondAction) {
  switch (action.kind) {
    case 'bond':
      return { address: escrow, abi: earningsAbi, functionName: 'bond' as const, args: [ETH, action.amount] as const, value: action.amount };
    case 'unbond':
      return { address: escrow, abi: earningsAbi, functionName: 'requestUnbond' as const, args: [ETH, action.amount] as const };
    case 'complete':
      return { address: escrow, abi: earningsAbi, functionName: 'completeUnbond' as const, args: [ETH] as const };
  }
}

/** Sends `action` from `account`, simulated first so a call that would revert says why here. */
export async function sendBond(
  client: PublicClient,
  wallet: WalletClient,
  account: Address,
  escrow: Address,
  action: BondAction,
): Promise<Hash> {
  const { request } = await client.simulateContract({ ...bondCall(escrow, action), account } as Parameters<PublicClient['simulateContract']>[0]);
  return wallet.writeContract({ ...request, chain: null } as Parameters<WalletClient['writeContract']>[0]);
}

/** The withdraw call for one asset (the escrow pays the caller, everything it is credited). */
export function withdrawCall(escrow: Address, token: Address) {
  return { address: escrow, abi: earningsAbi, functionName: 'withdraw' as const, args: [token] as const };
}

/**
 * Sends withdraw(token) from `account`; returns the hash once the wallet has sent it. The call
 * is simulated first, so a withdrawal that would revert (nothing credited) fails here with the
 * contract's reason instead of reaching the wallet.
 */
export async function sendWithdraw(
  client: PublicClient,
  wallet: WalletClient,
  account: Address,
  escrow: Address,
  token: Address,
): Promise<Hash> {
  const { request } = await client.simulateContract({ ...withdrawCall(escrow, token), account });
  return wallet.writeContract({ ...request, chain: null });
}
