import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { encodeFunctionData, toFunctionSelector, toEventSelector, type AbiFunction, type AbiEvent, type TransactionReceipt } from 'viem';
import { assetsOf, bondCall, earningsAbi, withdrawCall } from './earnings';
import { createJobCall, escrowAbi, ETH, waitForReceipt } from './escrow';

const artifact = JSON.parse(
  readFileSync(resolve(__dirname, '../../../contracts/artifacts/JobEscrow.json'), 'utf8'),
) as { abi: (AbiFunction | AbiEvent)[] };

describe('escrowAbi and earningsAbi', () => {
  it('match the committed JobEscrow artifact', () => {
    for (const ours of [...escrowAbi, ...earningsAbi]) {
      const theirs = artifact.abi.find((x) => x.type === ours.type && x.name === ours.name);
      expect(theirs, ours.name).toBeDefined();
      const sig = (x: AbiFunction | AbiEvent) => (x.type === 'function' ? toFunctionSelector(x) : toEventSelector(x));
      expect(sig(ours as AbiFunction | AbiEvent)).toBe(sig(theirs!));
      if (ours.type === 'function') expect((theirs as AbiFunction).stateMutability).toBe(ours.stateMutability);
    }
  });
});

describe('createJobCall', () => {
  const funding = {
    chain_id: 31337,
    escrow_address: '0x5FbDB2315678afecb367f032d93F642f64180aa3',
    token: '0x0000000000000000000000000000000000000000',
    stake_wei: '100000000000000000',
    spec_cid: 'bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku',
    deadline_unix: 1_800_000_000,
    kind: 1,
    max_fee_bps: 250,
  };

  it('sends an ETH stake as the value of the call', () => {
    const call = createJobCall(funding);
    expect(call.value).toBe(100000000000000000n);
    expect(call.args).toEqual([funding.token, 100000000000000000n, funding.spec_cid, 1_800_000_000n, 1, 250]);
    expect(encodeFunctionData({ abi: call.abi, functionName: call.functionName, args: call.args })).toMatch(/^0x/);
  });

  it('sends no value with an ERC-20 stake', () => {
    expect(createJobCall({ ...funding, token: '0x1111111111111111111111111111111111111111' }).value).toBe(0n);
  });
});

describe('earnings', () => {
  const token = '0x1111111111111111111111111111111111111111';

  it('looks at ETH and each allow-listed token once', () => {
    expect(assetsOf([])).toEqual([ETH]);
    expect(assetsOf([{ token }, { token: token.toUpperCase().replace('0X', '0x') as `0x${string}` }, {}])).toEqual([ETH, token]);
  });

  it('withdraws one asset per call', () => {
    const call = withdrawCall('0x5FbDB2315678afecb367f032d93F642f64180aa3', token);
    expect(call.args).toEqual([token]);
    expect(encodeFunctionData({ abi: call.abi, functionName: call.functionName, args: call.args })).toBe(
      `0x51cff8d9${token.slice(2).padStart(64, '0')}`,
    );
  });
});

describe('waitForReceipt', () => {
  const hash = `0x${'ab'.repeat(32)}` as const;
  const receipt = { transactionHash: hash, status: 'success' } as unknown as TransactionReceipt;

  it('finds a receipt by asking for it when no new block wakes viem up', async () => {
    let asked = 0;
    let viemStopped = false;
    const client = {
      // An idle automining chain: viem's wait sees no new block, so it never looks again.
      waitForTransactionReceipt: ({ signal }: { signal?: AbortSignal }) =>
        new Promise<TransactionReceipt>((_, reject) =>
          signal?.addEventListener('abort', () => ((viemStopped = true), reject(new Error('aborted')))),
        ),
      getTransactionReceipt: async () => {
        asked += 1;
        if (asked < 3) throw new Error('Transaction receipt could not be found');
        return receipt;
      },
    } as unknown as Parameters<typeof waitForReceipt>[0];
    await expect(waitForReceipt(client, hash, 5)).resolves.toBe(receipt);
    expect(asked).toBe(3);
    expect(viemStopped).toBe(true);
  });

  it("takes viem's receipt when it comes first and stops asking", async () => {
    let asked = 0;
    const client = {
      waitForTransactionReceipt: async () => receipt,
      getTransactionReceipt: async () => {
        asked += 1;
        return null;
      },
    } as unknown as Parameters<typeof waitForReceipt>[0];
    await expect(waitForReceipt(client, hash, 5)).resolves.toBe(receipt);
    await new Promise((r) => setTimeout(r, 30));
    expect(asked).toBe(0);
  });
});

describe('bondCall', () => {
  const escrow = '0x5FbDB2315678afecb367f032d93F642f64180aa3';

  it('sends the bonded ether as the value, and nothing with unbonding or collecting', () => {
    const bond = bondCall(escrow, { kind: 'bond', amount: 5n });
    expect(bond.functionName).toBe('bond');
    expect(bond.args).toEqual([ETH, 5n]);
    expect('value' in bond && bond.value).toBe(5n);
    const unbond = bondCall(escrow, { kind: 'unbond', amount: 2n });
    expect(unbond.functionName).toBe('requestUnbond');
    expect('value' in unbond).toBe(false);
    const complete = bondCall(escrow, { kind: 'complete' });
    expect(complete.functionName).toBe('completeUnbond');
    expect(complete.args).toEqual([ETH]);
    for (const call of [bond, unbond, complete]) {
      expect(encodeFunctionData({ abi: call.abi, functionName: call.functionName, args: call.args } as Parameters<typeof encodeFunctionData>[0])).toMatch(/^0x/);
    }
  });
});
