import { describe, expect, it } from 'vitest';
import { bytes, eth, fixed, shortAddress, shortJobId } from './format';

describe('format', () => {
  it('shows wei as ETH with few decimals', () => {
    expect(eth(1500000000000000000n)).toBe('1.5 ETH');
    expect(eth('100000000000000000')).toBe('0.1 ETH');
    expect(eth(0n)).toBe('0 ETH');
    expect(eth(123456789n)).toBe('0.123 gwei');
    expect(eth(8492658000n, 6)).toBe('8.492 gwei');
    expect(eth(12n)).toBe('12 wei');
  });
  it('shortens addresses and sizes', () => {
    expect(shortAddress('0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266')).toBe('0xf39F…2266');
    expect(bytes(2048)).toBe('2.0 KiB');
  });
  it('keeps apart the short ids of jobs posted in the same minute', () => {
    const a = shortJobId('01a216ba-1d9c-7158-b507-e961aab4eeba');
    const b = shortJobId('01a216ba-01bb-703c-8ebf-f0f15bd9bd46');
    expect(a).toBe('01a216ba…eeba');
    expect(a).not.toBe(b);
  });
});

describe('fixed', () => {
  it('rounds a score and shows a missing one as a dash', () => {
    expect(fixed(0.8833333333, 4)).toBe('0.8833');
    expect(fixed(null, 3)).toBe('—');
    expect(fixed(undefined, 3)).toBe('—');
    expect(fixed(Number.NaN, 3)).toBe('—');
  });
});
