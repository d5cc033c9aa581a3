// The portal's escrow calls against the real contract on a real node: JobEscrow deployed from
// the committed artifact to anvil, funded with createJob exactly as the job page sends it, and
// a paid worker's credit read and withdrawn as the earnings page does.
// Needs anvil (scripts/install/npm-tools puts it in .tools/bin); without it the suite says
// SKIPPED loudly, and fails instead when SHARDWORK_REQUIRE_SERVICES=1 (CI).
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPublicClient, createWalletClient, http, type Abi, type Address, type Hex } from 'viem';
import { readEarnings, sendWithdraw } from './earnings';
import { createJobCall, escrowAbi, escrowJobId, ETH, waitForReceipt } from './escrow';
import { assetOf, ETH_ASSET, fundingRevertMessage, sendFunding, tokenErrorsAbi, tokenStanding, type TokenFundingStep } from './stake';

const anvilBin = process.env.ANVIL_BIN ?? resolve(__dirname, '../../../.tools/bin/anvil');
const available = existsSync(anvilBin);
if (!available) {
  const note = `SKIPPED: portal escrow test on anvil (${anvilBin} not found; run scripts/install/npm-tools)`;
  if (process.env.SHARDWORK_REQUIRE_SERVICES === '1') throw new Error(note);
  console.warn(`!!!!! ${note}`);
  if (process.env.SHARDWORK_SKIP_LOG) appendFileSync(process.env.SHARDWORK_SKIP_LOG, `${note}\n`);
}

const artifact = JSON.parse(readFileSync(resolve(__dirname, '../../../contracts/artifacts/JobEscrow.json'), 'utf8')) as {
  abi: Abi;
  bytecode: Hex | { object: Hex };
};
const bytecode = (typeof artifact.bytecode === 'string' ? artifact.bytecode : artifact.bytecode.object) as Hex;
const tokenArtifact = JSON.parse(readFileSync(resolve(__dirname, '../../../contracts/artifacts/MockERC20.json'), 'utf8')) as {
  abi: Abi;
  bytecode: Hex | { object: Hex };
};
const tokenBytecode = (typeof tokenArtifact.bytecode === 'string' ? tokenArtifact.bytecode : tokenArtifact.bytecode.object) as Hex;

async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.on('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => done(port));
    });
  });
}

describe.runIf(available)('createJob on anvil', () => {
  let anvil: ChildProcess;
  let url: string;

  beforeAll(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    anvil = spawn(anvilBin, ['--port', String(port), '--host', '127.0.0.1', '--hardfork', 'osaka', '--enable-tx-gas-limit'], {
      stdio: 'ignore',
    });
    const client = createPublicClient({ transport: http(url) });
    for (let i = 0; i < 100; i++) {
      try {
        await client.getChainId();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    throw new Error('anvil did not answer within 10 s');
  }, 20_000);

  afterAll(() => {
    anvil?.kill();
  });

  it('escrows an ETH stake and returns the escrow job id from the receipt', async () => {
    const publicClient = createPublicClient({ transport: http(url) });
    const wallet = createWalletClient({ transport: http(url) });
    const [admin, operator, , , requester] = (await wallet.getAddresses()) as Address[];
    const deploy = await wallet.deployContract({
      abi: artifact.abi,
      bytecode,
      account: admin!,
      chain: null,
      args: [admin, operator, admin, admin, 250],
    });
    const escrow = (await waitForReceipt(publicClient, deploy)).contractAddress!;

    const block = await publicClient.getBlock();
    const funding = {
      chain_id: await publicClient.getChainId(),
      escrow_address: escrow,
      token: ETH,
      stake_wei: '500000000000000000',
      spec_cid: 'bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku',
      deadline_unix: Number(block.timestamp) + 7 * 86_400,
      kind: 1,
      max_fee_bps: 250,
    };
    const hash = await sendFunding(publicClient, wallet, requester!, funding, ETH_ASSET);
    const receipt = await waitForReceipt(publicClient, hash);
    expect(receipt.status).toBe('success');
    expect(escrowJobId(receipt, escrow)).toBe(1n);
    expect(await publicClient.getBalance({ address: escrow })).toBe(500000000000000000n);

    // The same terms again are a second job; a receipt from elsewhere names none.
    const second = await waitForReceipt(publicClient, await sendFunding(publicClient, wallet, requester!, funding, ETH_ASSET));
    expect(escrowJobId(second, escrow)).toBe(2n);
    expect(escrowJobId(second, operator!)).toBeNull();

    // A requester who accepts less than the escrow's fee (250 bps) is refused, not charged.
    const greedy = createJobCall({ ...funding, max_fee_bps: 100 });
    await expect(publicClient.simulateContract({ ...greedy, account: requester! })).rejects.toThrow(/FeeAboveMaximum/);
    await expect(sendFunding(publicClient, wallet, requester!, { ...funding, max_fee_bps: 100 }, ETH_ASSET)).rejects.toThrow();
    expect(await publicClient.getBalance({ address: escrow })).toBe(1000000000000000000n);

    // A single-contributor job runs and pays worker (the operator marks it started and
    // completes it); the worker reads its credit and reputation, withdraws, and then has
    // nothing left to withdraw.
    const [, , , , , worker] = (await wallet.getAddresses()) as Address[];
    const lora = await waitForReceipt(publicClient, await sendFunding(publicClient, wallet, requester!, { ...funding, kind: 0 }, ETH_ASSET));
    expect(escrowJobId(lora, escrow)).toBe(3n);
    const operatorCall = async (functionName: string, args: unknown[]) => {
      const hash = await wallet.writeContract({ address: escrow, abi: artifact.abi, functionName, args, account: operator!, chain: null });
      expect((await waitForReceipt(publicClient, hash)).status).toBe('success');
    };
    await operatorCall('markStarted', [3n]);
    await operatorCall('completeJob', [3n, 'bafyadapter', worker, 10_000]);
    const paid = 500000000000000000n - (500000000000000000n * 250n) / 10_000n;
    const before = await readEarnings(publicClient, escrow, worker!);
    expect(before.credit).toEqual([{ token: ETH, amount: paid }]);
    expect(before.reputationBps).toBeGreaterThan(0);
    const balance = await publicClient.getBalance({ address: worker! });
    const withdrawal = await waitForReceipt(publicClient, await sendWithdraw(publicClient, wallet, worker!, escrow, ETH));
    expect(withdrawal.status).toBe('success');
    const gas = withdrawal.gasUsed * withdrawal.effectiveGasPrice;
    expect(await publicClient.getBalance({ address: worker! })).toBe(balance + paid - gas);
    expect((await readEarnings(publicClient, escrow, worker!)).credit).toEqual([{ token: ETH, amount: 0n }]);
    await expect(sendWithdraw(publicClient, wallet, worker!, escrow, ETH)).rejects.toThrow(/NothingToWithdraw/);
  }, 30_000);

  it('escrows a token stake after approving it, and names an unlisted token and a short balance', async () => {
    const publicClient = createPublicClient({ transport: http(url) });
    const wallet = createWalletClient({ transport: http(url) });
    const [admin, operator, , , , , requester, broke] = (await wallet.getAddresses()) as Address[];
    const mined = async (hash: Hex) => expect((await waitForReceipt(publicClient, hash)).status).toBe('success');
    const escrow = (await waitForReceipt(
      publicClient,
      await wallet.deployContract({ abi: artifact.abi, bytecode, account: admin!, chain: null, args: [admin, operator, admin, admin, 250] }),
    )).contractAddress!;
    const token = (await waitForReceipt(
      publicClient,
      await wallet.deployContract({ abi: tokenArtifact.abi, bytecode: tokenBytecode, account: admin!, chain: null, args: ['Test Dollar', 'tUSD'] }),
    )).contractAddress!;
    const stake = 250n * 10n ** 18n;
    await mined(await wallet.writeContract({ address: token, abi: tokenArtifact.abi, functionName: 'mint', args: [requester, stake * 2n], account: admin!, chain: null }));
    const asset = assetOf(token, [{ address: token, symbol: 'tUSD', name: 'Test Dollar', decimals: 18 }]);
    const block = await publicClient.getBlock();
    const funding = {
      chain_id: await publicClient.getChainId(),
      escrow_address: escrow,
      token,
      stake_wei: stake.toString(),
      spec_cid: 'bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku',
      deadline_unix: Number(block.timestamp) + 7 * 86_400,
      kind: 1,
      max_fee_bps: 250,
    };

    // Not on the allow-list: refused by name before anything is sent, the approval included.
    const unlisted = await sendFunding(publicClient, wallet, requester!, funding, asset).catch((e: unknown) => e);
    expect(fundingRevertMessage(unlisted, asset)).toMatch(/^The escrow does not accept tUSD/);
    expect(await tokenStanding(publicClient, token, requester!, escrow)).toEqual({ balance: stake * 2n, allowance: 0n });
    await mined(await wallet.writeContract({ address: escrow, abi: artifact.abi, functionName: 'setTokenAllowed', args: [token, true], account: admin!, chain: null }));

    // Listed, but the escrow may not take the requester's tokens yet, or the account has none.
    const direct = await publicClient
      .simulateContract({ ...createJobCall(funding), abi: [...escrowAbi, ...tokenErrorsAbi], account: requester! })
      .catch((e: unknown) => e);
    expect(fundingRevertMessage(direct, asset)).toBe(
      'The escrow may take only 0 tUSD of your tUSD, and the stake is 250 tUSD: approve the escrow for the stake and fund again.',
    );
    const poor = await sendFunding(publicClient, wallet, broke!, funding, asset).catch((e: unknown) => e);
    expect(fundingRevertMessage(poor, asset)).toBe('Your balance is 0 tUSD, below the stake of 250 tUSD.');

    // Approve exactly the stake, then createJob: the escrow holds the stake, the allowance is spent.
    const steps: TokenFundingStep['step'][] = [];
    const receipt = await waitForReceipt(publicClient, await sendFunding(publicClient, wallet, requester!, funding, asset, (s) => steps.push(s.step)));
    expect(receipt.status).toBe('success');
    expect(steps).toEqual(['approving', 'approving', 'funding']);
    expect(escrowJobId(receipt, escrow)).toBe(1n);
    expect(await tokenStanding(publicClient, token, requester!, escrow)).toEqual({ balance: stake, allowance: 0n });
    expect(await tokenStanding(publicClient, token, escrow, escrow)).toMatchObject({ balance: stake });
    // An allowance that already covers the stake is not asked for again.
    await mined(await wallet.writeContract({ address: token, abi: tokenArtifact.abi, functionName: 'approve', args: [escrow, stake], account: requester!, chain: null }));
    const again: TokenFundingStep['step'][] = [];
    await waitForReceipt(publicClient, await sendFunding(publicClient, wallet, requester!, funding, asset, (s) => again.push(s.step)));
    expect(again).toEqual(['funding']);
  }, 30_000);
});
