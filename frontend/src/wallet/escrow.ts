// The part of JobEscrow (contracts/src/JobEscrow.sol) the portal calls. Written out as a
// constant so viem types the call; escrow.test.ts checks it against the committed artifact.
import { decodeEventLog, type Address, type Hash, type PublicClient, type TransactionReceipt } from 'viem';

export const escrowAbi = [
  {
    type: 'function',
    name: 'createJob',
    stateMutability: 'payable',
    inputs: [
      { name: 'token', type: 'address', internalType: 'address' },
      { name: 'stake', type: 'uint256', internalType: 'uint256' },
      { name: 'specCid', type: 'string', internalType: 'string' },
      { name: 'deadline', type: 'uint64', internalType: 'uint64' },
      { name: 'kind', type: 'uint8', internalType: 'enum JobEscrow.JobKind' },
      { name: 'maxFeeBps', type: 'uint16', internalType: 'uint16' },
    ],
    outputs: [{ name: 'jobId', type: 'uint256', internalType: 'uint256' }],
  },
  {
    type: 'function',
    name: 'tokenAllowed',
    stateMutability: 'view',
    inputs: [{ name: 'token', type: 'address', internalType: 'address' }],
    outputs: [{ name: '', type: 'bool', internalType: 'bool' }],
  },
  {
    type: 'event',
    name: 'JobCreated',
    anonymous: false,
    inputs: [
      { name: 'jobId', type: 'uint256', indexed: true, internalType: 'uint256' },
      { name: 'requester', type: 'address', indexed: true, internalType: 'address' },
      { name: 'token', type: 'address', indexed: true, internalType: 'address' },
      { name: 'stake', type: 'uint256', indexed: false, internalType: 'uint256' },
      { name: 'deadline', type: 'uint64', indexed: false, internalType: 'uint64' },
      { name: 'kind', type: 'uint8', indexed: false, internalType: 'enum JobEscrow.JobKind' },
      { name: 'feeBps', type: 'uint16', indexed: false, internalType: 'uint16' },
      { name: 'specHash', type: 'bytes32', indexed: false, internalType: 'bytes32' },
      { name: 'specCid', type: 'string', indexed: false, internalType: 'string' },
    ],
  },
  {
    type: 'error',
    name: 'TokenNotAllowed',
    inputs: [{ name: 'token', type: 'address', internalType: 'address' }],
  },
  {
    type: 'error',
    name: 'FeeAboveMaximum',
    inputs: [
      { name: 'feeBps', type: 'uint256', internalType: 'uint256' },
      { name: 'requesterMaxFeeBps', type: 'uint256', internalType: 'uint256' },
    ],
  },
] as const;

export const ETH: Address = '0x0000000000000000000000000000000000000000';

/**
 * The `createJob` arguments `GET /v1/jobs/{id}` carries as `funding` while a job is
 * `awaiting_funding`; the contract is the one `GET /v1/chain` names.
 */
export interface FundingTerms {
  /** The zero address for ETH. */
  token: string;
  stake_wei: string;
  spec_cid: string;
  deadline_unix: number;
  /** JobEscrow.JobKind: 0 LoRA, 1 Federated. */
  kind: number;
  /** The highest platform fee (basis points) the requester accepts; a higher fee reverts. */
  max_fee_bps: number;
}

/** Terms plus where to send them. */
export interface Funding extends FundingTerms {
  chain_id: number;
  escrow_address: string;
}

/** The createJob call a funding object asks for; ETH stakes travel as the call's value. */
export function createJobCall(funding: Funding) {
  const token = funding.token as Address;
  const stake = BigInt(funding.stake_wei);
  return {
    address: funding.escrow_address as Address,
    abi: escrowAbi,
    functionName: 'createJob' as const,
    args: [token, stake, funding.spec_cid, BigInt(funding.deadline_unix), funding.kind, funding.max_fee_bps] as const,
    value: token.toLowerCase() === ETH ? stake : 0n,
  };
}

/** The escrow's job id from a createJob receipt, or null if the receipt has no JobCreated. */
export function escrowJobId(receipt: TransactionReceipt, escrow: string): bigint | null {
  for (const log of receipt.logs) {
    if (log.address.toLowerCase() !== escrow.toLowerCase()) continue;
    try {
      const decoded = decodeEventLog({ abi: escrowAbi, data: log.data, topics: log.topics });
      if (decoded.eventName === 'JobCreated') return decoded.args.jobId;
    } catch {
      // Another event of the escrow.
    }
  }
  return null;
}

/**
 * The receipt of `hash` once it is mined. viem's wait looks a receipt up again only when it sees
 * a new block number, so on an automining dev chain (anvil) a receipt not yet readable when its
 * block's number is first seen is not asked for again until some other transaction mines a
 * block, which on an idle chain never comes (the portal e2e's token funding once waited out its
 * minute that way, with no error shown). The receipt is therefore also asked for directly every
 * `pollMs`; whichever finds it first wins, and viem's wait still follows a replaced transaction.
 */
export async function waitForReceipt(
  client: Pick<PublicClient, 'waitForTransactionReceipt' | 'getTransactionReceipt'>,
  hash: Hash,
  pollMs = 1_000,
): Promise<TransactionReceipt> {
  const stop = new AbortController();
  const direct = async (): Promise<TransactionReceipt> => {
    for (;;) {
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => (clearTimeout(timer), reject(stop.signal.reason));
        // Each interval's listener goes with it, so a long wait does not pile them up.
        const timer = setTimeout(() => (stop.signal.removeEventListener('abort', onAbort), resolve()), pollMs);
        stop.signal.addEventListener('abort', onAbort, { once: true });
      });
      // Not found (pending) or a passing RPC error: ask again after the next interval.
      const receipt = await client.getTransactionReceipt({ hash }).catch(() => null);
      if (receipt) return receipt;
    }
  };
  try {
    return await Promise.race([client.waitForTransactionReceipt({ hash, pollingInterval: pollMs, signal: stop.signal }), direct()]);
  } finally {
    stop.abort();
  }
}
