import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ETH } from './escrow';
import { assetOf, ETH_ASSET, formatAmount, stakeAssetOf, tokenErrorsAbi } from './stake';

const tUSD = { address: '0x1111111111111111111111111111111111111111', symbol: 'tUSD', name: 'Test Dollar', decimals: 6 };

describe('assetOf', () => {
  it('reads no token and the zero address as ETH', () => {
    expect(assetOf(undefined, [tUSD])).toBe(ETH_ASSET);
    expect(assetOf(ETH, [tUSD])).toBe(ETH_ASSET);
  });

  it('describes a listed token from the allow-list, whatever its case', () => {
    expect(assetOf(tUSD.address.toUpperCase().replace('0X', '0x'), [tUSD])).toEqual({
      address: tUSD.address,
      symbol: 'tUSD',
      decimals: 6,
      isEth: false,
      named: true,
    });
  });

  it('counts an unknown token in its smallest unit, named by its address', () => {
    const other = assetOf('0x2222222222222222222222222222222222222222', [tUSD]);
    expect(other).toMatchObject({ symbol: 'units of 0x2222…2222', decimals: 0, isEth: false, named: false });
    expect(formatAmount(1234n, other)).toBe('1234 units of 0x2222…2222');
  });

  it('takes the token from a job spec', () => {
    expect(stakeAssetOf({ stake: { amount: '1', token: tUSD.address } }, [tUSD]).symbol).toBe('tUSD');
    expect(stakeAssetOf({ stake: { amount: '1' } }, [tUSD])).toBe(ETH_ASSET);
    expect(stakeAssetOf(null, [tUSD])).toBe(ETH_ASSET);
  });
});

describe('formatAmount', () => {
  const asset = assetOf(tUSD.address, [tUSD]);
  it('shows whole tokens with the decimals that matter', () => {
    expect(formatAmount('250000000', asset)).toBe('250 tUSD');
    expect(formatAmount(1_234_567n, asset, 2)).toBe('1.23 tUSD');
  });
  it('never shows a non-zero amount as 0', () => {
    expect(formatAmount(1n, asset, 4)).toBe('1 × 10^-6 tUSD');
    expect(formatAmount(0n, asset)).toBe('0 tUSD');
  });
  it('keeps the ETH formatting for ETH', () => {
    expect(formatAmount(10n ** 17n, ETH_ASSET)).toBe('0.1 ETH');
  });
});

describe('tokenErrorsAbi', () => {
  it('matches the committed MockERC20 (OpenZeppelin ERC-20) artifact', () => {
    type Item = { type: string; name: string; inputs: readonly { type: string }[] };
    const artifact = JSON.parse(readFileSync(resolve(__dirname, '../../../contracts/artifacts/MockERC20.json'), 'utf8')) as {
      abi: Item[];
    };
    const signature = (x: Item) => `${x.name}(${x.inputs.map((i) => i.type).join(',')})`;
    for (const ours of tokenErrorsAbi) {
      const theirs = artifact.abi.find((x) => x.type === 'error' && x.name === ours.name);
      expect(theirs, ours.name).toBeDefined();
      expect(signature(ours)).toBe(signature(theirs!));
    }
  });
});
