import { renderToStaticMarkup } from 'react-dom/server';
import { describe, expect, it } from 'vitest';
import { MetricChart } from './MetricChart';

describe('MetricChart', () => {
  it('draws a point per round, the base line, and the same numbers as a table', () => {
    const html = renderToStaticMarkup(
      <MetricChart
        label="Held-out metric"
        points={[
          { round: 1, metric: 0.61, base: 0.5 },
          { round: 2, metric: 0.68, base: 0.5 },
          { round: 3, metric: 0.72, base: 0.5 },
        ]}
      />,
    );
    expect(html.match(/<circle /g)).toHaveLength(3);
    expect(html).toContain('class="chart-base"');
    expect(html).toContain('role="img"');
    expect(html).toMatch(/<td>3<\/td><td>0.72<\/td><td>0.5<\/td>/);
    // The line goes up as the metric does: SVG y grows downwards.
    const ys = [...html.matchAll(/<circle cx="[\d.]+" cy="([\d.]+)"/g)].map((m) => Number(m[1]));
    expect(ys[0]).toBeGreaterThan(ys[1]!);
    expect(ys[1]).toBeGreaterThan(ys[2]!);
  });

  it('says what it is waiting for when no round is scored', () => {
    expect(renderToStaticMarkup(<MetricChart label="x" points={[]} />)).toContain('No round has been scored yet');
  });
});
