import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import type { LossSeries } from '../jobs/curves';
import { LossChart, stepTicks } from './LossChart';
import { Training } from './Training';

const series = (shard: number, attempt: number, latest: boolean, points: [number, number][]): LossSeries => ({
  key: `t${shard}/${attempt}`,
  taskId: `t${shard}`,
  shard,
  attempt,
  latest,
  status: 'leased',
  points: points.map(([step, loss]) => ({ step, loss })),
});

describe('stepTicks', () => {
  it('runs from 0 past the last step in whole, round steps', () => {
    expect(stepTicks(10)).toEqual([0, 5, 10]);
    expect(stepTicks(7)).toEqual([0, 2, 4, 6, 8]);
    expect(stepTicks(1)).toEqual([0, 1]);
    expect(stepTicks(0)).toEqual([0, 1]);
    const big = stepTicks(1234);
    expect(big[0]).toBe(0);
    expect(big.at(-1)).toBeGreaterThanOrEqual(1234);
    expect(big.every(Number.isInteger)).toBe(true);
  });
});

describe('LossChart', () => {
  it('draws a line per task and attempt, falling as the loss falls, with the numbers as a table', () => {
    const html = renderToStaticMarkup(
      <LossChart
        label="Training loss"
        totalSteps={10}
        series={[series(0, 1, false, [[1, 1.5], [2, 1.4]]), series(0, 2, true, [[1, 1.3], [5, 0.9], [9, 0.6]]), series(1, 1, true, [[3, 1.1]])]}
      />,
    );
    expect(html.match(/class="loss-line"/g)).toHaveLength(3);
    expect(html).toContain('role="img"');
    expect(html).toContain('loss-earlier');
    // Legend: one entry per task's latest attempt, plus the earlier-attempt key.
    expect(html.match(/legend--series/g)).toHaveLength(2);
    expect(html).toContain('earlier attempt');
    expect(html).toMatch(/<td>0<\/td><td>2<\/td><td>3<\/td><td>9<\/td><td>0.6<\/td>/);
    // SVG y grows downwards: the latest attempt's path goes down the page as its loss falls.
    const path = html.match(/data-series="t0\/2"><path d="([^"]+)"/)![1]!;
    const ys = [...path.matchAll(/[ML][\d.]+,([\d.]+)/g)].map((m) => Number(m[1]));
    expect(ys).toHaveLength(3);
    expect(ys[0]).toBeLessThan(ys[1]!);
    expect(ys[1]).toBeLessThan(ys[2]!);
  });

  it('says what it waits for when no worker has reported a loss', () => {
    expect(renderToStaticMarkup(<LossChart label="x" totalSteps={0} series={[]} />)).toContain('No worker has reported a training loss');
  });
});

describe('Training', () => {
  it('puts each round’s curves beside its held-out metric, named and judged by direction', () => {
    const html = renderToStaticMarkup(
      <Training
        rounds={[
          {
            round: 1,
            tasks: 2,
            totalSteps: 10,
            series: [series(0, 1, true, [[1, 1.2], [4, 0.9]])],
            heldOut: { metric: 1.25, base: 1.9, name: 'loss', direction: 'lower', improved: true },
          },
          { round: 2, tasks: 2, totalSteps: 0, series: [], heldOut: null },
        ]}
      />,
    );
    expect(html).toContain('1 of 2 tasks reporting');
    expect(html).toContain('Held-out loss (lower is better)');
    expect(html).toContain('better than the base model');
    expect(html).toContain('1.2500');
    expect(html).toContain('once the round&#x27;s adapters are merged');
  });
});
