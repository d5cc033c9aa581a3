import { describe, expect, it } from 'vitest';
import { yScale } from './MetricChart';

describe('yScale', () => {
  it('covers every value with round ticks', () => {
    const s = yScale([0.52, 0.61, 0.74]);
    expect(s.min).toBeLessThanOrEqual(0.52);
    expect(s.max).toBeGreaterThanOrEqual(0.74);
    expect(s.ticks[0]).toBe(s.min);
    expect(s.ticks.length).toBeGreaterThanOrEqual(3);
    expect(s.ticks.length).toBeLessThanOrEqual(8);
  });
  it('gives a range to a single value', () => {
    const s = yScale([2.5]);
    expect(s.max).toBeGreaterThan(s.min);
    expect(yScale([0]).max).toBeGreaterThan(yScale([0]).min);
  });
});
